"""A job's result, progress and checkpoints as they are stored: a handler's return value, its
progress reports and the state it saves, checked and encoded as JSON text. Pure: no I/O,
nothing of pgdrain's below it."""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_PROGRESS_MESSAGE = 500
"""The longest progress message, in characters."""

MAX_CHECKPOINT_BYTES = 256 * 1024
"""The largest state ``job.checkpoint()`` saves, in bytes of JSON: state to resume from (a
cursor, a page number, the ids done so far), not the work's output (that is the result, or
the app's own tables)."""

# A JSON-escaped NUL that is not itself an escaped backslash followed by "u0000": jsonb
# cannot hold one.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _json_text(value: Any) -> tuple[str | None, str | None]:
    """``value`` as compact JSON text that jsonb can hold, or ``(None, why not)``."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        return None, f"it is not JSON ({exc})"
    except RecursionError:
        return None, "it is nested too deep for JSON"
    if _JSON_NUL.search(text):
        return None, "it holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None, "it holds a lone surrogate (not valid Unicode)"
    return text, None


def encode_checkpoint(state: Any) -> str:
    """``job.checkpoint(state)``'s state as JSON text, or ValueError saying why it cannot be
    saved (raised in the handler that called it)."""
    text, problem = _json_text(state)
    if text is None:
        raise ValueError(f"checkpoint not saved: {problem}")
    size = len(text.encode("utf-8"))
    if size > MAX_CHECKPOINT_BYTES:
        raise ValueError(f"checkpoint not saved: {size} bytes of JSON, above the "
                         f"{MAX_CHECKPOINT_BYTES} a checkpoint may hold")
    return text


MAX_SIGNAL_PAYLOAD_BYTES = 256 * 1024
"""The largest payload a signal carries (``pgdrain.signal``), in bytes of JSON."""


def encode_signal_payload(payload: Any) -> str:
    """A signal's payload as JSON text, or ValueError saying why it cannot be sent."""
    text, problem = _json_text(payload)
    if text is None:
        raise ValueError(problem)
    size = len(text.encode("utf-8"))
    if size > MAX_SIGNAL_PAYLOAD_BYTES:
        raise ValueError(f"{size} bytes of JSON, above the {MAX_SIGNAL_PAYLOAD_BYTES} a "
                         "signal may carry")
    return text


def encode_result(value: Any, max_bytes: int) -> tuple[str | None, str | None]:
    """A handler's return value as ``(json_text, None)``; ``(None, None)`` for None (no
    result); ``(None, why)`` when it cannot be stored: not JSON-serialisable, holding a NUL,
    or more than ``max_bytes`` of UTF-8 (the job still ends done: its work was done)."""
    if value is None:
        return None, None
    text, problem = _json_text(value)
    if text is None:
        return None, f"result not stored: {problem}"
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        return None, (f"result not stored: {size} bytes of JSON, above "
                      f"PGDRAIN_RESULT_MAX_BYTES ({max_bytes})")
    return text, None


def encode_progress(fraction: Any, message: Any = None) -> str:
    """``job.progress(fraction, message)`` as JSON text, or ValueError/TypeError saying what is
    wrong (raised in the handler that called it: a bug there, not the job's failure to run)."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"progress fraction must be a number from 0 to 1, not {fraction!r}")
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ValueError(f"progress fraction must be from 0 to 1, not {fraction!r}")
    report: dict[str, Any] = {"fraction": float(fraction)}
    if message is not None:
        if not isinstance(message, str):
            raise TypeError(f"progress message must be a string, not {type(message).__name__}")
        if len(message) > MAX_PROGRESS_MESSAGE or "\x00" in message:
            raise ValueError(f"progress message must be at most {MAX_PROGRESS_MESSAGE} "
                             "characters, without NUL")
        report["message"] = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return json.dumps(report, ensure_ascii=False)


def decode_meta(text: str) -> tuple[dict[str, Any], str | None]:
    """A job's stored meta (JSON text) decoded: ``(object, None)``, or ``({}, why)`` when
    Python cannot decode it or it is no object (plain SQL may store either)."""
    try:
        value: Any = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return {}, f"the stored JSON cannot be decoded: {str(exc)[:200]}"
    if not isinstance(value, dict):
        return {}, f"it is a JSON {type(value).__name__}, not an object"
    return dict(value), None
