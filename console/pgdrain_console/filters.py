"""The jobs page's filters, read from a query string or a form without I/O: each field checked,
with a message that says what is wrong with the one that is."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

from pgdrain.browse import JobFilter
from pgdrain.bulk import job_filter, tag_problem
from pgdrain.cli.arguments import duration
from pgdrain.cli.bulk import meta_match
from pgdrain.models import Status

STATUSES = tuple(s.value for s in Status)
WAITING_FOR = ("parents", "signal")
TEXT_FIELDS = {"type": "job_type", "queue": "queue", "tenant": "tenant",
               "ordering_key": "ordering_key", "dedupe_key": "dedupe_key", "q": "search"}
AGE_FIELDS = {"older_than": "older_than_seconds", "newer_than": "newer_than_seconds"}
FIELDS = ("status", "waiting_for", *TEXT_FIELDS, "tags", "meta", *AGE_FIELDS)
"""The query string's names, in the order the form shows them."""
MAX_TEXT = 500


@dataclass(frozen=True)
class Filters:
    match: JobFilter
    raw: dict[str, str] = field(default_factory=dict)
    """The fields given (non-empty), as typed: the form shows them again, links carry them."""
    problems: tuple[str, ...] = ()

    def query(self, **extra: object) -> str:
        """A query string with these filters (and ``extra``), for a link."""
        values = {**self.raw, **{k: str(v) for k, v in extra.items() if v is not None}}
        return urlencode(values)


def read(values: Mapping[str, str]) -> Filters:
    # Names are exact ("emails " is a queue of its own): only the choices, ages, tags and
    # meta are trimmed.
    raw = {name: values[name] if name in TEXT_FIELDS else values[name].strip()
           for name in FIELDS if values.get(name, "").strip()}
    problems: list[str] = []
    given: dict[str, object] = {}
    status = raw.get("status")
    if status is not None:
        if status in STATUSES:
            given["status"] = status
        else:
            problems.append(f"status is one of {', '.join(STATUSES)}")
    waiting_for = raw.get("waiting_for")
    if waiting_for is not None:
        if waiting_for in WAITING_FOR:
            given["waiting_for"] = waiting_for
        else:
            problems.append("waiting for is parents or signal")
    for name, target in TEXT_FIELDS.items():
        text = raw.get(name)
        if text is not None:
            if len(text) > MAX_TEXT:
                problems.append(f"{name.replace('_', ' ')} is at most {MAX_TEXT} characters")
            else:
                given[target] = text
    tags = raw.get("tags")
    if tags is not None:
        # Tags hold neither spaces nor commas: either separates them.
        words = tags.replace(",", " ").split()
        problem = next((p for p in map(tag_problem, words) if p), None)
        if problem:
            problems.append(f"tags: {problem}")
        else:
            given["tags"] = tuple(dict.fromkeys(words))
    meta = raw.get("meta")
    if meta is not None:
        try:
            given["meta"] = job_filter({"meta": meta_match(meta)}).meta
        except (argparse.ArgumentTypeError, ValueError) as exc:
            problems.append(f"meta: {exc}")
    for name, target in AGE_FIELDS.items():
        text = raw.get(name)
        if text is not None:
            try:
                given[target] = duration(text)
            except argparse.ArgumentTypeError as exc:
                problems.append(f"{name.replace('_', ' ')}: {exc}")
    return Filters(JobFilter(**given), raw, tuple(problems))  # type: ignore[arg-type]


def page_start(values: Mapping[str, str]) -> tuple[int | None, str | None]:
    """The ``before`` id a page starts at (None: the newest), or a problem."""
    text = values.get("before", "").strip()
    if not text:
        return None, None
    if text.isascii() and text.isdigit() and len(text) <= 19:
        return int(text), None
    return None, "before is a job id"
