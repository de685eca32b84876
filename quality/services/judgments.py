"""Judgment lists: questions with the documents (or chunk texts) that should be retrieved."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, transaction

from core.errors import InvalidInput
from core.models import Tenant
from quality.importers import JudgedQuery
from quality.models import Judgment, JudgmentList


def _relevant_clean(relevant, *, query_id: str) -> list[dict]:
    """Validate one judgment's ``relevant`` list; return it with grades filled in (default 1).

    Chunk-level entries (with ``text``) may name the ``chunk_id`` and ``version`` (positive ids)
    they were generated from; other keys are dropped.
    """
    if not isinstance(relevant, list) or not relevant:
        raise InvalidInput(f"Judgment {query_id!r}: 'relevant' must be a non-empty list.")
    cleaned = []
    for entry in relevant:
        if not isinstance(entry, dict) or not isinstance(entry.get("document"), str) or not entry["document"]:
            raise InvalidInput(f"Judgment {query_id!r}: every relevant entry needs a 'document' id.")
        grade = entry.get("grade", 1)
        if not isinstance(grade, int) or isinstance(grade, bool) or grade < 0:
            raise InvalidInput(f"Judgment {query_id!r}: 'grade' must be a non-negative integer.")
        item = {"document": entry["document"], "grade": grade}
        if "text" in entry:
            if not isinstance(entry["text"], str) or not entry["text"].strip():
                raise InvalidInput(f"Judgment {query_id!r}: 'text' must be a non-empty string.")
            item["text"] = entry["text"]
        for key in ("chunk_id", "version"):  # generated judgments: the chunk and version they came from
            if key in entry:
                value = entry[key]
                if not isinstance(value, int) or isinstance(value, bool) or value < 1 or "text" not in entry:
                    raise InvalidInput(f"Judgment {query_id!r}: {key!r} must be a positive id next to a 'text'.")
                item[key] = value
        cleaned.append(item)
    if len({"text" in item for item in cleaned}) > 1:
        raise InvalidInput(f"Judgment {query_id!r}: mixes chunk-level (text) and document-level entries.")
    return cleaned


def _answers_clean(answers, *, query_id: str) -> dict:
    """Validate one judgment's gold answers (``Judgment.answers``); return the known keys only.

    ``None`` or ``{}`` is no gold answer. ``answer`` and ``type`` must be non-empty strings,
    ``exact_answer`` a string or a (nested) list of strings, ``ideal_answer`` a string (stored as
    a one-item list) or a list of strings.
    """
    if answers is None:
        return {}
    if not isinstance(answers, dict):
        raise InvalidInput(f"Judgment {query_id!r}: 'answers' must be an object.")
    cleaned: dict = {}
    for key in ("answer", "type"):
        if key in answers:
            if not isinstance(answers[key], str) or not answers[key].strip():
                raise InvalidInput(f"Judgment {query_id!r}: {key!r} must be a non-empty string.")
            cleaned[key] = answers[key]
    if "exact_answer" in answers:
        if not _strings_nested(answers["exact_answer"]):
            raise InvalidInput(f"Judgment {query_id!r}: 'exact_answer' must be a string or a list of strings.")
        cleaned["exact_answer"] = answers["exact_answer"]
    if "ideal_answer" in answers:
        ideal = answers["ideal_answer"]
        ideal = [ideal] if isinstance(ideal, str) else ideal
        if not isinstance(ideal, list) or not ideal or not all(isinstance(t, str) and t.strip() for t in ideal):
            raise InvalidInput(f"Judgment {query_id!r}: 'ideal_answer' must be a list of non-empty strings.")
        cleaned["ideal_answer"] = ideal
    return cleaned


def _strings_nested(value) -> bool:
    """True for a non-empty string or a non-empty list whose items are (recursively) such."""
    if isinstance(value, str):
        return bool(value.strip())
    return isinstance(value, list) and bool(value) and all(_strings_nested(item) for item in value)


def judgment_list_import(
    *,
    tenant: Tenant,
    name: str,
    origin: str,
    judgments: Iterable[JudgedQuery | tuple[str, str, list[dict]] | tuple[str, str, list[dict], dict]],
) -> JudgmentList:
    """Create the tenant's judgment list ``name`` with ``judgments``: (query_id, question,
    relevant) or (query_id, question, relevant, answers), ``answers`` being the gold answers
    (``Judgment.answers``; absent = none).

    Everything is validated first; ``InvalidInput`` (and nothing stored) for a taken name, an
    unknown origin, an empty list, a repeated query id or a malformed ``relevant`` list or
    ``answers`` object.
    """
    if not name.strip():
        raise InvalidInput("A judgment list needs a name.")
    if origin not in JudgmentList.Origin.values:
        raise InvalidInput(f"Unknown origin {origin!r}; use one of {', '.join(JudgmentList.Origin.values)}.")
    rows: list[Judgment] = []
    seen: set[str] = set()
    for judged in judgments:
        query_id, question, relevant, *rest = judged
        query_id = str(query_id)
        if query_id in seen:
            raise InvalidInput(f"Two judgments share the query id {query_id!r}.")
        seen.add(query_id)
        if not isinstance(question, str) or not question.strip():
            raise InvalidInput(f"Judgment {query_id!r} has no question.")
        rows.append(
            Judgment(
                query_id=query_id,
                question=question.strip(),
                relevant=_relevant_clean(relevant, query_id=query_id),
                answers=_answers_clean(rest[0] if rest else None, query_id=query_id),
            )
        )
    if not rows:
        raise InvalidInput("A judgment list needs at least one judgment.")
    try:
        with transaction.atomic():
            judgment_list = JudgmentList.objects.create(tenant=tenant, name=name, origin=origin)
            for row in rows:
                row.judgment_list = judgment_list
            Judgment.objects.bulk_create(rows, batch_size=500)
    except IntegrityError as exc:
        raise InvalidInput(
            f"Tenant {tenant.slug!r} already has a judgment list {name!r}.",
            code="judgment_list_exists",
        ) from exc
    return judgment_list
