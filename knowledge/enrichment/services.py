"""Enrichment writes: a tenant's chunks get keyphrases (and, with an LLM, questions) and their BM25 postings.

``chunks_enrich`` runs after each ingestion (``knowledge.tasks.enrichment_task``, queued with
``transaction.on_commit`` by ``documents_ingest`` when the tenant's switch is on) and from
``manage.py enrich``. Per batch of chunks it extracts keyphrases (YAKE, ``keyphrases``), asks the
configured LLM for ``KB_ENRICHMENT_QUESTIONS`` questions per chunk (``questions``, calls in
parallel up to the client's concurrency) outside any transaction, then stores, in one
transaction and one SQL statement, each chunk's ``ChunkEnrichment`` row and the postings of its
field (English analysis of keyphrases and questions, as the body's BM25 uses). The postings'
triggers keep the field's statistics. A chunk whose LLM call failed keeps its keyphrases only and
records why (``questions_error``): an enrichment is never half-written, and the LLM never blocks
ingestion or enrichment.
"""

from __future__ import annotations

import json
import logging
import time

from django.conf import settings
from django.db import connection, transaction

import llm as llm_api
from core.models import Tenant
from core.queue import task_enqueue
from knowledge import task_names
from knowledge.enrichment.keyphrases import keyphrases_extract
from knowledge.enrichment.questions import questions_generate
from knowledge.ingestion_settings import enrichment_on
from knowledge.models import Chunk
from knowledge.models.enrichment import ChunkEnrichment, field_text
from llm import LLMError, Usage

logger = logging.getLogger(__name__)

BATCH_SIZE = 200
CONFIGURED = "configured"  # ``chunks_enrich(llm=...)``'s default: the configured LLM, when questions are on

# Each chunk's enrichment row and its field's postings, in one statement (the postings' triggers
# then update the statistics once). Chunks deleted meanwhile, other tenants' chunks and chunks
# enriched meanwhile (ON CONFLICT) are skipped. The chunk rows are read FOR SHARE: a version
# change flipping their is_current waits for this transaction, then its trigger
# (knowledge 0016) updates the postings copied here, so the copy never goes stale.
_STORE = """
WITH given AS (
    SELECT r.chunk_id, r.keyphrases, r.questions, r.method, r.questions_error,
           to_tsvector('english', r.field) AS v
    FROM jsonb_to_recordset(%(rows)s::jsonb)
         AS r(chunk_id bigint, keyphrases jsonb, questions jsonb, method text, questions_error text, field text)
),
chunks AS (
    SELECT c.id, c.tenant_id, c.is_current FROM knowledge_chunk c
    WHERE c.tenant_id = %(tenant)s AND c.id IN (SELECT chunk_id FROM given)
    FOR SHARE
),
stored AS (
    INSERT INTO knowledge_chunkenrichment
        (chunk_id, tenant_id, keyphrases, questions, method, questions_error, term_count, created_at)
    SELECT g.chunk_id, c.tenant_id, g.keyphrases, g.questions, g.method, g.questions_error,
           (SELECT COALESCE(sum(COALESCE(cardinality(t.positions), 1)), 0) FROM unnest(g.v) AS t)::integer,
           now()
    FROM given g
    JOIN chunks c ON c.id = g.chunk_id
    ON CONFLICT (chunk_id) DO NOTHING
    RETURNING chunk_id, tenant_id, term_count
)
INSERT INTO knowledge_enrichmentposting (tenant_id, lexeme, chunk_id, tf, field_length, is_current)
SELECT s.tenant_id, t.lexeme, s.chunk_id, COALESCE(cardinality(t.positions), 1), s.term_count, c.is_current
FROM stored s
JOIN given g ON g.chunk_id = s.chunk_id
JOIN chunks c ON c.id = s.chunk_id
CROSS JOIN LATERAL unnest(g.v) AS t
"""


def enrichment_enabled(tenant: Tenant) -> bool:
    """Whether ``tenant``'s chunks are enriched after ingestion: its ``enrichment`` setting (true
    or false), else ``KB_ENRICHMENT``. Another stored value is ``InvalidInput``."""
    return enrichment_on(tenant)


def enrichment_enqueue(*, tenant: Tenant, report) -> None:
    """Queue ``knowledge.tasks.enrichment_task`` for ``tenant`` once the ingestion commits, when
    it stored new chunks (``report``: an ``IngestReport``) and ``enrichment_enabled``."""
    if not report.counts()["chunks"] or not enrichment_enabled(tenant):
        return
    task_enqueue(task_names.ENRICHMENT, tenant.pk)


def _configured_llm():
    if settings.KB_ENRICHMENT_QUESTIONS <= 0:
        return None
    return llm_api.configured_llm()


def chunks_enrich(
    *,
    tenant_id: int,
    chunk_ids: list[int] | None = None,
    force: bool = False,
    llm=CONFIGURED,
    questions: int | None = None,
    batch_size: int = BATCH_SIZE,
) -> dict:
    """Enrich the tenant's chunks; returns counts.

    Which chunks: ``chunk_ids`` (the tenant's among them), else every current chunk of the
    tenant; without ``force`` only those not enriched yet (so the call is idempotent and a
    re-run after a crash resumes), with ``force`` their enrichment is replaced (each batch in one
    transaction: old and new never mix). ``llm``: an ``LLMClient`` (or ``None`` for keyphrases
    only); by default the configured one when ``KB_ENRICHMENT_QUESTIONS`` > 0. ``questions``:
    questions per chunk (default ``KB_ENRICHMENT_QUESTIONS``).

    Returns ``{"chunks", "with_questions", "questions_failed", "usage", "keyphrase_seconds",
    "llm_seconds", "seconds"}``; ``chunks`` counts the enrichments stored. LLM failures are
    recorded per chunk (``ChunkEnrichment.questions_error``), never raised; database errors
    propagate (a batch then stores nothing).
    """
    started = time.perf_counter()
    tenant = Tenant.objects.get(pk=tenant_id)
    llm = _configured_llm() if llm == CONFIGURED else llm
    n = settings.KB_ENRICHMENT_QUESTIONS if questions is None else questions
    if n <= 0:
        llm = None
    chunks = Chunk.objects.for_tenant(tenant)
    chunks = chunks.filter(pk__in=list(chunk_ids)) if chunk_ids is not None else chunks.filter(is_current=True)
    if not force:
        chunks = chunks.filter(enrichment__isnull=True)
    ids = list(chunks.order_by("pk").values_list("pk", flat=True))
    summary = {"chunks": 0, "with_questions": 0, "questions_failed": 0}
    usage = Usage()
    timings = {"keyphrase_seconds": 0.0, "llm_seconds": 0.0}
    for i in range(0, len(ids), batch_size):
        batch = list(
            Chunk.objects.for_tenant(tenant)
            .filter(pk__in=ids[i : i + batch_size])
            .order_by("pk")
            .values_list("pk", "heading", "text")
        )
        rows = _batch_enrich(batch, llm=llm, n=n, usage=usage, timings=timings)
        with transaction.atomic():
            if force:
                ChunkEnrichment.objects.for_tenant(tenant).filter(chunk_id__in=[r["chunk_id"] for r in rows]).delete()
            with connection.cursor() as cursor:
                cursor.execute(_STORE, {"rows": json.dumps(rows), "tenant": tenant.pk})
            stored = ChunkEnrichment.objects.for_tenant(tenant).filter(chunk_id__in=[r["chunk_id"] for r in rows])
            summary["chunks"] += stored.count()
        summary["with_questions"] += sum(1 for r in rows if r["questions"])
        summary["questions_failed"] += sum(1 for r in rows if r["questions_error"])
    summary.update({k: round(v, 3) for k, v in timings.items()})
    summary["usage"] = usage.as_dict()
    summary["seconds"] = round(time.perf_counter() - started, 3)
    logger.info("Enrichment of tenant %s: %s", tenant.slug, summary)
    return summary


def _batch_enrich(batch: list[tuple[int, str, str]], *, llm, n: int, usage: Usage, timings: dict) -> list[dict]:
    """The rows ``_STORE`` takes for ``batch`` (``(chunk id, heading, text)``): keyphrases, and questions when ``llm``."""
    t = time.perf_counter()
    keyphrases = [keyphrases_extract(text) for _, _, text in batch]
    timings["keyphrase_seconds"] += time.perf_counter() - t
    asked: list = [None] * len(batch)
    if llm is not None:
        t = time.perf_counter()
        asked = llm.map(lambda row: questions_generate(llm, heading=row[1], text=row[2], n=n), batch)
        timings["llm_seconds"] += time.perf_counter() - t
    rows = []
    for (chunk_id, _, _), phrases, answer in zip(batch, keyphrases, asked, strict=True):
        questions: list[str] = []
        error = ""
        if isinstance(answer, Exception):
            if isinstance(answer, LLMError):
                usage.add(answer.usage)
                error = f"{answer.code}: {answer}"[:500]
            else:  # a bug, not the LLM: recorded the same way, and logged with its traceback
                logger.error("Questions for chunk %s failed", chunk_id, exc_info=answer)
                error = f"error: {type(answer).__name__}"[:500]
        elif answer is not None:
            questions, call_usage = answer
            usage.add(call_usage)
        method = "yake" if llm is None else f"yake+llm:{llm.name}"[:200]
        rows.append(
            {
                "chunk_id": chunk_id,
                "keyphrases": phrases,
                "questions": questions,
                "method": method,
                "questions_error": error,
                "field": field_text(phrases, questions),
            }
        )
    return rows
