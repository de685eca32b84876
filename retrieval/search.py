"""Hybrid chunk search without rewriting: the ``simple`` pipeline's retrieve and fuse stages.

``chunk_search`` is the entry point of the search API and command. Both retrievers apply one
``RetrievalFilter`` inside their SQL and result rows are fetched by one narrow query scoped to the
tenant (``retrieval.stages.fuse.chunks_load``): no path returns another tenant's chunk. In hybrid
mode the query is embedded while the BM25 query runs (``candidates_retrieve``). Pipelines with rewrite stages go through
``retrieval.pipeline.pipeline_retrieve``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.replicas import replica_reads
from retrieval.config import FUSIONS, MAX_QUERY_CHARS, MODES, SearchConfig
from retrieval.pipeline import pipeline_retrieve, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.types import SearchResult

__all__ = ["FUSIONS", "MAX_QUERY_CHARS", "MODES", "SearchConfig", "SearchResponse", "SearchResult", "chunk_search"]


@dataclass
class SearchResponse:
    """Ranked results, timings in ms (``lexical_ms``, ``embed_ms``, ``dense_ms``, ``fusion_ms``,
    ``fetch_ms``, ``total_ms``; in hybrid mode also ``embed_wait_ms`` and ``overlap_ms``, see
    ``candidates_retrieve``), the mode and the config used."""

    results: list[SearchResult]
    timings_ms: dict[str, float]
    mode: str
    config: SearchConfig


@replica_reads  # reads from a healthy replica when there are some (core.replicas)
def chunk_search(request: AnswerRequest, *, tenant, user=None, config: SearchConfig | None = None) -> SearchResponse:
    """Search the tenant's chunks for ``request`` (``retrieval.request.AnswerRequest``: the
    question as the query, ``k``, ``mode`` (hybrid, lexical + dense fused, by default; lexical or
    dense), sources, ``as_of``, the switches); the top ``k`` with each retriever's score and rank.

    ``config`` defaults to the tenant's; ``user`` is who asks (access rules, personalization).
    ``InvalidInput`` for an empty or over-long query, ``k`` outside 1-200 or an unknown mode.
    """
    spec = pipeline_spec(tenant=tenant, name="simple")
    if config is not None:
        spec = replace(spec, search=config)
    request = replace(request, mode=request.mode or "hybrid")
    run = pipeline_retrieve(request, tenant=tenant, user=user, spec=spec)
    return SearchResponse(results=run.results, timings_ms=run.timings_ms, mode=request.mode, config=spec.search)
