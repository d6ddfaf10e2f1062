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
