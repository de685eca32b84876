"""Embeddings filled after ingestion, on a queue of their own (``KB_EMBED_QUEUE``).

With ``KB_EMBED_QUEUE`` empty (the default) ingestion embeds inline and nothing here runs. With a
queue named, ingestion parses, splits and writes chunks without embeddings (``Chunk.embedding``
NULL) and queues ``knowledge.tasks.chunks_embed_task`` for the tenant on that queue once it
commits (``chunks_embed_enqueue``), so GPU workers (``celery -A config worker -Q <queue>``,
``KB_EMBED_DEVICE=cuda``) embed while CPU workers parse. Meanwhile the new chunks are found by
BM25 and skipped by dense search; without a broker the task runs at once on commit, so a search
right after ingestion sees them embedded, as before.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
from django.conf import settings
from django.db import connection

from core.queue import task_enqueue
from core.replicas import replica_write_mark
from knowledge import task_names
from knowledge.embedders import get_embedder
from knowledge.models import Chunk
from knowledge.vector_index import tenant_vector_index_ensure, vector_index_ensure

# A heading gives a passage its context ("contextual chunk headers"); on a sentence-sized chunk it
# would dominate the embedding. Measured on the shared datasets (docs/benchmarks.md).
HEADING_MIN_TOKENS = 50


def embedding_input(span) -> str:
    """What the embedder sees for a chunk: ``span`` is a ``Span`` at ingestion or a stored
    ``Chunk`` (anything with ``heading``, ``text`` and ``token_count``).

    Passage-sized chunks (at least ``HEADING_MIN_TOKENS`` tokens) get their heading (title and
    section) on a first line unless the text already starts with it; shorter chunks, such as
    sentences, are embedded as they are.
    """
    if span.heading and span.token_count >= HEADING_MIN_TOKENS and not span.text.startswith(span.heading):
        return f"{span.heading}\n{span.text}"
    return span.text


# Chunks read, embedded and written per round: a few GPU batches, one UPDATE.
EMBED_ROUND = 1024

_FILL = """UPDATE knowledge_chunk AS c SET embedding = v.embedding::vector
FROM unnest(%s::bigint[], %s::text[]) AS v(id, embedding)
WHERE c.id = v.id AND c.tenant_id = %s AND c.embedding IS NULL"""


def embedding_deferred() -> bool:
    """Whether ingestion leaves embedding to the embedding task (``KB_EMBED_QUEUE`` is set)."""
    return bool(settings.KB_EMBED_QUEUE)


def chunks_embed_enqueue(*, tenant_id: int) -> None:
    """Queue ``chunks_embed_task`` for ``tenant_id`` once the current transaction commits
    (routed to ``KB_EMBED_QUEUE`` by ``config.celery``; run at once without a broker)."""
    task_enqueue(task_names.CHUNKS_EMBED, tenant_id)


def _lock_key(tenant_id: int) -> int:
    return int(hashlib.sha1(f"chunks_embed:{tenant_id}".encode()).hexdigest()[:15], 16)


def chunks_embed(*, tenant_id: int, round_size: int = EMBED_ROUND) -> dict:
    """Embed every chunk of tenant ``tenant_id`` that has no embedding yet; call outside a
    transaction (each round's UPDATE commits on its own).

    Returns ``{"embedded": chunks written, "rounds": n, "seconds": wall time, "busy": bool}``.
    One worker embeds a tenant at a time, under a session advisory lock: a task finding it held
    returns ``busy`` at once, and the holder, after releasing it, looks again for waiting chunks
    (those of an ingestion that committed meanwhile) and goes on, so none is left behind. Each
    round reads the next ``round_size`` waiting chunks (by id; partial index
    ``chunk_embedding_pending_idx``), embeds them with the model each names (``Chunk.embedder``;
    ``embedding_input`` as at ingestion) outside any transaction, and writes the vectors with one
    conditional UPDATE (``embedding IS NULL``): a chunk deleted meanwhile is skipped. Then makes
    sure the HNSW indexes exist (``vector_index_ensure``, ``tenant_vector_index_ensure``).
    Embedding errors (``UpstreamError`` of an endpoint, ``EmbedderUnavailable``) propagate,
    leaving the unwritten chunks waiting for the retry.
    """
    started = time.perf_counter()
    embedded = rounds = 0
    key = _lock_key(tenant_id)
    embedders: set[str] = set()
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            if not cursor.fetchone()[0]:
                return {"embedded": embedded, "rounds": rounds, "seconds": time.perf_counter() - started, "busy": True}
        read = written = last_id = 0
        try:
            while batch := list(
                Chunk.objects.filter(tenant_id=tenant_id, embedding__isnull=True, id__gt=last_id)
                .order_by("id")
                .only("id", "embedder", "heading", "text", "token_count")[:round_size]
            ):
                rounds += 1
                read += len(batch)
                last_id = batch[-1].pk
                for embedder_key in sorted({chunk.embedder for chunk in batch}):
                    chunks = [chunk for chunk in batch if chunk.embedder == embedder_key]
                    embedder = get_embedder(embedder_key)
                    vectors = np.asarray(embedder.embed([embedding_input(c) for c in chunks]), dtype=np.float32)
                    if embedder_key not in embedders:
                        vector_index_ensure(embedder_key=embedder_key, dimensions=embedder.dimensions)
                        embedders.add(embedder_key)
                    literals = ["[" + ",".join(f"{x:.9g}" for x in row) + "]" for row in vectors.tolist()]
                    with connection.cursor() as cursor:
                        cursor.execute(_FILL, [[c.pk for c in chunks], literals, tenant_id])
                        written += cursor.rowcount
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        embedded += written
        stuck = read and not written  # never expected; ends the loop rather than spinning
        if stuck or not Chunk.objects.filter(tenant_id=tenant_id, embedding__isnull=True).exists():
            break
    for embedder_key in sorted(embedders):
        tenant_vector_index_ensure(tenant_id=tenant_id, embedder_key=embedder_key)
    if embedded:
        replica_write_mark(tenant_id=tenant_id)  # dense searches read the primary until replicas replay them
    return {"embedded": embedded, "rounds": rounds, "seconds": time.perf_counter() - started, "busy": False}
