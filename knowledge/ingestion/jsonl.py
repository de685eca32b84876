"""The JSONL reader: one document per line, each a JSON object with its text and optional fields.

Read in the calling process (time linear in the file's length); any malformed line rejects the
whole file with ``InvalidInput`` (code ``malformed_jsonl``), before anything is stored.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

from django.utils.dateparse import parse_date, parse_datetime
from django.utils.timezone import make_aware

from core.errors import InvalidInput
from knowledge.ingestion.documents import ReadDocument, normalize_text
from knowledge.ingestion.text_formats import title_from

_JSONL_TEXT_KEYS = ("text", "body", "content")
_JSONL_RESERVED = {
    "id",
    "external_id",
    "title",
    "uri",
    "url",
    "published_at",
    "date",
    *_JSONL_TEXT_KEYS,
}


# Limits of the ``Document`` fields a JSONL line fills (see ``knowledge.models.Document``).
_MAX_EXTERNAL_ID = 1000
_MAX_URI = 2000
_MAX_TITLE = 500
# The database refuses NUL characters and lone surrogates (they cannot be encoded as UTF-8).
_BAD_CHARACTER = re.compile("[\x00\ud800-\udfff]")


def _jsonl_error(name: str, number: int, problem: str) -> InvalidInput:
    return InvalidInput(f"{name}, line {number}: {problem}", code="malformed_jsonl")


def _check_characters(value, *, what: str, name: str, number: int) -> None:
    """Raise ``InvalidInput`` if a string in ``value`` (nested keys and values too) can't be stored."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_characters(key, what=what, name=name, number=number)
            label = f"field {key!r}" if what == "a field name" else f"{what}[{key!r}]"
            _check_characters(item, what=label, name=name, number=number)
    elif isinstance(value, list):
        for item in value:
            _check_characters(item, what=what, name=name, number=number)
    elif isinstance(value, str):
        match = _BAD_CHARACTER.search(value)
        if match:
            kind = "a NUL character" if match.group() == "\x00" else "an unpaired surrogate"
            raise _jsonl_error(name, number, f"{what} contains {kind} (\\u{ord(match.group()):04x}).")


def _check_length(value: str, limit: int, *, what: str, name: str, number: int) -> None:
    if len(value) > limit:
        raise _jsonl_error(
            name, number, f"{what} is {len(value)} characters long; the limit is {limit} ({value[:40]!r}…)."
        )


def _reject_constant(constant: str):
    raise ValueError(f"{constant} is not valid JSON")


def read_jsonl(text: str, *, name: str) -> list[ReadDocument]:
    """One JSON object per line with a text field (``text``, ``body`` or ``content``).

    Optional: ``id``/``external_id``, ``title``, ``uri``/``url``, ``published_at``/``date``;
    other keys become metadata. Any malformed line rejects the whole file: bad JSON, an id over
    1,000 or a uri over 2,000 characters, a NUL character, an impossible date.
    """
    docs: list[ReadDocument] = []
    seen: set[str] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or "nested too deeply"
            raise _jsonl_error(name, number, f"malformed JSON ({reason}).") from exc
        if not isinstance(row, dict):
            raise _jsonl_error(name, number, "expected a JSON object.")
        _check_characters(row, what="a field name", name=name, number=number)
        body = next((row[k] for k in _JSONL_TEXT_KEYS if isinstance(row.get(k), str)), None)
        if body is None or not body.strip():
            raise _jsonl_error(name, number, "no non-empty 'text', 'body' or 'content' field.")
        title = str(row.get("title") or "").strip()
        external_id = str(row.get("external_id") or row.get("id") or title or f"{name}#{number}")
        _check_length(external_id, _MAX_EXTERNAL_ID, what="the id", name=name, number=number)
        if external_id in seen:
            raise _jsonl_error(name, number, f"duplicate id {external_id!r}.")
        seen.add(external_id)
        uri = str(row.get("uri") or row.get("url") or "")
        _check_length(uri, _MAX_URI, what="the uri", name=name, number=number)
        normalized = normalize_text(body)
        docs.append(
            ReadDocument(
                external_id=external_id,
                uri=uri,
                title=(title or title_from(normalized, external_id))[:_MAX_TITLE],
                text=normalized,
                published_at=_parse_when(row.get("published_at") or row.get("date"), name=name, number=number),
                metadata={k: v for k, v in row.items() if k not in _JSONL_RESERVED},
            )
        )
    if not docs:
        raise InvalidInput(f"{name}: the file is empty.", code="empty_file")
    return docs


def _parse_when(value, *, name: str, number: int) -> datetime | None:
    """``published_at``/``date`` as an aware datetime; ``InvalidInput`` naming the line if impossible."""
    if value in (None, ""):
        return None
    try:
        parsed = parse_datetime(str(value))
        if parsed is None:
            day = parse_date(str(value))
            parsed = datetime(day.year, day.month, day.day) if day else None
    except ValueError as exc:  # well-formed but impossible, e.g. 2024-02-30 or 25:61
        raise _jsonl_error(name, number, f"invalid date {value!r} ({exc}).") from exc
    if parsed is None:
        raise _jsonl_error(name, number, f"unreadable date {value!r}.")
    return parsed if parsed.tzinfo else make_aware(parsed)
