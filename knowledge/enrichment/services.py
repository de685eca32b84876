"""Enrichment writes: a tenant's chunks get keyphrases (and, when switched on, named entities; with
an LLM, questions) and their BM25 postings.

``chunks_enrich`` runs after each ingestion (``knowledge.tasks.enrichment_task``, queued with
``transaction.on_commit`` by ``documents_ingest`` when the tenant's switch is on) and from
``manage.py enrich``. Per batch of chunks it extracts keyphrases (YAKE, ``keyphrases``), named
entities when the tenant's ``enrichment_entities`` switch is on (spaCy, ``entities``), asks the
configured LLM for ``KB_ENRICHMENT_QUESTIONS`` questions per chunk (``questions``, calls in
parallel up to the client's concurrency) outside any transaction, then stores, in one
transaction and one SQL statement, each chunk's ``ChunkEnrichment`` row and the postings of its
field (English analysis of keyphrases, questions and entities, as the body's BM25 uses). The
postings' triggers keep the field's statistics. A chunk whose LLM call failed keeps its
keyphrases only and records why (``questions_error``); when spaCy or its model is missing, the
chunks are enriched without entities and ``entities_error`` says why: an enrichment is never
half-written, and neither the LLM nor the NER model ever blocks ingestion or enrichment. The LLM
calls count against the tenant's daily LLM tokens (``llm.metering``, recorded as
``enrichment``): over its limit they are not made, and the chunks keep their keyphrases only,
``questions_error`` giving the figures.
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
from knowledge.enrichment.entities import EntitiesUnavailable, entities_extract
from knowledge.enrichment.keyphrases import keyphrases_extract
from knowledge.enrichment.questions import questions_generate
from knowledge.ingestion_settings import enrichment_entities_on, enrichment_on
from knowledge.models import Chunk
from knowledge.models.enrichment import ChunkEnrichment, field_text
from llm import LLMError, Usage, llm_metered

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
    SELECT r.chunk_id, r.keyphrases, r.questions, r.entities, r.method, r.questions_error, r.entities_error,
           to_tsvector('english', r.field) AS v
    FROM jsonb_to_recordset(%(rows)s::jsonb)
         AS r(chunk_id bigint, keyphrases jsonb, questions jsonb, entities jsonb, method text,
              questions_error text, entities_error text, field text)
),
chunks AS (
    SELECT c.id, c.tenant_id, c.is_current FROM knowledge_chunk c
    WHERE c.tenant_id = %(tenant)s AND c.id IN (SELECT chunk_id FROM given)
    FOR SHARE
),
stored AS (
    INSERT INTO knowledge_chunkenrichment
        (chunk_id, tenant_id, keyphrases, questions, entities, method, questions_error, entities_error,
         term_count, created_at)
    SELECT g.chunk_id, c.tenant_id, g.keyphrases, g.questions, g.entities, g.method, g.questions_error,
           g.entities_error,
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
    entities: bool | None = None,
    keyphrases: bool = True,
    batch_size: int = BATCH_SIZE,
) -> dict:
    """Enrich the tenant's chunks; returns counts.

    Which chunks: ``chunk_ids`` (the tenant's among them), else every current chunk of the
    tenant; without ``force`` only those not enriched yet (so the call is idempotent and a
    re-run after a crash resumes), with ``force`` their enrichment is replaced (each batch in one
    transaction: old and new never mix). ``llm``: an ``LLMClient`` (or ``None`` for keyphrases
    only); by default the configured one when ``KB_ENRICHMENT_QUESTIONS`` > 0. ``questions``:
    questions per chunk (default ``KB_ENRICHMENT_QUESTIONS``). ``entities``: extract named
    entities (default: the tenant's ``enrichment_entities`` switch, else
    ``KB_ENRICHMENT_ENTITIES``). ``keyphrases``: false leaves YAKE out (the benchmarks compare a
    field of entities alone).

    Returns ``{"chunks", "with_questions", "questions_failed", "with_entities",
    "entities_failed", "usage", "keyphrase_seconds", "entity_seconds", "llm_seconds",
    "seconds"}``; ``chunks`` counts the enrichments stored. LLM and NER failures are recorded per
    chunk (``ChunkEnrichment.questions_error``, ``entities_error``), never raised (the tenant's
    LLM tokens used up included); database errors propagate (a batch then stores nothing).
    """
    started = time.perf_counter()
    tenant = Tenant.objects.get(pk=tenant_id)
    llm = _configured_llm() if llm == CONFIGURED else llm
    n = settings.KB_ENRICHMENT_QUESTIONS if questions is None else questions
    if n <= 0:
        llm = None
    if entities is None:
        entities = enrichment_entities_on(tenant)
    chunks = Chunk.objects.for_tenant(tenant)
    chunks = chunks.filter(pk__in=list(chunk_ids)) if chunk_ids is not None else chunks.filter(is_current=True)
    if not force:
        chunks = chunks.filter(enrichment__isnull=True)
    ids = list(chunks.order_by("pk").values_list("pk", flat=True))
    summary = {"chunks": 0, "with_questions": 0, "questions_failed": 0, "with_entities": 0, "entities_failed": 0}
    usage = Usage()
    timings = {"keyphrase_seconds": 0.0, "entity_seconds": 0.0, "llm_seconds": 0.0}
    # Why entities cannot be extracted (the package is missing): found once, kept for every batch.
    ner = {"on": entities, "error": ""}
    for i in range(0, len(ids), batch_size):
        batch = list(
            Chunk.objects.for_tenant(tenant)
            .filter(pk__in=ids[i : i + batch_size])
            .order_by("pk")
            .values_list("pk", "heading", "text")
        )
        with llm_metered(tenant=tenant, purpose="enrichment"):
            rows = _batch_enrich(batch, llm=llm, n=n, usage=usage, timings=timings, keyphrases=keyphrases, ner=ner)
        with transaction.atomic():
            if force:
                ChunkEnrichment.objects.for_tenant(tenant).filter(chunk_id__in=[r["chunk_id"] for r in rows]).delete()
            with connection.cursor() as cursor:
                cursor.execute(_STORE, {"rows": json.dumps(rows), "tenant": tenant.pk})
            stored = ChunkEnrichment.objects.for_tenant(tenant).filter(chunk_id__in=[r["chunk_id"] for r in rows])
            summary["chunks"] += stored.count()
        summary["with_questions"] += sum(1 for r in rows if r["questions"])
        summary["questions_failed"] += sum(1 for r in rows if r["questions_error"])
        summary["with_entities"] += sum(1 for r in rows if r["entities"])
        summary["entities_failed"] += sum(1 for r in rows if r["entities_error"])
    summary.update({k: round(v, 3) for k, v in timings.items()})
    summary["usage"] = usage.as_dict()
    summary["seconds"] = round(time.perf_counter() - started, 3)
    logger.info("Enrichment of tenant %s: %s", tenant.slug, summary)
    return summary


def _batch_entities(texts: list[str], *, ner: dict, timings: dict) -> tuple[list[list[str]], str]:
    """The named entities of ``texts`` and ``""``, or empty lists and why there are none.

    ``ner``: ``{"on", "error"}``, shared by a run's batches: a missing package is found by the
    first batch and not looked for again. A failure of the model itself is logged and recorded,
    never raised.
    """
    if not ner["on"] or ner["error"]:
        return [[] for _ in texts], ner["error"]
    t = time.perf_counter()
    try:
        return entities_extract(texts), ""
    except EntitiesUnavailable as error:
        ner["error"] = f"entities_unavailable: {error}"[:500]
        logger.warning("Enrichment goes on without entities: %s", error)
        return [[] for _ in texts], ner["error"]
    except Exception as error:  # spaCy failed on this batch: recorded, the next batch tries again
        logger.error("Entity extraction failed", exc_info=error)
        return [[] for _ in texts], f"error: {type(error).__name__}: {error}"[:500]
    finally:
        timings["entity_seconds"] += time.perf_counter() - t


def _batch_enrich(
    batch: list[tuple[int, str, str]], *, llm, n: int, usage: Usage, timings: dict, keyphrases: bool, ner: dict
) -> list[dict]:
    """The rows ``_STORE`` takes for ``batch`` (``(chunk id, heading, text)``): keyphrases (when
    ``keyphrases``), entities (when ``ner["on"]``) and questions (when ``llm``)."""
    t = time.perf_counter()
    phrase_lists = [keyphrases_extract(text) if keyphrases else [] for _, _, text in batch]
    timings["keyphrase_seconds"] += time.perf_counter() - t
    entity_lists, entities_error = _batch_entities([text for _, _, text in batch], ner=ner, timings=timings)
    parts = (["yake"] if keyphrases else []) + (["ner"] if ner["on"] and not entities_error else [])
    if llm is not None:
        parts.append(f"llm:{llm.name}")
    method = ("+".join(parts) or "none")[:200]
    asked: list = [None] * len(batch)
    if llm is not None:
        t = time.perf_counter()
        asked = llm.map(lambda row: questions_generate(llm, heading=row[1], text=row[2], n=n), batch)
        timings["llm_seconds"] += time.perf_counter() - t
    rows = []
    for (chunk_id, _, _), phrases, found, answer in zip(batch, phrase_lists, entity_lists, asked, strict=True):
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
        rows.append(
            {
                "chunk_id": chunk_id,
                "keyphrases": phrases,
                "questions": questions,
                "method": method,
                "questions_error": error,
                "entities": found,
                "entities_error": entities_error,
                "field": field_text(phrases, questions, found),
            }
        )
    return rows
