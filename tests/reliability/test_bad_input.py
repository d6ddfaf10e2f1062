"""Hostile input to the enqueue API (issue scenario 5), through the function's handler with
API Gateway REST proxy events built from ``events/enqueue_single.json``.

Every answer must be a 2xx, or a 4xx with a JSON ``{"error", "details"}`` body; never a 5xx
(an exception escaping the handler is what API Gateway turns into a 502, and is counted as
one here). A refused request leaves the jobs table exactly as it was (row count and an md5 of
every row). An accepted one stores what was sent, verbatim: SQL-looking text is data.

A table of hand-picked requests; then hypothesis at ``PGDRAIN_FUZZ_EXAMPLES`` examples (300 by
default here), and ``tests/functions/test_enqueue_fuzz.py``'s schemathesis run on the OpenAPI
document again at that count (that file alone defaults to 50). A request that exposes a known
defect is marked ``xfail(strict=True)`` with the defect.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgdrain
from pgdrain.http.requests import JOB_FIELDS
from pgdrain.settings import DEFAULT_MAX_BATCH, DEFAULT_MAX_PAYLOAD_BYTES
from pgdrain_dev.context import LambdaContext
from tests.functions import conftest as function_fixtures
from tests.reliability.faults import ROOT, table_state
from tests.support.functions import load_event

# The function tests' fixtures (load_function needs function_env).
function_env = function_fixtures.function_env
load_function = function_fixtures.load_function

EXAMPLES = int(os.environ.get("PGDRAIN_FUZZ_EXAMPLES") or 300)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

SQL = "'; DROP TABLE jobs; --"
SQL_DELETE = "x'); DELETE FROM jobs WHERE ('1'='1"
SQL_DOLLAR = "$$; TRUNCATE jobs; $$"
SQL_SLEEP = "1 OR 1=1; SELECT pg_sleep(10)--"
NUL = "\x00"
MiB = 1024 * 1024
DIGITS = 5000  # above Python's int_max_str_digits (4300)


# --- calling the function --------------------------------------------------------------------


def enqueue_event(body: str | None, *, base64_encoded: bool = False,
                  headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A POST /jobs proxy event: events/enqueue_single.json with this body and headers."""
    event = copy.deepcopy(load_event("enqueue_single.json"))
    event["body"] = body
    event["isBase64Encoded"] = base64_encoded
    for name, value in (headers or {}).items():
        for key in [k for k in event["headers"] if k.lower() == name.lower()]:
            del event["headers"][key]
            del event["multiValueHeaders"][key]
        if value is not None:
            event["headers"][name] = value
            event["multiValueHeaders"][name] = [value]
    return event


@dataclass
class Answer:
    status: int
    body: Any
    error: BaseException | None = None


def invoke(app: Any, event: dict[str, Any]) -> Answer:
    """The handler's answer; an exception escaping it is API Gateway's 502."""
    try:
        response = app.lambda_handler(event, LambdaContext("pgdrain-enqueue"))
    except Exception as exc:
        return Answer(502, {"message": "Internal server error"}, exc)
    raw = response.get("body") or ""
    try:
        body = json.loads(raw)
    except ValueError:
        body = raw
    return Answer(response["statusCode"], body)


def check_answer(answer: Answer, before: tuple[int, str], after: tuple[int, str]) -> None:
    """The invariants every request must keep."""
    assert answer.error is None, f"unhandled {type(answer.error).__name__}: {answer.error}"
    assert 200 <= answer.status < 300 or 400 <= answer.status < 500, answer
    if answer.status >= 400:
        assert isinstance(answer.body, dict) and set(answer.body) == {"error", "details"}, answer
        assert isinstance(answer.body["error"], str) and answer.body["error"], answer
        assert isinstance(answer.body["details"], dict), answer
        assert after == before, f"a {answer.status} changed the jobs table"
    else:
        ids = answer.body["ids"]
        created = answer.body.get("created", [True] * len(ids))
        assert after[0] == before[0] + sum(created), answer
        assert (answer.status == 201) == any(created)


def seed(conn: Any) -> None:
    """Rows in every state, so that 'unchanged' compares something."""
    ids = [r.id for r in pgdrain.enqueue_many(conn, [
        {"job_type": "test-noop", "dedupe_key": "seeded"},
        {"job_type": "test-sleep", "payload": {"seconds": 0}, "queue": "q", "priority": -1},
        {"job_type": "test-boom", "delay_seconds": 3600}])]
    conn.run("UPDATE jobs SET status = 'failed', attempts = 3, finished_at = now() "
             "WHERE id = :id", id=ids[2])


# --- the table of hostile requests ------------------------------------------------------------


@dataclass
class Case:
    id: str
    body: Any  # a dict or list is sent as JSON; a str as is
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    base64_encoded: bool = False
    stored: dict[str, Any] = field(default_factory=dict)  # column -> value, for accepted jobs
    bug: str | None = None

    def text(self) -> str | None:
        if isinstance(self.body, dict | list):
            return json.dumps(self.body)
        return self.body


def job(**fields: Any) -> dict[str, Any]:
    return {"job_type": "test-noop", **fields}


def nested(depth: int, leaf: str = "1") -> str:
    return '{"a":' * depth + leaf + "}" * depth


def payload_of_size(size: int) -> dict[str, str]:
    """A payload whose compact JSON is exactly ``size`` bytes (the API's measure)."""
    return {"data": "x" * (size - len('{"data":""}'))}


CASES = [
    # SQL-looking text is refused where it is not a known value, stored verbatim where it is data.
    Case("sql-job-type", {"job_type": SQL}, 422),
    Case("sql-field-name", job(**{SQL: 1}), 422),
    Case("sql-queue", job(queue=SQL), 201, stored={"queue": SQL}),
    Case("sql-dedupe-key", job(dedupe_key=SQL_DELETE), 201, stored={"dedupe_key": SQL_DELETE}),
    Case("sql-payload", job(payload={SQL: SQL_DOLLAR, "list": [SQL_SLEEP]}), 201,
         stored={"payload": {SQL: SQL_DOLLAR, "list": [SQL_SLEEP]}}),
    Case("sql-idempotency-key", job(), 201, headers={"Idempotency-Key": SQL},
         stored={"dedupe_key": SQL}),
    Case("sql-run-at", job(run_at=SQL), 422),
    Case("sql-batch-item", {"jobs": [job(), {"job_type": SQL_DELETE}]}, 422),
    # Sizes.
    Case("payload-256KiB", job(payload=payload_of_size(DEFAULT_MAX_PAYLOAD_BYTES)), 201),
    Case("payload-256KiB+1", job(payload=payload_of_size(DEFAULT_MAX_PAYLOAD_BYTES + 1)), 413),
    Case("payload-10MB", job(payload=payload_of_size(10 * MiB)), 413),
    Case("batch-too-long", {"jobs": [job()] * (DEFAULT_MAX_BATCH + 1)}, 413),
    Case("nested-500", '{"job_type": "test-noop", "payload": ' + nested(500) + "}", 201),
    Case("nested-100000-payload",
         '{"job_type": "test-noop", "payload": ' + nested(100_000) + "}", 400),
    Case("nested-100000-arrays", "[" * 100_000 + "]" * 100_000, 400),
    # Encodings.
    Case("invalid-utf8", base64.b64encode(b'{"job_type": "test-noop\xff\xfe"}').decode(), 400,
         base64_encoded=True),
    Case("invalid-utf8-overlong", base64.b64encode(b'{"job_type": "\xc0\xaf"}').decode(), 400,
         base64_encoded=True),
    Case("invalid-base64", "not base64 at all!", 400, base64_encoded=True),
    Case("empty-body", "", 400),
    # No Content-Type (sam local generate-event, several clients' default) is read as JSON.
    Case("no-content-type", job(), 201, headers={"Content-Type": None}),
    Case("another-content-type", job(), 415, headers={"Content-Type": "text/plain"}),
    Case("charset-utf-16", job(), 415,
         headers={"Content-Type": "application/json; charset=utf-16"}),
    Case("charset-latin-1", job(), 415,
         headers={"Content-Type": "application/json; charset=latin-1"}),
    Case("charset-utf-8", job(), 201,
         headers={"Content-Type": 'application/json; charset="UTF-8"'}),
    Case("charset-utf8", job(), 201, headers={"Content-Type": "Application/JSON;charset=utf8"}),
    # A key given twice: json.loads keeps the last one, silently dropping what was meant.
    Case("duplicate-key", '{"job_type": "test-noop", "job_type": "test-boom"}', 400),
    Case("duplicate-key-in-payload", '{"job_type": "test-noop", "payload": {"a": 1, "a": 2}}',
         400),
    Case("duplicate-key-in-a-batch", '{"jobs": [{"job_type": "test-noop", "queue": "a", '
                                     '"queue": "b"}]}', 400),
    Case("raw-nul-outside-strings", '{"job_type": "test-noop"}\x00', 400),
    Case("raw-nul-inside-a-string", '{"job_type": "test-noop", "queue": "a\x00b"}', 400),
    # NUL characters (\u0000 escapes) in every text field, and in keys.
    Case("nul-job-type", job(job_type=f"test-noop{NUL}"), 422),
    Case("nul-queue", job(queue=f"a{NUL}b"), 422),
    Case("nul-dedupe-key", job(dedupe_key=f"k{NUL}"), 422),
    Case("nul-payload-value", job(payload={"a": f"x{NUL}y"}), 422),
    Case("nul-payload-key", job(payload={f"a{NUL}": 1}), 422),
    Case("nul-nested-payload", job(payload={"a": [{"b": NUL}]}), 422),
    Case("nul-field-name", job(**{NUL: 1}), 422),
    Case("nul-run-at", job(run_at=f"2030-01-01T00:00:00+00:00{NUL}; DROP TABLE jobs"), 422),
    # Python's fromisoformat reads a NUL as the end of the text: refused, not half-read.
    Case("nul-as-run-at-separator", job(run_at=f"2030-01-01T00:00:00{NUL}Z"), 422),
    Case("nul-after-run-at", job(run_at=f"2030-01-01T00:00:00+00:00{NUL}"), 422),
    Case("control-character-in-run-at", job(run_at="2030-01-01T00:00:00\t+00:00"), 422),
    Case("nul-idempotency-key", job(), 422, headers={"Idempotency-Key": f"k{NUL}"}),
    Case("nul-in-a-batch", {"jobs": [job(), job(queue=NUL)]}, 422),
    Case("escaped-backslash-u0000-is-text", job(payload={"a": "\\u0000"}), 201,
         stored={"payload": {"a": "\\u0000"}}),
    # An integer too large for a float: compared before any conversion (it answered 500).
    Case("delay-seconds-of-310-digits", '{"job_type": "test-noop", "delay_seconds": 1'
                                        + "0" * 309 + "}", 422),
    # Numbers out of range.
    Case("priority-2**63", job(priority=2**63), 422),
    Case("priority-below-smallint", job(priority=-32769), 422),
    Case("priority-fraction", job(priority=1.5), 422),
    Case("priority-bool", job(priority=True), 422),
    Case("priority-string", job(priority="1"), 422),
    Case("max-attempts-negative", job(max_attempts=-1), 422),
    Case("max-attempts-2**31", job(max_attempts=2**31), 422),
    Case("delay-1e308", job(delay_seconds=1e308), 422),
    Case("delay-negative", job(delay_seconds=-1e308), 422),
    Case("delay-overflows-to-infinity", '{"job_type": "test-noop", "delay_seconds": 1e400}', 422),
    Case("delay-minus-zero", job(delay_seconds=-0.0), 201),
    Case("nan-literal", '{"job_type": "test-noop", "delay_seconds": NaN}', 400),
    Case("infinity-literal", '{"job_type": "test-noop", "priority": Infinity}', 400),
    Case("minus-infinity-in-payload", '{"job_type": "test-noop", "payload": {"x": -Infinity}}',
         400),
    Case("payload-infinity-by-overflow", '{"job_type": "test-noop", "payload": {"x": 1e400}}',
         422),
    Case("payload-huge-numbers", job(payload={"big": 2**64, "small": -(2**63) - 1,
                                              "long": int("9" * 4000)}), 201,
         stored={"payload": {"big": 2**64, "small": -(2**63) - 1, "long": int("9" * 4000)}}),
    # jsonb keeps numbers as numeric: 1e308 comes back as the integer 10**308, the same number.
    Case("payload-1e308", job(payload={"float": 1e308}), 201,
         stored={"payload": {"float": 10**308}}),
    Case("payload-integer-5000-digits",
         '{"job_type": "test-noop", "payload": {"n": ' + "7" * DIGITS + "}}", 400),
    Case("priority-integer-5000-digits",
         '{"job_type": "test-noop", "priority": ' + "7" * DIGITS + "}", 400),
    # Timestamps.
    Case("run-at-without-zone", job(run_at="2030-01-31T09:00:00"), 422),
    Case("run-at-date-only", job(run_at="2030-01-31"), 422),
    Case("run-at-year-1-without-zone", job(run_at="0001-01-01T00:00:00"), 422),
    Case("run-at-offset-+25:00", job(run_at="2030-01-01T00:00:00+25:00"), 422),
    Case("run-at-offset-+24:00", job(run_at="2030-01-01T00:00:00+24:00"), 422),
    Case("run-at-february-30", job(run_at="2030-02-30T00:00:00Z"), 422),
    Case("run-at-year-10000", job(run_at="10000-01-01T00:00:00Z"), 422),
    Case("run-at-number", job(run_at=1893456000), 422),
    Case("run-at-and-delay", job(run_at="2030-01-01T00:00:00Z", delay_seconds=1), 422),
    Case("run-at-year-1-utc", job(run_at="0001-01-01T00:00:00Z"), 201),
    Case("run-at-year-9999-utc", job(run_at="9999-12-31T23:59:59.999999Z"), 201),
    Case("run-at-offset--23:59", job(run_at="2030-01-01T00:00:00-23:59"), 201),
    Case("run-at-year-1-at-+14:00", job(run_at="0001-01-01T00:00:00+14:00"), 422),
    Case("run-at-year-9999-at--14:00", job(run_at="9999-12-31T23:59:59-14:00"), 422),
    # Lone surrogates.
    Case("surrogate-payload", job(payload={"a": "\ud800"}), 422),
    Case("surrogate-queue", job(queue="\udfff"), 422),
    Case("surrogate-dedupe-key", job(dedupe_key="k\ud800"), 422),
    Case("surrogate-job-type", job(job_type="\ud800"), 422),
]


def _params() -> list[Any]:
    return [pytest.param(case, id=case.id, marks=[pytest.mark.xfail(strict=True, reason=case.bug)]
                         if case.bug else []) for case in CASES]


@pytest.mark.parametrize("case", _params())
def test_hostile_request(case: Case, load_function, conn, sql):
    seed(conn)
    app = load_function("enqueue")
    before = table_state(sql)
    answer = invoke(app, enqueue_event(case.text(), base64_encoded=case.base64_encoded,
                                       headers=case.headers))
    after = table_state(sql)
    check_answer(answer, before, after)
    assert answer.status == case.status, answer
    assert sql("SELECT to_regclass('jobs') IS NOT NULL AS exists")[0]["exists"]
    if answer.status == 201:
        [ident] = answer.body["ids"]
        [row] = sql("SELECT * FROM jobs WHERE id = :id", id=ident)
        for column, value in case.stored.items():
            assert row[column] == value, column


# --- beyond the single request ----------------------------------------------------------------


@pytest.mark.parametrize("poison", [job(run_at="0001-01-01T00:00:00+14:00"),
                                    job(queue="\ud800")], ids=["overflow", "surrogate"])
def test_a_refused_request_leaves_the_warm_container_healthy(poison, load_function, conn, sql):
    """Both once reached pg8000, failed between its Describe and Bind and left the warm
    connection out of step: later requests answered 5xx yet inserted rows (fixed in 569122d)."""
    app = load_function("enqueue")
    before = table_state(sql)
    first = invoke(app, enqueue_event(json.dumps(poison)))
    assert table_state(sql) == before
    answers = [invoke(app, enqueue_event(json.dumps(job()))) for _ in range(3)]
    inserted = table_state(sql)[0] - before[0]
    assert (first.status, [a.status for a in answers], inserted) == (422, [201] * 3, 3), (
        first, answers)


def test_drain_copes_with_a_run_at_it_cannot_parse(load_function, conn, sql):
    sql("INSERT INTO jobs (job_type, run_at) VALUES ('test-noop', '-infinity'), "
        "('test-noop', now())")
    app = load_function("drain")
    summary = app.lambda_handler({}, LambdaContext())
    assert summary["done"] == 2


def test_far_past_and_far_future_jobs_are_drained_or_left_waiting(load_function, conn, sql):
    enqueue = load_function("enqueue")
    past, future = (invoke(enqueue, enqueue_event(json.dumps(job(run_at=t)))) for t in
                    ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"))
    assert (past.status, future.status) == (201, 201)
    get = load_event("job_get.json")
    get.update(path=f"/jobs/{past.body['ids'][0]}",
               pathParameters={"id": str(past.body["ids"][0])})
    assert invoke(enqueue, get).body["run_at"] == "0001-01-01T00:00:00+00:00"
    summary = load_function("drain").lambda_handler({}, LambdaContext())
    assert (summary["claimed"], summary["done"]) == (1, 1)
    assert sql("SELECT id, status FROM jobs ORDER BY id") == [
        {"id": past.body["ids"][0], "status": "done"},
        {"id": future.body["ids"][0], "status": "pending"}]


# --- hypothesis ------------------------------------------------------------------------------

# Text with every code point, lone surrogates and NUL included, and SQL-looking strings.
any_text = st.text(st.characters(exclude_categories=()), max_size=30)
hostile_text = st.sampled_from([SQL, SQL_DELETE, SQL_DOLLAR, SQL_SLEEP, NUL, f"a{NUL}b",
                                "\\u0000", "\ud800", "", " ", "default", "test-noop",
                                "é" * 201, "🙂"])
json_scalars = (st.none() | st.booleans() | st.integers() | st.floats() | any_text
                | hostile_text | st.integers(min_value=-(2**70), max_value=2**70)
                | st.sampled_from([1e308, -1e-308, 2**63, -(2**63) - 1]))
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(any_text | hostile_text, inner, max_size=4), max_leaves=25)
offsets = st.builds(timezone, st.timedeltas(min_value=-timedelta(hours=23, minutes=59),
                                            max_value=timedelta(hours=23, minutes=59)))
timestamps = st.datetimes(timezones=st.none() | st.just(UTC) | offsets).map(datetime.isoformat)
field_values = st.one_of(
    json_values, timestamps,
    st.sampled_from(["test-noop", "test-typed", "send-email", "test-boom"]),
    st.integers(min_value=-(2**64), max_value=2**64), st.sampled_from(
        [0, -1, 1, 32767, 32768, -32768, -32769, 2**31 - 1, 2**31, 315360000, 315360001,
         1e308, -0.0, 0.5]),
    st.fixed_dictionaries({"to": any_text}, optional={"times": json_values}))
jobs = st.fixed_dictionaries(
    {"job_type": st.sampled_from(["test-noop", "test-typed", "send-email"]) | hostile_text},
    optional={name: field_values for name in [*JOB_FIELDS[1:], "extra", SQL, NUL]})
plausible_jobs = st.fixed_dictionaries(
    {"job_type": st.just("test-noop")},
    optional={"payload": st.dictionaries(any_text, json_values, max_size=4),
              "queue": any_text, "dedupe_key": any_text, "run_at": timestamps,
              "priority": st.integers(-32768, 32767), "max_attempts": st.integers(1, 2**31 - 1),
              "delay_seconds": st.floats(0, 315360000) | st.integers(0, 315360000)})
documents = st.one_of(jobs, plausible_jobs,
                      st.fixed_dictionaries({"jobs": st.lists(jobs | plausible_jobs, max_size=5)}),
                      json_values, st.dictionaries(st.sampled_from([*JOB_FIELDS, "jobs"]),
                                                   field_values, max_size=5))


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A POST /jobs event whose body is a JSON document, arbitrary text or arbitrary bytes."""
    kind = draw(st.sampled_from(["json", "json", "json", "text", "bytes", "long-number"]))
    encoded = False
    if kind == "json":
        body = json.dumps(draw(documents), ensure_ascii=draw(st.booleans()))
    elif kind == "long-number":  # around Python's 4300-digit limit for int(str)
        digits = "9" * draw(st.integers(4200, 4400))
        body = json.dumps({"job_type": "test-noop", "payload": {"n": 0}}).replace(
            '"n": 0', f'"n": {draw(st.sampled_from(["", "-"]))}{digits}')
    elif kind == "text":
        body = draw(st.text(st.characters(exclude_categories=()), max_size=200))
    else:
        body, encoded = base64.b64encode(draw(st.binary(max_size=200))).decode(), True
    headers = {}
    if draw(st.booleans()):
        headers["Idempotency-Key"] = draw(any_text | hostile_text)
    if draw(st.sampled_from([False] * 9 + [True])):
        headers["Content-Type"] = draw(st.sampled_from(
            ["text/plain", "application/json; charset=latin-1", "APPLICATION/JSON", NUL]))
    return enqueue_event(body, base64_encoded=encoded, headers=headers)


def test_generated_requests(load_function, conn, sql):
    seed(conn)
    app = load_function("enqueue")
    statuses: dict[int, int] = {}

    @FUZZ
    @given(event=requests())
    def fuzz(event: dict[str, Any]) -> None:
        before = table_state(sql)
        answer = invoke(app, event)
        check_answer(answer, before, table_state(sql))
        statuses[answer.status] = statuses.get(answer.status, 0) + 1

    fuzz()
    print(f"generated requests by status: {dict(sorted(statuses.items()))}")
    assert any(200 <= s < 300 for s in statuses), statuses  # the generator reaches valid jobs


# --- schemathesis, again, at this suite's example count -------------------------------------

FUZZ_TESTS = ROOT / "tests" / "functions" / "test_enqueue_fuzz.py"


@pytest.mark.skipif(not FUZZ_TESTS.exists(), reason="tests/functions/test_enqueue_fuzz.py is gone")
def test_schemathesis_at_this_suites_example_count():
    """The function tests' schemathesis run (every operation, positive and negative cases,
    through a loopback API Gateway) at ``PGDRAIN_FUZZ_EXAMPLES`` examples, 300 by default here
    where that file alone defaults to 50. It reads the count at import: hence a process."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(FUZZ_TESTS), "-q", "-k", "schemathesis"],
        cwd=ROOT, env={**os.environ, "PGDRAIN_FUZZ_EXAMPLES": str(EXAMPLES)},
        capture_output=True, text=True, timeout=900)
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", last) and "failed" not in last, last
    print(f"schemathesis at {EXAMPLES} examples per operation and mode: {last}")
