"""Large synthetic-but-real-text corpora for the scale benchmarks, and a fast bulk loader.

Text. The base units are the sentences of the shared evaluation corpora (BioASQ 12b dev,
HotpotQA distractor dev50, RAG4p Vasa; ``../shared/datasets``, built as ``quality.importers``
builds them; the Django docs are added when ``KB_DATA_DIR/downloads`` holds them). A synthetic
chunk is a run of 2-4 consecutive sentences of one document (its topic) followed by 1-2
consecutive sentences of another random document: real text, real vocabulary and term
statistics, about 150 cl100k tokens like the product's 160-token chunks.

Vectors. Every base sentence is embedded once with the real embedder (all-MiniLM-L6-v2; cached
in ``KB_DATA_DIR/bench-cache``). A chunk's vector is the token-weighted mean of its sentences'
real vectors plus isotropic Gaussian noise of norm ``noise`` (default 0.05), normalized. MiniLM
mean-pools token embeddings, so the mean of the parts' embeddings approximates the embedding of
their concatenation; ``neighbour_fidelity`` measures how well (cosine to the real embedding of
the same text, and overlap of exact top-10 neighbour sets computed with synthetic vs real
vectors on a sample). The noise keeps chunks that share sentences from being exact duplicates.

Loading. ``tenant_bulk_load`` writes documents and versions with ``bulk_create`` and chunks with
``COPY`` in batches: the chunk table's generated columns (``term_freqs``, ``term_count``) and
statement-level triggers (migrations 0002/0003: postings, term and corpus statistics) run
exactly as for the product's own inserts, so BM25 works on the loaded tenant; then it calls the
product's ``tenant_vector_index_ensure``; ``VACUUM (ANALYZE)`` stands in for autovacuum.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _toolkit import percentile

ROOT = Path(__file__).resolve().parent.parent
DATASETS = Path(os.environ.get("KB_BENCH_DATASETS", ROOT.parent / "shared" / "datasets"))


@dataclass
class Sentence:
    document: int  # index of its base document
    title: str
    text: str
    tokens: int


@dataclass
class SyntheticChunk:
    heading: str
    text: str
    tokens: int
    vector: np.ndarray  # float32, unit length
    parts: tuple[int, ...]  # indices of the base sentences it was made of


def base_documents() -> list[tuple[str, str]]:
    """``(title, text)`` of every document of the shared corpora (and the Django docs if downloaded)."""
    from django.conf import settings

    from quality.importers import dataset_load

    documents: list[tuple[str, str]] = []
    sets = [
        ("bioasq", [DATASETS / "bioasq" / "bioasq-12b-dev.json"]),
        ("hotpotqa", [DATASETS / "hotpotqa" / "hotpotqa-distractor-dev50.json"]),
        ("rag4p", [DATASETS / "rag4p-vasa"]),
    ]
    for name, paths in sets:
        documents.extend((d.title or d.external_id, d.text) for d in dataset_load(name=name, paths=paths).documents)
    downloads = Path(settings.KB_DATA_DIR) / "downloads"
    for path in sorted(downloads.rglob("docs/**/*.txt")) if downloads.exists() else []:
        documents.append((path.stem, path.read_text(errors="replace")))
    return documents


def base_sentences(limit: int | None = None) -> list[Sentence]:
    """The first ``limit`` (default all) sentences of at least 20 characters of ``base_documents``, in order.

    The order is BioASQ, HotpotQA, RAG4p, Django docs; a smaller ``limit`` makes the base
    (and its one-off embedding) cheaper at the price of fewer distinct sentences.
    """
    from knowledge.ingestion.splitters import sentence_offsets
    from llm.tokenizer import count_tokens

    sentences = []
    for index, (title, text) in enumerate(base_documents()):
        for a, b in sentence_offsets(text):
            piece = " ".join(text[a:b].split())
            if len(piece) >= 20:
                sentences.append(Sentence(index, title[:200], piece, count_tokens(piece)))
    return sentences[:limit]


def base_vectors(sentences: list[Sentence], *, embedder_key: str = "local", batch: int = 512) -> np.ndarray:
    """Real embeddings of ``sentences`` (n x d float32), cached in KB_DATA_DIR/bench-cache.

    Embeds in batches of ``batch`` and keeps each batch on disk under the hash of its texts, so
    an interrupted run resumes and a prefix of the same list reuses the batches.
    """
    from django.conf import settings

    from knowledge.embedders import get_embedder

    folder = Path(settings.KB_DATA_DIR) / "bench-cache"
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for start in range(0, len(sentences), batch):
        texts = [s.text for s in sentences[start : start + batch]]
        digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
        path = folder / f"vectors-{embedder_key}-{digest}.npy"
        if not path.exists():
            np.save(path, get_embedder(embedder_key).embed(texts))
            print(f"embedded {start + len(texts)}/{len(sentences)} texts", flush=True)
        parts.append(np.load(path))
    return np.concatenate(parts)


def synthetic_chunks(
    n: int, *, sentences: list[Sentence], vectors: np.ndarray, seed: int = 0, noise: float = 0.05
) -> list[SyntheticChunk]:
    """``n`` chunks recombined from real sentences, with vectors built as the module docstring says."""
    rng = np.random.default_rng(seed)
    by_document: dict[int, list[int]] = {}
    for i, s in enumerate(sentences):
        by_document.setdefault(s.document, []).append(i)
    documents = list(by_document)
    dims = vectors.shape[1]
    chunks = []
    for _ in range(n):
        main, other = rng.choice(len(documents), size=2, replace=False)
        parts: list[int] = []
        for doc, run in ((documents[main], int(rng.integers(2, 5))), (documents[other], int(rng.integers(1, 3)))):
            ids = by_document[doc]
            start = int(rng.integers(0, max(1, len(ids) - run + 1)))
            parts.extend(ids[start : start + run])
        weights = np.array([sentences[i].tokens for i in parts], dtype=np.float32)
        mixed = (weights[:, None] * vectors[parts]).sum(axis=0) / weights.sum()
        mixed = mixed / np.linalg.norm(mixed)
        mixed = mixed + rng.normal(0.0, noise / np.sqrt(dims), dims).astype(np.float32)
        mixed = (mixed / np.linalg.norm(mixed)).astype(np.float32)
        text = " ".join(sentences[i].text for i in parts)
        chunks.append(
            SyntheticChunk(
                heading=sentences[parts[0]].title,
                text=text,
                tokens=int(weights.sum()) + len(parts) - 1,
                vector=mixed,
                parts=tuple(parts),
            )
        )
    return chunks


def neighbour_fidelity(chunks: list[SyntheticChunk], *, sample: int = 1000, k: int = 10, seed: int = 1) -> dict:
    """How close synthetic vectors are to real embeddings of the same text, on ``sample`` chunks.

    Embeds the sample's texts with the real embedder and reports the mean cosine between each
    synthetic vector and its real embedding, and the mean overlap of exact top-``k`` neighbour
    sets (within the sample) under synthetic vs real vectors (1.0 = same neighbours).
    """
    from knowledge.embedders import get_embedder

    rng = np.random.default_rng(seed)
    picked = rng.choice(len(chunks), size=min(sample, len(chunks)), replace=False)
    synthetic = np.stack([chunks[i].vector for i in picked])
    started = time.perf_counter()
    real = get_embedder("local").embed([chunks[i].text for i in picked])
    embed_seconds = time.perf_counter() - started

    def neighbours(m: np.ndarray) -> np.ndarray:
        sims = m @ m.T
        np.fill_diagonal(sims, -2)
        return np.argsort(-sims, axis=1)[:, :k]

    a, b = neighbours(synthetic), neighbours(real)
    overlap = float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b, strict=True)]))
    return {
        "sample": len(picked),
        "mean_cosine_synthetic_vs_real": round(float(np.mean(np.sum(synthetic * real, axis=1))), 3),
        f"top{k}_neighbour_overlap": round(overlap, 3),
        "real_embed_chunks_per_s": round(len(picked) / embed_seconds, 1),
    }


def tenant_bulk_load(
    *,
    tenant,
    source,
    chunks: list[SyntheticChunk],
    embedder_key: str = "local",
    chunks_per_document: int = 10,
    batch: int = 5000,
    prefix: str = "syn",
    ensure_index: bool = True,
) -> dict:
    """Store ``chunks`` in ``tenant``/``source``: documents of ``chunks_per_document`` chunks each.

    Each batch of documents is one transaction (documents, current versions, ``COPY`` of their
    chunks; the BM25 triggers fire per ``COPY`` statement). Returns ``{"chunks", "store_seconds",
    "chunks_per_s", "index_seconds", "index"}``.
    """
    from django.db import connection, transaction

    from knowledge.models import Document, DocumentVersion
    from knowledge.vector_index import tenant_vector_index_ensure

    columns = (
        "tenant_id, version_id, ordinal, heading, text, token_count, char_start, char_end,"
        " embedder, embedding, metadata"
    )
    started = time.perf_counter()
    per_batch = max(1, batch // chunks_per_document) * chunks_per_document
    existing = Document.objects.filter(tenant=tenant, external_id__startswith=f"{prefix}/").count()
    for offset in range(0, len(chunks), per_batch):
        part = chunks[offset : offset + per_batch]
        groups = [part[i : i + chunks_per_document] for i in range(0, len(part), chunks_per_document)]
        with transaction.atomic():
            documents = Document.objects.bulk_create(
                Document(
                    tenant=tenant,
                    source=source,
                    external_id=f"{prefix}/{existing + offset // chunks_per_document + i}",
                    title=group[0].heading,
                )
                for i, group in enumerate(groups)
            )
            texts = ["\n\n".join(c.text for c in group) for group in groups]
            versions = DocumentVersion.objects.bulk_create(
                DocumentVersion(
                    tenant=tenant,
                    document=document,
                    number=1,
                    text=text,
                    content_hash=hashlib.sha256(text.encode()).hexdigest(),
                    is_current=True,
                )
                for document, text in zip(documents, texts, strict=True)
            )
            with (
                connection.cursor() as cursor,
                cursor.cursor.copy(f"COPY knowledge_chunk ({columns}) FROM STDIN") as copy,
            ):
                for version, group in zip(versions, groups, strict=True):
                    position = 0
                    for ordinal, chunk in enumerate(group):
                        end = position + len(chunk.text)
                        vector = "[" + ",".join(f"{x:.6g}" for x in chunk.vector) + "]"
                        copy.write_row(
                            (tenant.pk, version.pk, ordinal, chunk.heading, chunk.text, chunk.tokens,
                             position, end, embedder_key, vector, "{}")
                        )  # fmt: skip
                        position = end + 2
    store_seconds = time.perf_counter() - started
    with connection.cursor() as cursor:
        # What autovacuum does within a minute or so of a burst (knowledge_posting's thresholds,
        # migration 0012): statistics, and the visibility map that makes postings reads index-only.
        cursor.execute("VACUUM (ANALYZE) knowledge_chunk, knowledge_posting, knowledge_termstatistic")
    started = time.perf_counter()
    index = tenant_vector_index_ensure(tenant_id=tenant.pk, embedder_key=embedder_key) if ensure_index else None
    return {
        "chunks": len(chunks),
        "store_seconds": round(store_seconds, 1),
        "chunks_per_s": round(len(chunks) / store_seconds, 1),
        "index": index,
        "index_seconds": round(time.perf_counter() - started, 1),
    }


def benchmark_questions(limit: int) -> list[str]:
    """Up to ``limit`` real questions (BioASQ 12b dev, then HotpotQA dev50), for timing searches."""
    from quality.importers import dataset_load

    questions = [
        q.question
        for name, path in (
            ("bioasq", DATASETS / "bioasq" / "bioasq-12b-dev.json"),
            ("hotpotqa", DATASETS / "hotpotqa" / "hotpotqa-distractor-dev50.json"),
        )
        for q in dataset_load(name=name, paths=[path]).judgments
    ]
    return questions[:limit]


def question_vectors(questions: list[str]) -> np.ndarray:
    """Real embeddings of ``questions`` (cached like ``base_vectors``): searches are timed without embedding."""
    return base_vectors([Sentence(-1, "", q, 0) for q in questions], batch=256)


def summary(times_ms: list[float]) -> dict:
    """``{"p50_ms", "p95_ms", "n"}`` of a list of timings in milliseconds."""
    return {
        "p50_ms": round(percentile(times_ms, 50), 2),
        "p95_ms": round(percentile(times_ms, 95), 2),
        "n": len(times_ms),
    }


def searchers(tenant, *, k: int = 10, candidates: int = 100) -> dict:
    """Timed search callables for ``tenant``, each ``f(question, vector) -> None``, query embedding excluded.

    ``dense`` (the product's dense retriever, plan chosen as in production), ``dense_exact`` and
    ``dense_hnsw`` (plans forced; ``dense_hnsw`` uses the shared per-embedder index when the
    tenant has none: the design before per-tenant indexes), ``lexical`` (BM25 retriever, MaxScore
    top-k chosen as in production), ``lexical_exhaustive`` (every posting scored), ``hybrid`` (both
    retrievers as the product runs them with the current ``KB_CONCURRENT_RETRIEVERS``, then fusion
    and the result rows' fetch: the search API's work after the query embedding)
    and ``hybrid_sequential`` (the same, one retriever after the other whatever the setting).
    """
    from dataclasses import replace

    from retrieval.config import SearchConfig
    from retrieval.filters import RetrievalFilter
    from retrieval.stages.fuse import candidates_fuse, results_fetch
    from retrieval.stages.retrieve.candidates import candidates_retrieve
    from retrieval.stages.retrieve.dense import vector_search
    from retrieval.stages.retrieve.lexical import bm25_search
    from retrieval.types import QueryPlan

    where = RetrievalFilter.for_tenant(tenant)
    config = SearchConfig.for_tenant(tenant)

    def dense(plan):
        return lambda question, vector: vector_search(
            where=where,
            embedder=tenant.embedder,
            vector=vector,
            limit=candidates,
            ef_search=config.ef_search,
            plan=plan,
        )

    def lexical(question, vector):
        bm25_search(where=where, query=question, limit=candidates, k1=config.bm25_k1, b=config.bm25_b)

    def lexical_exhaustive(question, vector):
        bm25_search(where=where, query=question, limit=candidates, k1=config.bm25_k1, b=config.bm25_b, prune=False)

    def hybrid_with(*, concurrent: bool):
        def hybrid(question, vector):
            plan = replace(QueryPlan.from_question(question), dense_vector=[float(x) for x in vector])
            lists, _ = candidates_retrieve(
                plan,
                where=where,
                embedder=tenant.embedder,
                mode="hybrid",
                config=config,
                limit=candidates,
                concurrent=concurrent,
            )
            results_fetch(tenant=tenant, ranking=candidates_fuse(lists, config), candidates=lists, k=k)

        return hybrid

    return {
        "dense": dense("auto"),
        "dense_exact": dense("exact"),
        "dense_hnsw": dense("hnsw"),
        "lexical": lexical,
        "lexical_exhaustive": lexical_exhaustive,
        "hybrid": hybrid_with(concurrent=True),
        "hybrid_sequential": hybrid_with(concurrent=False),
    }


def lexical_exactness(tenant, questions: list[str], *, limit: int = 100) -> dict:
    """MaxScore BM25 top-``limit`` (``prune=True``) against exhaustive scoring, per question.

    Returns ``{"queries", "identical_rankings"}`` (same chunk ids in the same order),
    ``"identical_sets"``, ``"max_relative_score_difference"`` (floating-point summation order)
    and ``"differing"`` (the first few questions whose rankings differ, for inspection).
    """
    from retrieval.config import SearchConfig
    from retrieval.filters import RetrievalFilter
    from retrieval.stages.retrieve.lexical import bm25_search

    where = RetrievalFilter.for_tenant(tenant)
    config = SearchConfig.for_tenant(tenant)
    same_order = same_set = 0
    worst = 0.0
    differing = []
    for question in questions:
        kwargs = {"where": where, "query": question, "limit": limit, "k1": config.bm25_k1, "b": config.bm25_b}
        exhaustive = bm25_search(**kwargs, prune=False)
        pruned = bm25_search(**kwargs, prune=True)
        same_order += [c for c, _ in exhaustive] == [c for c, _ in pruned]
        same_set += {c for c, _ in exhaustive} == {c for c, _ in pruned}
        scores = dict(exhaustive)
        for chunk, score in pruned:
            if chunk in scores:
                worst = max(worst, abs(score - scores[chunk]) / max(abs(scores[chunk]), 1e-300))
        if [c for c, _ in exhaustive] != [c for c, _ in pruned] and len(differing) < 5:
            differing.append(question)
    return {
        "queries": len(questions),
        "limit": limit,
        "identical_rankings": same_order,
        "identical_sets": same_set,
        "max_relative_score_difference": worst,
        "differing": differing,
    }


def time_interleaved(runs: dict, questions: list[str], vectors: np.ndarray, *, rounds: int = 1) -> dict:
    """Run every callable of ``runs`` on each question in turn (after one warm-up pass) and summarize.

    Interleaving makes background load weigh on every configuration alike, and the order rotates
    by one per question, so each configuration runs equally often right after each other one (a
    slow exact scan leaves the CPU caches cold for whatever runs next).
    """
    for run in runs.values():
        for question, vector in list(zip(questions, vectors, strict=True))[:10]:
            run(question, vector)
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs.items())
    turn = 0
    for _ in range(rounds):
        for question, vector in zip(questions, vectors, strict=True):
            for name, run in order[turn % len(order) :] + order[: turn % len(order)]:
                started = time.perf_counter()
                run(question, vector)
                times[name].append((time.perf_counter() - started) * 1000)
            turn += 1
    return {name: summary(values) for name, values in times.items()}


def dense_overlap(tenant, vectors: np.ndarray, *, limit: int = 100, ef_search: int = 100) -> float:
    """Mean overlap of the tenant-index top-``limit`` with the exact scan's (recall@limit against exact)."""
    from retrieval.filters import RetrievalFilter
    from retrieval.stages.retrieve.dense import vector_search

    where = RetrievalFilter.for_tenant(tenant)
    overlaps = []
    for vector in vectors:
        kwargs = {"where": where, "embedder": tenant.embedder, "vector": vector, "limit": limit, "ef_search": ef_search}
        exact = {c for c, _ in vector_search(**kwargs, plan="exact")}
        indexed = {c for c, _ in vector_search(**kwargs, plan="hnsw")}
        overlaps.append(len(exact & indexed) / max(1, len(exact)))
    return round(float(np.mean(overlaps)), 4)


def tenant_fresh(slug: str):
    """A new empty tenant ``slug`` (an existing one is deleted first) with a source ``corpus``."""
    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.services.tenants import source_get_or_create, tenant_delete

    for old in Tenant.objects.filter(slug=slug):
        tenant_delete(tenant=old)
    tenant = tenant_create(slug=slug)
    return tenant, source_get_or_create(tenant=tenant, name="corpus")


def relation_bytes() -> int:
    """Total size of the chunk table and the BM25 tables, indexes and TOAST included (bytes)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(ARRAY['knowledge_chunk',"
            " 'knowledge_posting', 'knowledge_termstatistic', 'knowledge_corpusstatistic',"
            " 'knowledge_document', 'knowledge_documentversion']) AS t"
        )
        return int(cursor.fetchone()[0])


def tenant_of_size(slug: str, size: int, *, sentences, vectors, seed: int, index: bool | None) -> tuple:
    """The tenant ``slug`` holding ``size`` synthetic chunks (``seed``), and its load report.

    Reuses the tenant when it already holds ``size`` chunks (its load report is kept in
    KB_DATA_DIR/bench-cache/<slug>.json); else (re)creates and bulk-loads it, measuring the
    database growth. ``index``: ``None`` = the product's rule (``tenant_vector_index_ensure``
    after loading), ``True`` = build the tenant index whatever the size, ``False`` = none.
    """
    import json

    from django.conf import settings

    from core.models import Tenant
    from knowledge.models import Chunk
    from knowledge.vector_index import tenant_vector_index_ensure

    record = Path(settings.KB_DATA_DIR) / "bench-cache" / f"{slug}.json"
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is not None and Chunk.objects.filter(tenant=tenant).count() == size and record.exists():
        load = {**json.loads(record.read_text()), "reused": True}
    else:
        tenant, source = tenant_fresh(slug)
        chunks = synthetic_chunks(size, sentences=sentences, vectors=vectors, seed=seed)
        before = relation_bytes()
        load = tenant_bulk_load(tenant=tenant, source=source, chunks=chunks, ensure_index=index is None)
        load["bytes_per_1k_chunks"] = round((relation_bytes() - before) / size * 1000)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(load))
    if index:
        started = time.perf_counter()
        built = tenant_vector_index_ensure(tenant_id=tenant.pk, embedder_key=tenant.embedder, min_chunks=0)
        load = {**load, "index": built, "forced_index_seconds": round(time.perf_counter() - started, 1)}
    return tenant, load
