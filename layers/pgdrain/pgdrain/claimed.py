"""Claimed jobs, read from what the claims return: a row (job_claim_returning's columns), its
values in order, or the plain claims' one JSON document (job_claim_document). Each payload is
decoded on its own, so that one a driver cannot decode fails its job alone."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .db import timestamptz_from_text
from .models import Job


def claimed_job(row: dict[str, Any]) -> Job:
    payload, row["payload_error"] = decode_json(row["payload"])
    row["payload"] = payload
    return Job(**row)


def claimed_job_from_values(values: Sequence[Any]) -> Job:
    """A claimed job from its row's values: job_claim_returning lists Job's fields in order."""
    fields = [*values, None]  # then payload_error
    fields[2], fields[-1] = decode_json(values[2])
    return Job(*fields)


_TIMESTAMPS = (7, 8, 9, 10)
"""Where job_claim_document's arrays hold run_at, created_at, claimed_at, lease_expires_at."""


def claimed_jobs_from_document(document: str | None) -> list[Job]:
    """The jobs of a plain claim's one JSON document (job_claim_document), in claim order.
    Its arrays hold job_claim_returning's values, timestamps as text: each is read as the
    driver reads a row's timestamp, and each payload decoded on its own (decode_json)."""
    if document is None:
        return []
    jobs = []
    for values in json.loads(document):
        for at in _TIMESTAMPS:
            values[at] = timestamptz_from_text(values[at])
        jobs.append(claimed_job_from_values(values))
    return jobs


def decode_json(text: str | None) -> tuple[Any, str | None]:
    """A JSON column read as text, decoded: ``(value, None)``, or ``(None, why)`` when
    Python cannot hold it (PostgreSQL's jsonb accepts numbers of any size and any depth)."""
    if text is None:
        return None, None
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "the stored JSON is nested too deeply to decode"
    except MemoryError:
        return None, (f"the stored JSON ({len(text):,} characters) does not fit in this "
                      "process's memory once decoded")
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return None, f"the stored JSON cannot be decoded: {str(exc)[:200]}"
