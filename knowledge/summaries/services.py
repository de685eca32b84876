"""Summary writes: a summary chunk for each current version that lacks one.

``summaries_refresh`` runs after each ingestion (``knowledge.tasks.summaries_task``, queued with
``transaction.on_commit`` by ``documents_ingest`` when the tenant's ``summaries`` setting is not
``off``) and from ``manage.py summarize``. For every current version of the tenant that holds
chunks of its own (exact duplicates excluded), has at least ``MIN_CHUNKS`` body chunks (a
one-chunk document is its own summary) and no summary yet, it:

1. writes the summary outside any transaction: with an LLM (``method`` ``llm``, or ``auto`` when
   one is configured) one chat call over the document's first ``INPUT_TOKENS`` tokens
   (``knowledge.summaries.llm``); without one, or when the call fails, the extractive summary
   (``knowledge.summaries.extractive``), the failure recorded in the chunk's
   ``metadata["summary"]["degraded"]``. After an endpoint failure (not a bad reply) the rest of
   the run stops calling the LLM; so it does once the tenant's LLM tokens of the day are used up
   (the calls count against them: ``llm.metering``, recorded as ``summaries``);
2. embeds ``"<title>\\n<summary>"`` with the tenant's embedder;
3. stores each batch in one transaction, under row locks on its versions: a version that was
   replaced meanwhile gets a summary that is not current, like its chunks; one deleted meanwhile
   gets none; one that got a summary meanwhile (a concurrent run) keeps it. A summary is one row,
   so it is never half-written.

A summary chunk is an ordinary ``Chunk`` of its version (``kind="summary"`` at
``SUMMARY_ORDINAL``): the BM25 triggers index it, ``is_current`` follows its version through
later ingestions, and retention (``versions_kept``) and document deletion remove it with the
version's other chunks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from django.db import transaction
from django.db.models import Exists, OuterRef

import llm as llm_api
from core.errors import InvalidInput
from core.models import Tenant
from core.queue import task_enqueue
from knowledge import task_names
from knowledge.embedders import get_embedder
from knowledge.ingestion_settings import SUMMARY_METHODS, summary_method
from knowledge.models import SUMMARY_ORDINAL, Chunk, DocumentVersion
from knowledge.summaries.extractive import BodyChunk, summary_extract
from knowledge.summaries.llm import summary_clean, summary_messages
from llm import LLMBadOutput, LLMEmptyReply, LLMError, llm_metered
from llm.tokenizer import count_tokens

logger = logging.getLogger(__name__)

# Values of the tenant's ``summaries`` setting and ``KB_SUMMARIES`` (``knowledge.ingestion_settings``).
METHODS = SUMMARY_METHODS
MAX_TOKENS = 120  # a summary's length (cl100k tokens): about a short paragraph; the LLM's reply is capped there
INPUT_TOKENS = 1500  # what the LLM reads of a document: its beginning
MIN_CHUNKS = 2  # documents of fewer body chunks are their own summary
BATCH = 64  # versions per embedding call and storing transaction
CONFIGURED = object()


def summaries_setting(tenant: Tenant) -> str:
    """The tenant's summary method: its ``summaries`` setting, else ``KB_SUMMARIES``.

    ``InvalidInput`` when the stored value is not one of ``METHODS``.
    """
    return summary_method(tenant)


def summaries_enqueue(*, tenant: Tenant, report=None) -> bool:
    """Queue ``knowledge.tasks.summaries_task`` for ``tenant`` once the current transaction commits.

    Only when the tenant's ``summaries`` setting is not ``off`` and ``report`` (an
    ``IngestReport``; ``None``: always) stored a new version. Returns whether it queued. A bad
    stored setting is logged and queues nothing: the ingestion it follows has already stored
    its documents and must not report a failure (the quality gate refuses such a value anyway).
    """
    try:
        method = summaries_setting(tenant)
    except InvalidInput as exc:
        logger.warning("Tenant %s: no summaries queued: %s", tenant.slug, exc.message)
        return False
    if method == "off":
        return False
    if report is not None and not any(o.status in ("created", "updated") for o in report.outcomes):
        return False
    task_enqueue(task_names.SUMMARIES, tenant.pk)
    return True


def versions_to_summarize(*, tenant: Tenant, rebuild: bool = False) -> list[int]:
    """Ids of the tenant's current versions that should have a summary and (unless ``rebuild``) lack one.

    Versions with chunks of their own and at least ``MIN_CHUNKS`` body chunks (body ordinals run
    0..n-1, so "ordinal MIN_CHUNKS - 1 exists" says it; both lookups use the unique
    (version, ordinal) index). Oldest first.
    """
    chunks = Chunk.objects.filter(version_id=OuterRef("pk"))
    versions = (
        DocumentVersion.objects.for_tenant(tenant)
        .filter(is_current=True, duplicate_of__isnull=True)
        .filter(Exists(chunks.filter(ordinal=MIN_CHUNKS - 1)))
    )
    if not rebuild:
        versions = versions.exclude(Exists(chunks.filter(ordinal=SUMMARY_ORDINAL)))
    return list(versions.order_by("pk").values_list("pk", flat=True))


@dataclass
class _Draft:
    version_id: int
    title: str
    document_text: str = ""
    text: str = ""
    method: str = "extractive"
    model: str = ""
    degraded: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    body: list[BodyChunk] = field(default_factory=list)


@dataclass
class _LLMState:
    """The run's LLM, until an endpoint failure stops its use (``reason`` says why)."""

    client: object | None
    reason: str = ""


def _resolve_llm(method: str, llm) -> tuple[object | None, str]:
    """(the client to call or None, the degradation reason when ``llm`` was asked for but is absent)."""
    if method == "extractive":
        return None, ""
    if llm is CONFIGURED:
        llm = llm_api.configured_llm()
    if llm is None:
        return None, "no LLM is configured" if method == "llm" else ""
    return llm, ""


def summaries_refresh(
    *,
    tenant_id: int,
    method: str | None = None,
    llm=CONFIGURED,
    rebuild: bool = False,
    batch: int = BATCH,
    max_tokens: int = MAX_TOKENS,
) -> dict:
    """Write the missing summaries of tenant ``tenant_id`` (see the module docstring).

    ``method`` (one of ``METHODS``) defaults to ``summaries_setting``; ``off`` does nothing.
    ``llm`` is an ``LLMClient`` (default: the configured one). ``rebuild`` rewrites existing
    summaries of current versions too (each replaced in the transaction that stores the new one).
    ``max_tokens`` bounds each summary (cl100k tokens; the LLM is asked for two thirds as many words).
    Returns counts ``{"method", "versions", "created", "llm", "extractive", "degraded",
    "tokens_in", "tokens_out", "seconds"}`` (``degraded``: versions the LLM was meant to summarize
    that got the extractive summary, e.g. once the tenant's LLM tokens of the day are used up:
    the calls count against them, ``llm.metering``). ``InvalidInput`` for an unknown method.
    Idempotent.
    """
    started = time.perf_counter()
    tenant = Tenant.objects.get(pk=tenant_id)
    method = summaries_setting(tenant) if method is None else method
    if method not in METHODS:
        raise InvalidInput(f"Summary method must be one of {', '.join(METHODS)}, not {method!r}.")
    counts = dict.fromkeys(("versions", "created", "llm", "extractive", "degraded", "tokens_in", "tokens_out"), 0)
    counts["method"] = method
    if method == "off":
        counts["seconds"] = round(time.perf_counter() - started, 3)
        return counts
    client, absent = _resolve_llm(method, llm)
    state = _LLMState(client=client, reason=absent)
    pending = versions_to_summarize(tenant=tenant, rebuild=rebuild)
    counts["versions"] = len(pending)
    embedder = get_embedder(tenant.embedder)
    for start in range(0, len(pending), batch):
        drafts = _drafts_load(tenant, pending[start : start + batch], embedder_key=embedder.key)
        with llm_metered(tenant=tenant, purpose="summaries"):
            _drafts_write(drafts, state=state, wanted_llm=method in ("auto", "llm"), max_tokens=max_tokens)
        drafts = [d for d in drafts if d.text]
        if not drafts:
            continue
        vectors = embedder.embed([f"{d.title}\n{d.text}" for d in drafts])
        counts["created"] += _drafts_store(tenant, drafts, vectors, embedder_key=embedder.key, rebuild=rebuild)
        for draft in drafts:
            counts["llm" if draft.method == "llm" else "extractive"] += 1
            counts["degraded"] += bool(draft.degraded)
            counts["tokens_in"] += draft.tokens_in
            counts["tokens_out"] += draft.tokens_out
    counts["seconds"] = round(time.perf_counter() - started, 3)
    logger.info("Summaries of tenant %s: %s", tenant.slug, counts)
    return counts


def _drafts_load(tenant: Tenant, version_ids: list[int], *, embedder_key: str) -> list[_Draft]:
    """The drafts of ``version_ids``: titles, texts and body chunks (with embeddings), one query each."""
    versions = (
        DocumentVersion.objects.for_tenant(tenant)
        .filter(pk__in=version_ids)
        .select_related("document")
        .only("id", "text", "document__title")
    )
    drafts = {v.pk: _Draft(version_id=v.pk, title=v.document.title, document_text=v.text) for v in versions}
    rows = (
        Chunk.objects.for_tenant(tenant)
        .filter(version_id__in=list(drafts), kind=Chunk.Kind.BODY, embedder=embedder_key)
        .order_by("version_id", "ordinal")
        .values_list("version_id", "ordinal", "text", "embedding")
    )
    for version_id, ordinal, text, embedding in rows:
        drafts[version_id].body.append(BodyChunk(ordinal, text, np.asarray(embedding, dtype=np.float32)))
    return [drafts[v] for v in version_ids if v in drafts and drafts[v].body]


def _drafts_write(drafts: list[_Draft], *, state: _LLMState, wanted_llm: bool, max_tokens: int) -> None:
    """Fill each draft's text: the LLM's summary when there is one to call, else (or on failure) extractive."""
    if state.client is not None and drafts:

        def write(draft: _Draft):
            messages = summary_messages(
                title=draft.title,
                text=draft.document_text,
                input_tokens=INPUT_TOKENS,
                max_words=max(5, max_tokens * 2 // 3),
            )
            return state.client.chat(messages, max_tokens=max_tokens)

        for draft, reply in zip(drafts, state.client.map(write, drafts), strict=True):
            if isinstance(reply, LLMError):
                draft.degraded = f"{reply.code}: {reply}"[:300]
                if not isinstance(reply, LLMBadOutput | LLMEmptyReply):
                    state.reason, state.client = draft.degraded, None  # the endpoint fails: stop calling it
                continue
            if isinstance(reply, Exception):
                raise reply
            text = summary_clean(reply.text, max_tokens=max_tokens)
            draft.tokens_in, draft.tokens_out = reply.usage.tokens_in, reply.usage.tokens_out
            if not text:
                draft.degraded = "llm_empty_reply: the LLM's reply held no summary"
                continue
            draft.text, draft.method, draft.model = text, "llm", getattr(state.client, "name", "")
    for draft in drafts:
        if draft.text:
            continue
        if wanted_llm and not draft.degraded and state.reason:
            draft.degraded = state.reason
        if draft.degraded:
            logger.warning("Summary of version %s degraded to extractive: %s", draft.version_id, draft.degraded)
        draft.text = summary_extract(draft.body, max_tokens=max_tokens)


def _drafts_store(tenant: Tenant, drafts: list[_Draft], vectors, *, embedder_key: str, rebuild: bool) -> int:
    """Insert the drafts' summary chunks in one transaction, under locks on their versions; how many."""
    with transaction.atomic():
        alive = {
            v.pk: v
            for v in DocumentVersion.objects.select_for_update()
            .filter(pk__in=[d.version_id for d in drafts])
            .only("id", "is_current")
        }
        summaries = Chunk.objects.filter(version_id__in=list(alive), kind=Chunk.Kind.SUMMARY)
        if rebuild:
            summaries.delete()
            taken = set()
        else:
            taken = set(summaries.values_list("version_id", flat=True))
        rows = [
            Chunk(
                tenant_id=tenant.pk,
                version_id=draft.version_id,
                kind=Chunk.Kind.SUMMARY,
                ordinal=SUMMARY_ORDINAL,
                heading=draft.title[:500],
                text=draft.text,
                token_count=count_tokens(draft.text),
                char_start=0,
                char_end=0,
                embedder=embedder_key,
                embedding=vector,
                is_current=alive[draft.version_id].is_current,
                metadata={
                    "summary": {
                        "method": draft.method,
                        **({"model": draft.model} if draft.model else {}),
                        **({"degraded": draft.degraded} if draft.degraded else {}),
                    }
                },
            )
            for draft, vector in zip(drafts, vectors, strict=True)
            if draft.version_id in alive and draft.version_id not in taken
        ]
        Chunk.objects.bulk_create(rows, batch_size=500)
    return len(rows)
