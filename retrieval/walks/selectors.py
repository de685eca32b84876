"""Reading facts and walks under the asker's access rules: the facts API, the graph, the admin."""

from __future__ import annotations

from collections import Counter

from psycopg import sql

from core.replicas import read_connection
from retrieval.filters import RetrievalFilter
from retrieval.walks.memory import LIVE_FACTS, facts_search
from retrieval.walks.models import Fact, Walk, WalkStep

_VISIBLE_IDS = """
SELECT f.id FROM retrieval_fact f JOIN knowledge_chunk c ON c.id = f.chunk_id
WHERE {live} AND {visible} {document}
ORDER BY f.created_at DESC, f.id DESC LIMIT %(limit)s
"""


_CHUNKS_VISIBLE = "SELECT c.id FROM knowledge_chunk c WHERE c.id = ANY(%(ids)s) AND {visible}"


def chunks_visible(*, where: RetrievalFilter, chunk_ids: list[int]) -> set[int]:
    """The ids among ``chunk_ids`` of the chunks ``where`` lets its asker read now (one query)."""
    if not chunk_ids:
        return set()
    statement = sql.SQL(_CHUNKS_VISIBLE).format(visible=where.chunk_condition("c"))
    with read_connection().cursor() as cursor:
        cursor.execute(statement, {**where.params(), "ids": list(chunk_ids)})
        return {row[0] for row in cursor.fetchall()}


def facts_visible(
    *, where: RetrievalFilter, q: str = "", embedder: str | None = None, limit: int = 20, document_id=None
) -> list[Fact]:
    """The live facts ``where`` lets its asker see: best matches of ``q`` first (``facts_search``),
    or, without ``q``, newest first; only those of ``document_id`` when given. At most ``limit``
    ``Fact`` rows with their chunk, version, document and walk loaded."""
    if q.strip():
        ids = [
            fact_id for fact_id, _chunk, _score in facts_search(query=q, where=where, embedder=embedder, limit=limit)
        ]
    else:
        document = sql.SQL("")
        params = {**where.params(), "limit": limit}
        if document_id is not None:
            document = sql.SQL(
                "AND f.version_id IN (SELECT id FROM knowledge_documentversion WHERE document_id = %(document)s)"
            )
            params["document"] = document_id
        statement = sql.SQL(_VISIBLE_IDS).format(live=LIVE_FACTS, visible=where.chunk_condition("c"), document=document)
        with read_connection().cursor() as cursor:
            cursor.execute(statement, params)
            ids = [row[0] for row in cursor.fetchall()]
    rows = Fact.objects.for_tenant(where.tenant_id).filter(pk__in=ids)
    if document_id is not None:
        rows = rows.filter(version__document_id=document_id)
    by_id = {f.pk: f for f in rows.select_related("chunk", "version__document", "walk")}
    return [by_id[i] for i in ids if i in by_id]


def fact_dict(fact: Fact, *, user=None) -> dict:
    """The API's shape of a fact: text, provenance (chunk, document, version, walk, round) and state.
    The walk's question is included only when ``user`` asked it."""
    chunk, version = fact.chunk, fact.version
    document = version.document
    walk = fact.walk
    mine = walk is not None and user is not None and walk.user_id == getattr(user, "pk", None)
    return {
        "id": fact.pk,
        "fact": fact.text,
        "relevance": fact.relevance,
        "entities": fact.entities,
        "round": fact.round,
        "corrected": fact.corrected,
        "retired": fact.retired_reason or None,
        "created_at": fact.created_at.isoformat(),
        "chunk_id": chunk.pk,
        "chunk": chunk.ordinal,
        "document_id": document.pk,
        "document": document.external_id,
        "title": document.title,
        "version": version.number,
        "version_current": version.is_current,
        "walk_id": walk.pk if walk is not None else None,
        "trace_id": fact.trace_id,
        "asked_by_you": mine,
        "question": walk.question if mine else None,
    }


def walk_state(walk: Walk) -> dict:
    """The walks API's shape of ``walk``: status, round, facts (with their chunks), next queries,
    the path (steps) and the answer when it has one."""
    facts = list(
        Fact.objects.for_tenant(walk.tenant_id)
        .filter(walk=walk)
        .select_related("chunk", "version__document")
        .order_by("id")
    )
    steps = list(WalkStep.objects.for_tenant(walk.tenant_id).filter(walk=walk).order_by("round", "id"))
    return {
        "id": walk.pk,
        "question": walk.question,
        "status": walk.status,
        "round": walk.round,
        "pause_after": walk.pause_after,
        "pause_requested": walk.pause_requested,
        "stop_requested": walk.stop_requested,
        "stop_reason": walk.stop_reason or None,
        "next_queries": walk.next_queries,
        "facts": [
            {
                "id": f.pk,
                "fact": f.text,
                "relevance": f.relevance,
                "round": f.round,
                "removed": f.retired_reason == "wrong",
                "corrected": f.corrected,
                "entities": f.entities,
                "chunk_id": f.chunk_id,
                "document_id": f.version.document_id,
                "title": f.version.document.title,
                "version": f.version.number,
            }
            for f in facts
        ],
        "path": [
            {
                "round": s.round,
                "query": s.query,
                "origin": s.origin,
                "led_by": s.led_by,
                "chunk_ids": s.chunk_ids,
                "fact_count": s.fact_count,
                "false_start": s.false_start,
            }
            for s in steps
        ],
        "answer": walk.answer or None,
        "error": walk.error or None,
        "trace_id": walk.trace_id,
        "created_at": walk.created_at.isoformat(),
        "finished_at": walk.finished_at.isoformat() if walk.finished_at else None,
    }


def walk_paths_summary(*, tenant_id: int, document_id: int | None = None, top: int = 10) -> dict:
    """Where walks go, per tenant or per document: the chunks walks most often end on (the chunks of
    their last fact-yielding round), the commonest false starts (queries that found nothing new or
    nothing useful) and the facts found there. For the admin (tenant admins: no asker, no question)."""
    steps = WalkStep.objects.for_tenant(tenant_id)
    facts = Fact.objects.for_tenant(tenant_id).exclude(retired_reason="wrong")
    if document_id is not None:
        facts = facts.filter(version__document_id=document_id)
        chunk_ids = set(
            Fact.objects.for_tenant(tenant_id)
            .filter(version__document_id=document_id)
            .values_list("chunk_id", flat=True)
        )
    ends: Counter = Counter()
    last_round: dict[int, int] = {}
    rows = list(facts.values_list("walk_id", "round", "chunk_id"))
    for walk_id, round_, _chunk_id in rows:
        if walk_id is not None:
            last_round[walk_id] = max(last_round.get(walk_id, 0), round_)
    for walk_id, round_, chunk_id in rows:
        if walk_id is not None and last_round.get(walk_id) == round_:
            ends[chunk_id] += 1
    false_starts: Counter = Counter()
    for query, chunks in steps.filter(false_start=True).values_list("query", "chunk_ids"):
        if document_id is None or chunk_ids.intersection(chunks or []):
            false_starts[query.lower()] += 1
    return {
        "walks": Walk.objects.for_tenant(tenant_id).count() if document_id is None else len(last_round),
        "ends": ends.most_common(top),
        "false_starts": false_starts.most_common(top),
        "facts": list(facts.order_by("-created_at").values_list("id", "text", "chunk_id")[: top * 3]),
    }
