"""Security (issue scenario 6): secrets never leak, and the functions run with minimum grants.

- Every API route requires auth: ``tests/unit/test_template.py`` checks it on the template as
  SAM's own translator expands it (``test_every_route_requires_auth`` and the stack rule).
- Secrets never leak: both functions run in process, in every situation where a credential is
  handled (a Secrets Manager secret that works, a password the server refuses, a server that
  is not there), and nothing they print, log, count or answer holds the password, the secret's
  JSON or the full connection string.
- Minimum grants: the SQL of ``docs/database-roles.md``, run as written (with unique role
  names), then every path of both functions as the app role, and what that role cannot do.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pg8000.native
import pytest

import pgdrain
from pgdrain import store
from pgdrain.db import connect
from pgdrain.migrate import migrate
from pgdrain.operator_store import grants_needed
from pgdrain.registry import Registry
from pgdrain.sql import migrations
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.integration import test_credentials_db as credential_tests
from tests.integration.test_cli import pgdrain_cli
from tests.reliability import faults
from tests.support.drains import run_drain
from tests.support.functions import load_event

# Fixtures shared with the function tests and the credential tests.
function_env = function_fixtures.function_env
load_function = function_fixtures.load_function
db = credential_tests.db
password_role = credential_tests.password_role
Coordinates = credential_tests.Coordinates

ROOT = Path(__file__).resolve().parents[2]


# --- secrets never leak ----------------------------------------------------------------------


@dataclass
class Transcript:
    """Everything both functions said in one situation."""

    texts: list[str] = field(default_factory=list)
    statuses: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, outcome: Any) -> None:
        if isinstance(outcome, BaseException):
            # What the Lambda runtime logs for an invocation that raised.
            self.statuses[name] = type(outcome).__name__
            self.texts.append("".join(traceback.format_exception(outcome)))
        else:
            # A drain's summary says why it stopped (database_error when it could not connect).
            self.statuses[name] = outcome.get("statusCode", outcome.get("stopped"))
            self.texts.append(json.dumps(outcome))

    def leaks(self, needles: dict[str, str]) -> list[str]:
        text = "\n".join(self.texts)
        return [name for name, needle in needles.items() if needle and needle in text]


def _invoke(app: Any, event: dict[str, Any]) -> Any:
    try:
        return app.lambda_handler(event, LambdaContext("pgdrain-security"))
    except Exception as exc:
        return exc


def _post(body: dict[str, Any]) -> dict[str, Any]:
    event = load_event("enqueue_single.json")
    event["body"] = json.dumps(body)
    return event


def _run_both_functions(load_function: Callable[..., Any], env: dict[str, str],
                        capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
                        ) -> Transcript:
    """Enqueue (valid, refused, GET) and drain (direct, API, schedule) with ``env``."""
    transcript = Transcript()
    capsys.readouterr()
    caplog.clear()
    enqueue = load_function("enqueue", **env)
    drain = load_function("drain", **env)
    transcript.add("enqueue", _invoke(enqueue, _post(
        {"jobs": [{"job_type": "test-noop"}, {"job_type": "test-boom"}]})))
    transcript.add("refused", _invoke(enqueue, _post({"job_type": "no-such-type"})))
    transcript.add("get", _invoke(enqueue, load_event("job_get.json")))
    transcript.add("drain", _invoke(drain, load_event("drain_direct.json")))
    transcript.add("drain_api", _invoke(drain, load_event("drain_api.json")))
    transcript.add("drain_schedule", _invoke(drain, load_event("drain_schedule.json")))
    captured = capsys.readouterr()
    transcript.texts += [captured.out, captured.err, caplog.text]
    return transcript


def _needles(password: str, secret: str | None = None, url: str | None = None
             ) -> dict[str, str]:
    needles = {"password": password, "password (percent-encoded)": quote(password, safe=""),
               "password (JSON-escaped)": json.dumps(password)[1:-1],
               # Its random part, which no quoting or escaping changes.
               "password (any form)": password.split("-:", 1)[0]}
    if secret is not None:
        needles["secret JSON"] = secret
        needles["secret JSON (escaped)"] = json.dumps(secret)[1:-1]
    if url is not None:
        needles["connection string"] = url
    return needles


def _password() -> str:
    # A random part, then characters that need quoting in a URL and escaping in JSON.
    return f"Pw-{uuid.uuid4().hex[:12]}-:@/?#%&=\""


def _url(user: str, password: str, where: str, dbname: str) -> str:
    return f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@{where}/{dbname}"


@pytest.fixture
def verbose_without_url(function_env, monkeypatch):
    """No DATABASE_URL (each test says how to connect), and the functions' own logs at DEBUG:
    everything pgdrain can say is said."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "DEBUG")


def test_secret_mode_leaks_nothing(aws, db: Coordinates, load_function, verbose_without_url,
                                   capsys, caplog):
    caplog.set_level(logging.INFO)
    password = _password()
    secret = db.secret(password=password)
    arn = aws.create_secret(Name="pgdrain/leak-check", SecretString=secret)["ARN"]
    transcript = _run_both_functions(load_function, db.env(DB_SECRET_ARN=arn), capsys, caplog)
    assert transcript.statuses == {"enqueue": 201, "refused": 422, "get": 200,
                                   "drain": "empty", "drain_api": 200,
                                   "drain_schedule": "empty"}
    url = _url(db.user, password, f"{db.host}:{db.port}", db.dbname)
    assert transcript.leaks(_needles(password, secret, url)) == []


def test_auth_failure_leaks_nothing(aws, db: Coordinates, password_role, load_function,
                                    verbose_without_url, monkeypatch, capsys, caplog):
    caplog.set_level(logging.INFO)
    password_role.set_password(_password())
    wrong = _password()
    secret = db.secret(username=password_role.name, password=wrong)
    arn = aws.create_secret(Name="pgdrain/refused", SecretString=secret)["ARN"]
    by_secret = _run_both_functions(load_function, db.env(DB_SECRET_ARN=arn), capsys, caplog)

    url = (f"{_url(password_role.name, wrong, '', db.dbname)}"
           f"?host={quote(db.host, safe='')}&port={db.port}")
    by_url = _run_both_functions(load_function, {"DATABASE_URL": url}, capsys, caplog)

    for transcript in (by_secret, by_url):
        assert transcript.statuses == {"enqueue": 503, "refused": 422, "get": 503,
                                       "drain": "database_error", "drain_api": 503,
                                       "drain_schedule": "database_error"}
        text = "\n".join(transcript.texts)
        assert "28P01 password authentication failed" in text  # the reason is told
        assert transcript.leaks(_needles(wrong, secret, url)) == []


@pytest.mark.parametrize("mode", ["url", "secret"])
def test_connection_error_leaks_nothing(mode, aws, db: Coordinates, load_function,
                                        verbose_without_url, capsys, caplog):
    caplog.set_level(logging.INFO)
    password = _password()
    port = faults.closed_port()
    secret = url = None
    if mode == "url":
        url = f"{_url('postgres', password, f'127.0.0.1:{port}', 'pgdrain')}?sslmode=disable"
        env = {"DATABASE_URL": url}
    else:
        secret = db.secret(host="127.0.0.1", port=str(port), password=password)
        env = db.env(DB_SECRET_ARN=aws.create_secret(Name="pgdrain/closed",
                                                     SecretString=secret)["ARN"],
                     DB_SSLMODE="disable")
    transcript = _run_both_functions(load_function, env, capsys, caplog)
    assert transcript.statuses == {"enqueue": 503, "refused": 422, "get": 503,
                                   "drain": "database_error", "drain_api": 503,
                                   "drain_schedule": "database_error"}
    assert f"could not connect to 127.0.0.1:{port}/" in "\n".join(transcript.texts)
    assert transcript.leaks(_needles(password, secret, url)) == []


def test_secret_stays_out_of_debug_logs(aws, db: Coordinates, load_function,
                                        verbose_without_url, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    password = _password()
    secret = db.secret(password=password)
    arn = aws.create_secret(Name="pgdrain/debug", SecretString=secret)["ARN"]
    transcript = _run_both_functions(load_function, db.env(DB_SECRET_ARN=arn), capsys, caplog)
    assert transcript.statuses["enqueue"] == 201
    assert transcript.leaks(_needles(password, secret)) == []


# --- minimum grants ---------------------------------------------------------------------------

DOC = ROOT / "docs" / "database-roles.md"
ROLE = re.compile(r"\bpgdrain_(migrator|app|enqueue|drain)\b")
INSUFFICIENT_PRIVILEGE = "42501"


def doc_blocks() -> list[tuple[str, str]]:
    """The ``sql`` blocks of docs/database-roles.md: (who runs it, the SQL)."""
    blocks = []
    for body in re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.DOTALL):
        sql = "\n".join(line.strip() for line in body.splitlines())
        who = re.match(r"-- run as: (\S+)", sql)
        assert who, f"a SQL block in {DOC.name} does not say who runs it:\n{sql}"
        blocks.append((who.group(1), sql))
    return blocks


@dataclass
class Roles:
    """The documented roles, created in a fresh database with their unique names."""

    admin_url: str
    database: str
    prefix: str
    passwords: dict[str, str]

    def name(self, role: str) -> str:
        return f"{self.prefix}_{role}"

    def url(self, role: str) -> str:
        return faults.as_role(self.admin_url, self.name(role), self.passwords[role])

    def localise(self, sql: str) -> str:
        sql = ROLE.sub(lambda m: self.name(m.group(1)), sql)
        return re.sub(r"\bDATABASE pgdrain\b", f'DATABASE "{self.database}"', sql)


@pytest.fixture
def roles(empty_database_url: str) -> Iterator[Roles]:
    """docs/database-roles.md applied to a fresh database, the migration run as the migrator."""
    prefix = f"pgdr_{uuid.uuid4().hex[:8]}"
    blocks = doc_blocks()
    admin = connect(empty_database_url)
    database = admin.run("SELECT current_database()")[0][0]
    passwords = {m.group(1): m.group(2) for sql in (s for _, s in blocks) for m in re.finditer(
        r"CREATE ROLE pgdrain_(\w+) LOGIN PASSWORD '([^']*)'", sql)}
    found = Roles(empty_database_url, database, prefix, passwords)
    names = [found.name(role) for role in passwords]
    try:
        for who, sql in blocks:
            if who == "admin":
                admin.run(found.localise(sql))
        migrator = connect(found.url("migrator"))
        try:
            assert migrate(migrator) == [f"{v:04d}_{n}" for v, n, _ in migrations()]
            for who, sql in blocks:
                if who != "admin":
                    assert who == "pgdrain_migrator", who
                    migrator.run(found.localise(sql))
        finally:
            migrator.close()
        yield found
    finally:
        admin.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE usename = ANY(:names)", names=names)
        existing = [r[0] for r in admin.run("SELECT rolname FROM pg_roles "
                                            "WHERE rolname = ANY(:names)", names=names)]
        if existing:
            admin.run(f"DROP OWNED BY {', '.join(existing)}")
            admin.run(f"DROP ROLE {', '.join(existing)}")
        admin.close()


def _call(app: Any, event: dict[str, Any], context: LambdaContext | None = None) -> Any:
    response = app.lambda_handler(event, context or LambdaContext("pgdrain-grants"))
    return (response["statusCode"], json.loads(response["body"])) if "statusCode" in response \
        else response


def _job_event(name: str, ident: int) -> dict[str, Any]:
    event = load_event(name)
    event["path"] = event["path"].replace("/1", f"/{ident}", 1)
    event["pathParameters"] = {"id": str(ident)}
    return event


def happy_path(load_function: Callable[..., Any], admin_sql: Callable[..., Any],
               enqueue_url: str, drain_url: str) -> dict[str, int]:
    """Every path of both functions, with these URLs; returns the counts it saw."""
    enqueue = load_function("enqueue", DATABASE_URL=enqueue_url)
    status, body = _call(enqueue, _post({"job_type": "test-noop", "payload": {"n": 1}}))
    assert status == 201, body
    status, body = _call(enqueue, _post({"jobs": [
        {"job_type": "test-noop", "dedupe_key": "once"},
        {"job_type": "test-boom", "max_attempts": 2},
        {"job_type": "test-discard"},
        {"job_type": "test-snooze", "payload": {"seconds": 600}},
        {"job_type": "test-typed", "payload": {"to": "sarah"}}]}))
    assert status == 201, body
    boom, discard = body["ids"][1], body["ids"][2]
    assert _call(enqueue, _post({"job_type": "test-noop", "dedupe_key": "once"})) == (
        200, {"ids": [body["ids"][0]], "created": [False]})
    status, view = _call(enqueue, _job_event("job_get.json", boom))
    assert (status, view["status"]) == (200, "pending")
    # A long poll (GET /jobs/{id}?wait=): the waiter registers, listens and unregisters.
    waited = _job_event("job_wait.json", boom)
    waited["queryStringParameters"] = {"wait": "0.1"}
    waited["multiValueQueryStringParameters"] = {"wait": ["0.1"]}
    status, view = _call(enqueue, waited)
    assert (status, view["status"]) == (200, "pending")

    # The janitor's work, left by someone else: an expired lease and an old done job; and
    # a waiter whose backend is gone, which the drain's finishes probe and its janitor forgets.
    admin_sql("INSERT INTO pgdrain_waiters (job_id, pid) VALUES (:id, 0)", id=boom)
    admin_sql("INSERT INTO jobs (job_type, status, attempts, claimed_at, lease_expires_at, "
              "lease_token) VALUES ('test-noop', 'running', 1, now() - interval '2 hours', "
              "now() - interval '1 hour', gen_random_uuid())")
    admin_sql("INSERT INTO jobs (job_type, status, attempts, finished_at) "
              "VALUES ('test-noop', 'done', 1, now() - interval '30 days')")

    drain = load_function("drain", DATABASE_URL=drain_url, PGDRAIN_BACKOFF_BASE_SECONDS="0")
    summary = _call(drain, load_event("drain_schedule.json"))
    assert {k: summary[k] for k in ("reclaimed", "purged", "claimed", "done", "retried",
                                    "failed", "snoozed", "stale")} == {
        "reclaimed": 1, "purged": 1, "claimed": 8, "done": 4, "retried": 1, "failed": 2,
        "snoozed": 1, "stale": 0}, summary
    assert admin_sql("SELECT job_id FROM pgdrain_waiters") == []

    # Release: one at a time, after a 1 s job the next one's 5 s budget no longer fits in the
    # time left (7 s less the margin), so it is handed back.
    sleeper = {"job_type": "test-sleep", "payload": {"seconds": 1}}
    status, body = _call(enqueue, _post({"jobs": [sleeper, sleeper]}))
    assert status == 201, body
    hurried = load_function("drain", DATABASE_URL=drain_url, PGDRAIN_SAFETY_MARGIN_SECONDS="1",
                            PGDRAIN_CONCURRENCY="1", PGDRAIN_BATCH_SIZE="2")
    summary = _call(hurried, load_event("drain_direct.json"), LambdaContext(timeout_seconds=7))
    assert (summary["claimed"], summary["done"], summary["released"]) == (2, 1, 1), summary

    # Requeue a failed job through the API, and read it back.
    status, view = _call(enqueue, _job_event("job_retry.json", discard))
    assert (status, view["status"], view["attempts"]) == (200, "pending", 0), view
    status, view = _call(enqueue, _job_event("job_get.json", boom))
    assert (status, view["status"]) == (200, "failed")
    api = _call(drain, load_event("drain_api.json"))
    assert api[0] == 200 and api[1]["failed"] == 1, api  # the requeued discard, again

    # Pause and resume a queue through the API; the drains' claims read the state.
    assert _call(enqueue, load_event("queue_pause.json"))[0] == 404  # no job names "emails"
    for name in ("queue_pause.json", "queue_resume.json"):
        event = load_event(name)
        event["path"] = event["path"].replace("emails", "default")
        event["pathParameters"] = {"queue": "default"}
        status, view = _call(enqueue, event)
        assert (status, view["queue"]) == (200, "default"), view

    # Flow control: a capped, rate-limited queue (the controlled claim locks its row and
    # writes its window), ordering keys and tenants (the fair claim).
    event = load_event("queue_set.json")
    event["path"], event["pathParameters"] = "/queues/default", {"queue": "default"}
    status, view = _call(enqueue, event)
    assert (status, view["max_running"], view["rate"]) == (200, 3, "10/s"), view
    status, body = _call(enqueue, _post({"jobs": [
        {"job_type": "test-noop", "ordering_key": "k"}, {"job_type": "test-noop",
                                                         "ordering_key": "k"},
        {"job_type": "test-noop", "queue": "other", "tenant": "t"}]}))
    assert status == 201, body
    flowing = _call(drain, load_event("drain_direct.json"))
    assert flowing["done"] == 3, flowing
    return {k: v for k, v in summary.items() if isinstance(v, int)}


def _refused(conn: pg8000.native.Connection, statement: str) -> str:
    with pytest.raises(pg8000.native.DatabaseError) as caught:
        conn.run(statement)
    fields = caught.value.args[0]
    assert fields["C"] == INSUFFICIENT_PRIVILEGE, (statement, fields)
    return fields["M"]


@pytest.mark.parametrize("layout", ["one app role", "a role per function"])
def test_documented_grants_run_every_path(layout, roles: Roles, load_function):
    admin = connect(roles.admin_url)

    def admin_sql(statement: str, **params: Any) -> list[dict[str, Any]]:
        return faults.rows(admin, statement, **params)

    try:
        if layout == "one app role":
            urls = roles.url("app"), roles.url("app")
        else:
            urls = roles.url("enqueue"), roles.url("drain")
        happy_path(load_function, admin_sql, *urls)
        # The doorbell (off in these functions: no DRAIN_FUNCTION_NAME): the enqueue side's
        # ring reads and writes its state, a drain's start writes it.
        ringer, drainer = connect(urls[0]), connect(urls[1])
        try:
            assert store.doorbell_state(ringer, window_seconds=1) == (0, False)
            store.doorbell_rung(ringer)
            store.drain_started(drainer)
        finally:
            ringer.close()
            drainer.close()
        counts = dict(admin.run("SELECT status, count(*) FROM jobs GROUP BY status"))
        assert counts == {"done": 9, "failed": 2, "pending": 1}, counts
        # Nobody but the roles of the page connected: the statistics came from them too.
        users = {r[0] for r in admin.run("SELECT DISTINCT usename FROM pg_stat_activity "
                                         "WHERE datname = current_database()")}
        assert users <= {admin.run("SELECT current_user")[0][0], *(
            roles.name(r) for r in roles.passwords)}
    finally:
        admin.close()


def test_app_role_cannot_change_the_schema(roles: Roles):
    for role in ("app", "enqueue", "drain"):
        conn = connect(roles.url(role))
        try:
            assert "must be owner" in _refused(conn, "DROP TABLE jobs")
            assert "must be owner" in _refused(conn, "ALTER TABLE jobs ADD COLUMN x int")
            _refused(conn, "TRUNCATE jobs")
            _refused(conn, "CREATE TABLE intruder (x int)")
            _refused(conn, "SELECT * FROM pgdrain_migrations")
            _refused(conn, "INSERT INTO pgdrain_migrations (version, name) VALUES (99, 'x')")
            _refused(conn, "SELECT nextval(pg_get_serial_sequence('jobs', 'id'))")
            with pytest.raises(pgdrain.QueryFailed, match=INSUFFICIENT_PRIVILEGE):
                migrate(conn)
            if role == "enqueue":
                _refused(conn, "DELETE FROM jobs")
            if role == "drain":
                _refused(conn, "INSERT INTO jobs (job_type) VALUES ('test-noop')")
        finally:
            conn.close()


def test_only_the_documented_roles_may_connect(roles: Roles):
    """REVOKE ALL ON DATABASE ... FROM PUBLIC: a role without CONNECT is turned away."""
    admin = connect(roles.admin_url)
    stranger = f"{roles.prefix}_stranger"
    admin.run(f"CREATE ROLE {stranger} LOGIN")
    try:
        with pytest.raises(pgdrain.DatabaseConnectError, match="42501"):
            pgdrain.aws.credentials.connect_from_env(
                {"DATABASE_URL": faults.as_role(roles.admin_url, stranger, "x")})
    finally:
        admin.run(f"DROP ROLE {stranger}")
        admin.close()


def test_readme_grants_can_rerun_an_up_to_date_migration(roles: Roles):
    admin = connect(roles.admin_url)
    admin.run(f"SET ROLE {roles.name('migrator')}")
    admin.run(f"GRANT SELECT, INSERT, UPDATE, DELETE ON pgdrain_migrations "
              f"TO {roles.name('app')}")
    admin.close()
    conn = connect(roles.url("app"))
    try:
        assert migrate(conn) == []
    finally:
        conn.close()


def test_documented_roles_are_the_ones_tested():
    blocks = doc_blocks()
    assert [who for who, _ in blocks] == ["admin", "pgdrain_migrator", "admin",
                                          "pgdrain_migrator"]
    text = "\n".join(sql for _, sql in blocks)
    assert "GRANT SELECT, INSERT, UPDATE, DELETE ON jobs TO pgdrain_app;" in text
    # Identity inserts need no sequence grant: the one sequence granted is the doorbell's.
    assert set(re.findall(r"\bON SEQUENCE (\w+)", text)) == {"pgdrain_doorbell_ring"}
    assert "jobs_id_seq" not in text and "ALL SEQUENCES" not in text.upper()
    assert "pgdrain_migrations" not in text  # the functions never touch it


def _granted(sql: str, role: str) -> list[str]:
    return [line for line in sql.splitlines() if line.startswith("GRANT ") and
            line.endswith(f" TO {role};") and " ON DATABASE " not in line
            and " ON SCHEMA " not in line]


def test_the_documented_grants_are_the_catalogues(roles: Roles):
    """One source: the page's GRANT statements are `pgdrain grants`' (grants_needed), for
    the one app role and for each function's role."""
    text = "\n".join(sql for _, sql in doc_blocks())
    conn = connect(roles.admin_url)
    try:
        for role, part in (("pgdrain_app", "app"), ("pgdrain_enqueue", "enqueue"),
                           ("pgdrain_drain", "drain")):
            assert _granted(text, role) == grants_needed(conn, role, part), role
    finally:
        conn.close()
    readme = (ROOT / "README.md").read_text()
    assert "pgdrain\n  grants ROLE" in readme or "pgdrain grants ROLE" in readme
    assert not re.search(r"need only `SELECT, INSERT, UPDATE, DELETE` on `jobs`", readme)


def test_the_cli_runs_as_the_app_role(roles: Roles):
    """An operator on the functions' role: every command that reads or changes jobs and
    queues works with the page's grants."""
    url = roles.url("app")
    admin = connect(roles.admin_url)
    try:
        failed = admin.run("INSERT INTO jobs (job_type, status, attempts, max_attempts) "
                           "VALUES ('test-noop', 'failed', 3, 3) RETURNING id")[0][0]
    finally:
        admin.close()
    enqueued = pgdrain_cli(url, "enqueue", "test-noop", "--delay", "1h", "--json")
    assert enqueued.returncode == 0, enqueued.stderr
    pending = json.loads(enqueued.stdout)["id"]
    for args in (["stats"], ["queues"], ["list"], ["show", str(failed)],
                 ["requeue", "--id", str(failed)], ["run-now", str(pending)],
                 ["pause", "default"], ["resume", "default"],
                 ["queue", "set", "default", "--max-running", "5"],
                 ["cancel", str(pending)], ["purge", "--status", "cancelled",
                                            "--older-than", "1s"],
                 ["delete", str(pending), "--yes"], ["schedules"], ["janitor"],
                 ["top", "--once"], ["grants", "anyone"]):
        done = pgdrain_cli(url, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)


def test_grants_yes_gives_a_new_role_what_it_needs(roles: Roles):
    """`pgdrain grants ROLE --yes`, run as the tables' owner, is all a new role needs to
    enqueue and drain; run as that role, it is refused and grants nothing."""
    admin = connect(roles.admin_url)
    role = f"{roles.prefix}_newcomer"
    admin.run(f"CREATE ROLE {role} LOGIN PASSWORD 'change-me-newcomer'")
    admin.run(f'GRANT CONNECT ON DATABASE "{roles.database}" TO {role}')
    admin.run(f"GRANT USAGE ON SCHEMA public TO {role}")
    newcomer = faults.as_role(roles.admin_url, role, "change-me-newcomer")
    try:
        refused = pgdrain_cli(newcomer, "grants", role, "--yes")
        assert refused.returncode == 1 and "permission denied" in refused.stderr, refused
        granted = pgdrain_cli(roles.url("migrator"), "grants", role, "--yes")
        assert granted.returncode == 0, granted.stderr
        assert granted.stdout.splitlines()[-1] == "-- granted, 7 statements"
        conn = connect(newcomer)
        try:
            pgdrain.enqueue(conn, "newcomer-noop")
        finally:
            conn.close()
        registry = Registry()
        pgdrain.job("newcomer-noop", registry=registry)(lambda job: None)
        summary = run_drain(newcomer, registry, retention_seconds=0)
        assert (summary.claimed, summary.done) == (1, 1), summary
    finally:
        admin.run(f"DROP OWNED BY {role}")
        admin.run(f"DROP ROLE {role}")
        admin.close()
