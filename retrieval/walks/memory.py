"""Facts as memory: kept with their provenance, searched as one more field of the fusion, retired.

Seed ``walkingrag-multi-turn.txt``: the facts a walk extracts are "a good source of information to
be re-embedded and searched instead of the source document". Every fact a walk keeps is stored
(``facts_keep``) with its tenant, chunk, version, walk, round and an embedding with the tenant's
embedder. The ``memory`` retriever (``memory_search``) searches the facts with BM25 (PostgreSQL
full text: the fact's ``search_vector``, scored in SQL with the tenant's live facts as the corpus)
and by embedding, fuses the two by RRF and returns each fact's *chunk*: retrieval brings the
chunk and answers cite the chunk and its version, never a fact alone.

A fact is visible only under the run's ``RetrievalFilter``, applied to its chunk: an asker who may
not read the document never sees its facts, and a fact counts only while its version is current
(or, with ``as_of``, when it was). A fact a person marked wrong is never searched.
"""

from __future__ import annotations

import logging

import numpy as np
from django.db import transaction
from django.utils import timezone
from psycopg import sql

from core.errors import InvalidInput
from core.replicas import read_connection
from knowledge.embedders import get_embedder
from knowledge.models import Chunk
from retrieval.filters import RetrievalFilter
from retrieval.fusion import rrf
from retrieval.walks.models import Fact, Walk

logger = logging.getLogger(__name__)

MAX_FACT_CHARS = 400


def _entities_linked(texts: list[str], chunks: list) -> list[list[str]]:
    """Per fact text, the named entities it names (LLM-free): those of its chunk's enrichment
    (``entities``, when the tenant extracts them) that the text names, else the entities the NER
    model finds in the text itself; ``[]`` each when the model is not installed."""
    from knowledge.enrichment.entities import EntitiesUnavailable, entities_extract, entities_in

    linked: list[list[str] | None] = []
    for text, chunk in zip(texts, chunks, strict=True):
        enrichment = getattr(chunk, "enrichment", None) if chunk is not None else None
        known = list(getattr(enrichment, "entities", None) or [])
        linked.append(entities_in(text, known) if known else None)
    missing = [i for i, found in enumerate(linked) if found is None]
    if missing:
        try:
            extracted = entities_extract([texts[i] for i in missing])
        except EntitiesUnavailable:
            extracted = [[] for _ in missing]
        for i, entities in zip(missing, extracted, strict=True):
            linked[i] = entities
    return [found or [] for found in linked]


def _embed(texts: list[str], embedder: str) -> list | None:
    """The texts' embeddings with ``embedder``, or ``None`` when the embedder fails (the facts are
    kept anyway: BM25 still finds them)."""
    if not texts:
        return []
    try:
        vectors = get_embedder(embedder).embed(texts)
    except Exception as exc:  # a remote embedder down: keep the facts, unembedded
        logger.warning("Facts kept without embeddings: %s", exc)
        return None
    return [np.asarray(v, dtype=np.float32) for v in vectors]


def facts_keep(*, walk: Walk, facts: list, round: int, next_sources: list[str]) -> list[Fact]:
    """Store the ``facts`` (``retrieval.walks.extraction.Fact``) one round of ``walk`` kept.

    Each row gets the fact's chunk and that chunk's version, the walk, the round, where the walk
    looked next (``next_sources``), the entities of the chunk it names and its embedding. Sets
    ``fact.id`` on each given fact. Facts whose chunk was deleted meanwhile are skipped.
    """
    if not facts:
        return []
    chunks = {
        c.pk: c
        for c in Chunk.objects.for_tenant(walk.tenant_id)
        .filter(pk__in={f.chunk_id for f in facts})
        .select_related("enrichment")
    }
    kept = [f for f in facts if f.chunk_id in chunks]
    embedder = walk.tenant.embedder
    vectors = _embed([f.text for f in kept], embedder)
    entities = _entities_linked([f.text for f in kept], [chunks[f.chunk_id] for f in kept])
    rows = []
    for i, fact in enumerate(kept):
        chunk = chunks[fact.chunk_id]
        rows.append(
            Fact(
                tenant_id=walk.tenant_id,
                walk=walk,
                chunk_id=chunk.pk,
                version_id=chunk.version_id,
                round=round,
                text=fact.text[:MAX_FACT_CHARS],
                relevance=fact.relevance,
                next_sources=list(next_sources),
                entities=entities[i],
                embedder=embedder if vectors is not None else "",
                embedding=vectors[i] if vectors is not None else None,
            )
        )
    Fact.objects.bulk_create(rows)
    for fact, row in zip(kept, rows, strict=True):
        fact.id = row.pk
    return rows


def fact_retire(*, fact: Fact, reason: str = "wrong") -> Fact:
    """Mark ``fact`` wrong (``reason`` ``"wrong"``): the memory retriever never returns it again."""
    if reason != "wrong":
        raise InvalidInput("A person can only retire a fact as wrong.")
    fact.retired_reason, fact.retired_at = "wrong", timezone.now()
    fact.save(update_fields=["retired_reason", "retired_at"])
    return fact


def fact_restore(*, fact: Fact) -> Fact:
    """Take back a ``wrong`` mark (a superseded fact stays superseded)."""
    if fact.retired_reason == "wrong":
        fact.retired_reason, fact.retired_at = "", None
        fact.save(update_fields=["retired_reason", "retired_at"])
    return fact


def fact_correct(*, fact: Fact, text: str) -> Fact:
    """Replace the fact's text with a person's correction (re-embedded); ``InvalidInput`` when empty."""
    text = " ".join((text or "").split())
    if not text:
        raise InvalidInput("A fact's text cannot be empty.")
    if len(text) > MAX_FACT_CHARS:
        raise InvalidInput(f"A fact is at most {MAX_FACT_CHARS} characters.")
    if text == fact.text:
        return fact
    vectors = _embed([text], fact.tenant.embedder)
    fact.text, fact.corrected = text, True
    fact.embedder = fact.tenant.embedder if vectors is not None else ""
    fact.embedding = vectors[0] if vectors is not None else None
    chunk = Chunk.objects.for_tenant(fact.tenant_id).select_related("enrichment").filter(pk=fact.chunk_id).first()
    fact.entities = _entities_linked([text], [chunk])[0]
    fact.save(update_fields=["text", "corrected", "embedder", "embedding", "entities"])
    return fact


# ---- the memory retriever -------------------------------------------------------------------

# A fact the memory may serve: the tenant's, not marked wrong (its chunk's filter does the rest).
LIVE_FACTS = sql.SQL("f.tenant_id = %(filter_tenant)s AND f.retired_reason <> 'wrong'")

# BM25 over the tenant's live facts (k1 1.2, b 0.75): the query's lexemes, each fact's term
# frequencies from its tsvector, document frequencies and average length over the live facts.
_BM25 = """
WITH q AS (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %(query)s)) AS t(lexeme, positions, weights)),
live AS (SELECT f.id, f.chunk_id, f.search_vector, GREATEST(length(f.search_vector), 1) AS dl
         FROM retrieval_fact f JOIN knowledge_chunk c ON c.id = f.chunk_id WHERE {live} AND {visible}),
corpus AS (SELECT count(*) AS n, avg(dl) AS avgdl FROM live),
hits AS (SELECT live.id, live.chunk_id, live.dl, t.lexeme, coalesce(array_length(t.positions, 1), 1) AS tf
         FROM live, unnest(live.search_vector) AS t(lexeme, positions, weights)
         WHERE t.lexeme IN (SELECT lexeme FROM q)),
df AS (SELECT lexeme, count(*) AS df FROM hits GROUP BY lexeme)
SELECT hits.id, hits.chunk_id,
       sum(ln(1 + (corpus.n - df.df + 0.5) / (df.df + 0.5))
           * hits.tf * 2.2 / (hits.tf + 1.2 * (0.25 + 0.75 * hits.dl / corpus.avgdl))) AS score
FROM hits JOIN df USING (lexeme), corpus
GROUP BY hits.id, hits.chunk_id ORDER BY score DESC, hits.id LIMIT %(limit)s
"""

_DENSE = """
SELECT f.id, f.chunk_id, 1 - (f.embedding <=> %(vector)s::vector) AS score
FROM retrieval_fact f JOIN knowledge_chunk c ON c.id = f.chunk_id
WHERE {live} AND {visible} AND f.embedder = %(embedder)s AND f.embedding IS NOT NULL
  AND vector_dims(f.embedding) = %(dims)s
ORDER BY f.embedding <=> %(vector)s::vector, f.id LIMIT %(limit)s
"""


def _rows(query: str, params: dict, where: RetrievalFilter) -> list[tuple[int, int, float]]:
    statement = sql.SQL(query).format(live=LIVE_FACTS, visible=where.chunk_condition("c"))
    with read_connection().cursor() as cursor:
        cursor.execute(statement, {**where.params(), **params})
        return [(row[0], row[1], float(row[2])) for row in cursor.fetchall()]


def facts_search(
    *, query: str, where: RetrievalFilter, embedder: str | None = None, vector=None, limit: int = 50
) -> list[tuple[int, int, float]]:
    """The live facts ``where`` lets the asker see that best match ``query``: ``[(fact id, chunk
    id, score), ...]`` best first, at most ``limit``.

    BM25 over the facts' text and, with ``embedder`` (or a query ``vector``, unit length),
    cosine similarity of the facts' embeddings, fused by RRF (``retrieval.fusion.rrf``, k = 60);
    without either only BM25.
    """
    lists = {"lexical": _rows(_BM25, {"query": query, "limit": limit}, where)}
    if vector is None and embedder:
        vector = np.asarray(get_embedder(embedder).embed_query(query), dtype=np.float32)
    if vector is not None and embedder:
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        params = {"vector": vector.tolist(), "embedder": embedder, "dims": int(vector.shape[0]), "limit": limit}
        lists["dense"] = _rows(_DENSE, params, where)
    chunk_of = {fact_id: chunk_id for rows in lists.values() for fact_id, chunk_id, _score in rows}
    ranked = rrf({name: [(fact_id, score) for fact_id, _chunk_id, score in rows] for name, rows in lists.items()})
    return [(fact_id, chunk_of[fact_id], score) for fact_id, score in ranked[:limit]]


def memory_search(
    *, query: str, where: RetrievalFilter, embedder: str | None = None, vector=None, limit: int = 50
) -> list[tuple[int, float]]:
    """The memory retriever: chunks ranked by their best matching fact, ``[(chunk id, score), ...]``
    best first (at most ``limit``), for the fusion's ``memory`` list. See ``facts_search``."""
    chunks: dict[int, float] = {}
    for _fact_id, chunk_id, score in facts_search(
        query=query, where=where, embedder=embedder, vector=vector, limit=limit * 2
    ):
        chunks.setdefault(chunk_id, score)
    return list(chunks.items())[:limit]


def facts_count(*, tenant_id: int) -> int:
    """How many live facts tenant ``tenant_id`` has (any version)."""
    return Fact.objects.for_tenant(tenant_id).exclude(retired_reason="wrong").count()


@transaction.atomic
def walk_facts_retire(*, walk: Walk, fact_ids: list[int]) -> int:
    """Retire (``wrong``) the facts ``fact_ids`` of ``walk``; how many. ``InvalidInput`` for an id
    that is not one of the walk's facts."""
    facts = list(Fact.objects.for_tenant(walk.tenant_id).filter(walk=walk, pk__in=fact_ids))
    missing = set(fact_ids) - {f.pk for f in facts}
    if missing:
        raise InvalidInput(f"No fact {sorted(missing)[0]} in this walk.")
    for fact in facts:
        if fact.retired_reason != "wrong":
            fact_retire(fact=fact)
    return len(facts)
