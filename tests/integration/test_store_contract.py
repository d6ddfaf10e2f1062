"""The drain's store, twice: the same story against PostgreSQL (``PostgresStore``) and against
the in-memory fake the drain's unit tests use (tests/support/fake_store.py). Every step must
give the same answer on both, so the fake cannot drift from the SQL unnoticed."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

import pgdrain
from pgdrain.db import Connector, connect
from pgdrain.drain import PostgresStore
from pgdrain.models import Finish
from pgdrain.policy import Backoff
from pgdrain.registry import Registry
from tests.support.fake_store import FakeStore

pytestmark = pytest.mark.db

# Done rows kept: the story compares each job's row on both sides.
SETTINGS = pgdrain.Settings(backoff=Backoff(0, 0, jitter=0), retention_seconds=86400)
LEASE = 60


class Postgres:
    """The test's side of PostgreSQL, shaped like FakeStore's."""

    def __init__(self, database_url: str, conn: Any):
        self.conn = conn
        self.store = PostgresStore(Connector(
            lambda timeout=None: connect(database_url, timeout=timeout)))
        self.store.open(time.monotonic() + 30)

    def add(self, job_type: str, *, priority: int = 0, lost_claims: int = 0) -> int:
        ident = pgdrain.enqueue(self.conn, job_type, {}, priority=priority).id
        self.conn.run("UPDATE jobs SET lost_claims = :n WHERE id = :id", n=lost_claims, id=ident)
        return ident

    def state(self, ident: int) -> tuple[str, int, int]:
        [[status, attempts, lost]] = self.conn.run(
            "SELECT status, attempts, lost_claims FROM jobs WHERE id = :id", id=ident)
        return status, attempts, lost

    def expire(self, ident: int) -> None:
        self.conn.run("UPDATE jobs SET lease_expires_at = now() - interval '1 second' "
                      "WHERE id = :id", id=ident)


class Fake:
    def __init__(self) -> None:
        self.store = FakeStore()

    def add(self, job_type: str, *, priority: int = 0, lost_claims: int = 0) -> int:
        return self.store.add(job_type, priority=priority, lost_claims=lost_claims)

    def state(self, ident: int) -> tuple[str, int, int]:
        job = self.store.jobs[ident]
        return job["status"], job["attempts"], job["lost_claims"]

    def expire(self, ident: int) -> None:
        self.store.jobs[ident]["lease_expires_at"] = self.store.now - timedelta(seconds=1)


@pytest.fixture(params=["postgres", "fake"])
def side(request):
    if request.param == "fake":
        yield Fake()
        return
    postgres = Postgres(request.getfixturevalue("database_url"),
                        request.getfixturevalue("conn"))
    yield postgres
    postgres.store.discard()


def story(side: Postgres | Fake) -> list[Any]:
    """Claims, every outcome, a stale write, a lost claim refunded and claimed alone."""
    store, seen = side.store, []
    registry = Registry()
    a = side.add("t", priority=0)
    b = side.add("t", priority=1)
    c = side.add("t", priority=2)
    d = side.add("t", priority=3, lost_claims=1)
    names = {a: "a", b: "b", c: "c", d: "d"}

    def claimed(jobs):
        return [(names[j.id], j.attempts) for j in jobs]

    first = store.claim(batch_size=2, lease_seconds=LEASE, queues=None)
    seen.append(("claim 2", claimed(first)))
    alone = store.claim_alone(lease_seconds=LEASE, queues=None)
    seen.append(("claim alone", claimed([alone])))
    ja, jb = first
    written = store.finish_many([Finish.done(ja), Finish.retry(jb, "RuntimeError: x", 0),
                                 Finish.fail(alone, "Discard: no")])
    seen.append(("written", sorted(names[i] for i in written.ids), list(written.stale)))
    stale = store.finish_many([Finish.release(jb)])  # b's old claim: already retried
    seen.append(("stale", [names[i] for i in stale.stale], list(stale.ids)))
    second = store.claim(batch_size=5, lease_seconds=LEASE, queues=None)
    seen.append(("claim 5", claimed(second)))
    jb2, _ = second
    store.finish_many([Finish.snooze(jb2, 0)])
    side.expire(c)  # c's drain died before recording its start
    janitor = store.janitor(SETTINGS, registry)
    seen.append(("janitor", janitor.reclaimed, janitor.refunded, janitor.failed,
                 janitor.alone_due))
    seen.append(("claim 5 again", claimed(store.claim(batch_size=5, lease_seconds=LEASE,
                                                      queues=None))))
    again = store.claim_alone(lease_seconds=LEASE, queues=None)
    seen.append(("c alone", claimed([again])))
    side.expire(c)  # died again, its start recorded this time: charged
    janitor = store.janitor(SETTINGS, registry)
    seen.append(("janitor 2", janitor.reclaimed, janitor.refunded, janitor.failed))
    seen.append(("states", [side.state(i) for i in (a, b, c, d)]))
    return seen


EXPECTED = [
    ("claim 2", [("a", 1), ("b", 1)]),
    ("claim alone", [("d", 1)]),
    ("written", ["a", "b", "d"], []),
    ("stale", ["b"], []),
    ("claim 5", [("b", 2), ("c", 1)]),
    ("janitor", 1, 1, 0, True),
    ("claim 5 again", [("b", 2)]),  # b: snoozed (attempt given back); c: only alone now
    ("c alone", [("c", 1)]),        # the refunded claim did not count
    ("janitor 2", 1, 0, 0),
    ("states", [("done", 1, 0), ("running", 2, 0), ("pending", 1, 1), ("failed", 1, 1)]),
]


def test_the_fake_store_answers_as_postgresql_does(side):
    assert story(side) == EXPECTED
