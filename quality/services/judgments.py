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


def judgment_list_import(
    *,
    tenant: Tenant,
    name: str,
    origin: str,
    judgments: Iterable[JudgedQuery | tuple[str, str, list[dict]]],
) -> JudgmentList:
    """Create the tenant's judgment list ``name`` with ``judgments`` (query_id, question, relevant).

    Everything is validated first; ``InvalidInput`` (and nothing stored) for a taken name, an
    unknown origin, an empty list, a repeated query id or a malformed ``relevant`` list.
    """
    if not name.strip():
        raise InvalidInput("A judgment list needs a name.")
    if origin not in JudgmentList.Origin.values:
        raise InvalidInput(f"Unknown origin {origin!r}; use one of {', '.join(JudgmentList.Origin.values)}.")
    rows: list[Judgment] = []
    seen: set[str] = set()
    for query_id, question, relevant in judgments:
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
