"""The README stays true: the two commands come first and every setting is in its table."""

from __future__ import annotations

import re
from pathlib import Path

from pgdrain.settings import SETTINGS, markdown_table

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_the_two_commands_come_first():
    first_block = README.split("```")[1].removeprefix("sh")
    assert [line.split("#")[0].strip() for line in first_block.strip().splitlines()] == [
        "make demo", "make test"]


def test_settings_table_is_the_one_the_code_generates():
    # Regenerate it with `python -m pgdrain.settings` after changing pgdrain/settings.py.
    assert markdown_table() in README
    rows = re.findall(r"^\| `([A-Z_]+)` \|", README, re.MULTILINE)
    assert sorted(rows) == sorted(s.name for s in SETTINGS)


def test_the_payload_limit_is_pgdrains_own_not_sqss():
    # SQS takes 1 MiB since 2025: the default is pgdrain's choice, and the README says so.
    from pgdrain.settings import DEFAULT_MAX_PAYLOAD_BYTES

    text = " ".join(README.split())
    assert DEFAULT_MAX_PAYLOAD_BYTES == 256 * 1024
    assert "(256 KiB by default: pgdrain's own limit, not SQS's, which is 1 MiB)" in text
    assert "like SQS)" not in text


def _operations_rows() -> dict[str, str]:
    table = README.split("## Operations", 1)[1].split("\n\n", 2)[1]
    return {m[1]: line for line in table.splitlines()
            for m in re.finditer(r"`pgdrain\.(\w+)\(", line.split(" | ")[0])}


def test_the_operations_table_names_real_keywords_and_all_the_janitor_does():
    import inspect

    import pgdrain

    rows = _operations_rows()
    for name, row in rows.items():
        call = re.search(rf"`pgdrain\.{name}\(([^`]*)\)`", row)
        assert call is not None
        parameters = inspect.signature(getattr(pgdrain, name)).parameters
        options = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        for keyword in re.findall(r"(\w+)=", call[1]):
            assert keyword in parameters or options, (name, keyword)
    assert 'rate="10/s"' in rows["set_queue"]
    janitor = rows["run_janitor"]
    for what in ("expired leases", "expires_at", "PGDRAIN_RETENTION_SECONDS",
                 "PGDRAIN_FAILED_RETENTION_SECONDS", "on_failed", "ran=False"):
        assert what in janitor, what


def test_the_lifecycle_diagram_has_every_status_and_way_out():
    from pgdrain.models import Status

    diagram = README.split("Job lifecycle", 1)[1].split("```")[1]
    for status in Status:
        assert status.value in diagram, status
    # pending -> cancelled, running -> cancelled (a cancel request), pending -> failed (expiry)
    for way in ("cancel ─▶ cancelled", "cancel requested", "expires_at", "requeue", "fail"):
        assert way in diagram, way
