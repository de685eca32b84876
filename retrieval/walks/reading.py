"""What a walk reads: each query's unseen chunks, the chunks of the bridge entities its facts
name, and the passages its answer is written from (``retrieval.walks.stage``).

Every query is searched on its own with the run's mode, search settings and filter (hybrid
retrieval, ``retrieval.stages.retrieve.candidates`` then ``retrieval.stages.fuse``); a chunk
read once, in any round, is never read again.
"""

from __future__ import annotations

from retrieval.stages.fuse import candidates_fuse, results_fetch
from retrieval.stages.retrieve.candidates import candidates_retrieve
from retrieval.types import Passage, QueryPlan, SearchResult
from retrieval.walks.config import MAX_PASSAGES
from retrieval.walks.extraction import Fact


def _candidates(run, query: str, *, limit: int):
    """The fused ranking of ``query``'s candidates and the candidates; the retrievers' timings
    add up in ``run.timings``."""
    spec = run.spec
    candidates, timings = candidates_retrieve(
        QueryPlan.from_question(query),
        where=run.where,
        embedder=run.tenant.embedder,
        mode=run.mode,
        config=spec.search,
        limit=limit,
        memory_search=run.registry.memory_search,
    )
    for name, ms in timings.items():
        run.timings[name] = run.timings.get(name, 0.0) + ms
    return candidates_fuse(candidates, spec.search), candidates


def bridge_entities(question: str, facts: list[Fact], *, limit: int) -> list[str]:
    """The named entities the facts name and the question does not (``knowledge.enrichment.entities``,
    LLM-free), in order of the facts, at most ``limit``: the links between hops a bridge question
    hides ("the father of X" -> the father's name). ``[]`` when the NER model is not installed."""
    from knowledge.enrichment.entities import EntitiesUnavailable, entities_extract

    if limit <= 0 or not facts:
        return []
    try:
        per_fact = entities_extract([f.text for f in facts])
    except EntitiesUnavailable:
        return []
    asked = question.lower()
    found: list[str] = []
    for entities in per_fact:
        for entity in entities:
            key = entity.lower()
            if key not in asked and key not in {e.lower() for e in found} and len(key) > 2:
                found.append(entity)
    return found[:limit]


def entity_hop(run, entities: list[str], seen: dict[int, SearchResult]) -> dict[str, int | None]:
    """Search each entity on its own (the run's mode and filter) and read its best chunk when the
    walk has not read it; ``{entity: chunk id read, or None}``. The new chunks join ``seen``."""
    hops: dict[str, int | None] = {}
    for entity in entities:
        ranking, candidates = _candidates(run, entity, limit=run.spec.search.candidates)
        if not ranking or ranking[0][0] in seen:
            hops[entity] = None
            continue
        [result] = results_fetch(tenant=run.tenant, ranking=ranking[:1], candidates=candidates, k=1) or [None]
        if result is None:
            hops[entity] = None
            continue
        seen[result.chunk.pk] = result
        hops[entity] = result.chunk.pk
    return hops


def chunks_read(
    run, queries: list[str], seen: dict[int, SearchResult], *, k: int, found: dict | None = None
) -> list[SearchResult]:
    """Up to ``k`` chunks per query not in ``seen`` (chunk id -> result), best first per query.

    Each query is searched on its own (the run's mode and search settings, the run's filter);
    chunks already read, this round or before, are skipped, and the new ones are added to
    ``seen``. ``found``, when given, gets each query's new chunk ids (the walk's path).
    Retriever timings add up in ``run.timings``.
    """
    new: list[SearchResult] = []
    for query in queries:
        fused, candidates = _candidates(run, query, limit=max(run.spec.search.candidates, k))
        ranking = [(item, score) for item, score in fused if item not in seen]
        for result in results_fetch(tenant=run.tenant, ranking=ranking, candidates=candidates, k=k):
            seen[result.chunk.pk] = result
            new.append(result)
            if found is not None:
                found.setdefault(query, []).append(result.chunk.pk)
    return new


def chunk_passage(result: SearchResult) -> Passage:
    """The passage of one chunk read: its own text, its score and duplicates."""
    return Passage(
        anchor=result.chunk,
        text=result.chunk.text,
        score=result.score,
        chunks=[result.chunk.ordinal],
        duplicates=result.duplicates,
    )


def answer_passages(
    facts: list[Fact],
    seen: dict[int, SearchResult],
    *,
    with_facts: bool,
    excluded: frozenset = frozenset(),
    hops: tuple = (),
    fill: int = 0,
) -> list[Passage]:
    """The final answer's passages: one per chunk that yielded facts, in order of its first fact,
    then the chunks the entity hop read (``hops``, chunk ids), then, up to ``fill`` passages in
    all, the other chunks read in reading order.

    ``with_facts``: a passage's text is its chunk's facts, one per line (for the LLM); else the
    chunk's own text. Without facts, every chunk read, in reading order. Chunks in ``excluded``
    (whose every fact a person removed) are left out. At most ``MAX_PASSAGES``.
    """
    if not facts:
        return [chunk_passage(r) for chunk_id, r in seen.items() if chunk_id not in excluded][:MAX_PASSAGES]
    by_chunk: dict[int, list[str]] = {}
    for fact in facts:
        by_chunk.setdefault(fact.chunk_id, []).append(fact.text)
    passages = []
    for chunk_id, texts in list(by_chunk.items())[:MAX_PASSAGES]:
        passage = chunk_passage(seen[chunk_id])
        if with_facts:
            passage.text = "\n".join(texts)
        passages.append(passage)
    used = set(by_chunk)
    for chunk_id in hops:
        if chunk_id in seen and chunk_id not in used and chunk_id not in excluded:
            passages.append(chunk_passage(seen[chunk_id]))
            used.add(chunk_id)
    for chunk_id, result in seen.items():
        if len(passages) >= fill:
            break
        if chunk_id not in used and chunk_id not in excluded:
            passages.append(chunk_passage(result))
            used.add(chunk_id)
    return passages[:MAX_PASSAGES]
