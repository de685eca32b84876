"""The peers' side of ``benchmarks/peers.py``: run in ``benchmarks/.peers-venv``, never in the product's.

Usage (by peers.py only): .peers-venv/bin/python _peers_runner.py --workdir DIR --dsn DSN [--rebuild]

``DIR`` holds what peers.py exported from the product's tenant: ``chunks.jsonl`` (one line per
chunk: ``id``, ``document``, ``content``: the text the product embedded), ``chunk_vectors.npy``
(float32, one row per line of chunks.jsonl: the product's stored MiniLM vectors) and
``query_vectors.npy`` (float32, one row per question) with ``queries.jsonl`` (``text``). Every
peer indexes the same chunks with the same vectors, in its own tables of database ``DSN``;
tables are reused when they hold exactly these chunks (``--rebuild`` drops and reloads them).

Protocol on stdin/stdout, one JSON object per line: after loading, the runner prints
``{"ready": true, "retrievers": [...], "versions": {...}, "load_s": {...}}``; then for each
``{"q": i, "k": k}`` it runs every retriever on question ``i`` (query vector and text given,
no embedding anywhere) and prints ``{"q": i, "results": {name: {"ms": float, "ids": [chunk
ids, best first]}}}``; ``{"quit": true}`` ends it. Diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
from _toolkit import log

HAYSTACK_TABLE = "haystack_bioasq"
LANGCHAIN_COLLECTION = "bioasq"


def load_inputs(workdir: Path):
    chunks = [json.loads(line) for line in (workdir / "chunks.jsonl").read_text().splitlines() if line]
    vectors = np.load(workdir / "chunk_vectors.npy")
    queries = [json.loads(line)["text"] for line in (workdir / "queries.jsonl").read_text().splitlines() if line]
    query_vectors = np.load(workdir / "query_vectors.npy")
    return chunks, vectors, queries, query_vectors


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "missing"


# --- Haystack 2.x: pgvector-haystack ------------------------------------------------------------


def haystack_retrievers(dsn: str, chunks, vectors, *, rebuild: bool, k: int):
    """Haystack's pgvector retrievers: embedding (HNSW), keyword (ts_rank_cd) and their hybrid
    (both + DocumentJoiner with reciprocal rank fusion, the documented hybrid pattern)."""
    from haystack import Document, Pipeline
    from haystack.components.joiners import DocumentJoiner
    from haystack.document_stores.types import DuplicatePolicy
    from haystack.utils import Secret
    from haystack_integrations.components.retrievers.pgvector import (
        PgvectorEmbeddingRetriever,
        PgvectorKeywordRetriever,
    )
    from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

    def store(recreate: bool) -> PgvectorDocumentStore:
        return PgvectorDocumentStore(
            connection_string=Secret.from_token(dsn),
            table_name=HAYSTACK_TABLE,
            embedding_dimension=int(vectors.shape[1]),
            vector_function="cosine_similarity",
            recreate_table=recreate,
            search_strategy="hnsw",
            hnsw_recreate_index_if_exists=recreate,
            hnsw_ef_search=max(k, 40),
            language="english",
            keyword_index_name=f"{HAYSTACK_TABLE}_keyword_index",
            hnsw_index_name=f"{HAYSTACK_TABLE}_hnsw_index",
        )

    document_store = store(recreate=rebuild)
    if rebuild or document_store.count_documents() != len(chunks):
        document_store = store(recreate=True)
        started = time.perf_counter()
        documents = [
            Document(id=str(c["id"]), content=c["content"], meta={"document": c["document"]}, embedding=v.tolist())
            for c, v in zip(chunks, vectors, strict=True)
        ]
        for i in range(0, len(documents), 500):
            document_store.write_documents(documents[i : i + 500], policy=DuplicatePolicy.OVERWRITE)
        log(f"haystack: wrote {len(documents)} documents in {time.perf_counter() - started:.1f}s")
    dense = PgvectorEmbeddingRetriever(document_store=document_store, top_k=k)
    keyword = PgvectorKeywordRetriever(document_store=document_store, top_k=k)
    hybrid = Pipeline()
    hybrid.add_component("dense", PgvectorEmbeddingRetriever(document_store=document_store, top_k=k))
    hybrid.add_component("keyword", PgvectorKeywordRetriever(document_store=document_store, top_k=k))
    hybrid.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=k))
    hybrid.connect("dense", "joiner")
    hybrid.connect("keyword", "joiner")

    def ids(documents) -> list[int]:
        return [int(d.id) for d in documents]

    return {
        "haystack_dense": lambda text, vector: ids(dense.run(query_embedding=vector)["documents"]),
        "haystack_keyword": lambda text, vector: ids(keyword.run(query=text)["documents"]),
        "haystack_hybrid": lambda text, vector: ids(
            hybrid.run({"dense": {"query_embedding": vector}, "keyword": {"query": text}})["joiner"]["documents"]
        ),
    }


# --- LangChain: langchain-postgres -------------------------------------------------------------


class _GivenVectors:
    """A LangChain ``Embeddings`` that never embeds: vectors are precomputed by the product."""

    def embed_documents(self, texts):  # pragma: no cover - documents are added with their vectors
        raise RuntimeError("vectors are precomputed")

    def embed_query(self, text):  # pragma: no cover - queries pass their vector
        raise RuntimeError("vectors are precomputed")


def langchain_retrievers(dsn: str, chunks, vectors, *, rebuild: bool, k: int):
    """LangChain's ``PGVector`` (langchain-postgres): dense search by vector (it has no keyword or
    hybrid search in this class), over an HNSW index on its embedding column (cosine) that the
    runner adds, with ``hnsw.ef_search`` at least ``k``."""
    from langchain_postgres import PGVector
    from sqlalchemy import text as sql

    url = "postgresql+psycopg://" + dsn.split("://", 1)[1]
    dims = int(vectors.shape[1])

    def make(pre_delete: bool) -> PGVector:
        return PGVector(
            embeddings=_GivenVectors(),
            connection=url,
            collection_name=LANGCHAIN_COLLECTION,
            embedding_length=dims,
            pre_delete_collection=pre_delete,
            use_jsonb=True,
            # HNSW's beam at least the candidate depth, as for the product and Haystack.
            engine_args={"connect_args": {"options": f"-c hnsw.ef_search={max(k, 40)}"}},
        )

    store = make(pre_delete=rebuild)
    with store.session_maker() as session:
        count = session.execute(
            sql(
                "SELECT count(*) FROM langchain_pg_embedding e JOIN langchain_pg_collection c"
                " ON c.uuid = e.collection_id WHERE c.name = :name"
            ),
            {"name": LANGCHAIN_COLLECTION},
        ).scalar()
    if rebuild or count != len(chunks):
        store = make(pre_delete=True)
        started = time.perf_counter()
        for i in range(0, len(chunks), 500):
            batch = chunks[i : i + 500]
            store.add_embeddings(
                texts=[c["content"] for c in batch],
                embeddings=[v.tolist() for v in vectors[i : i + 500]],
                metadatas=[{"chunk_id": c["id"], "document": c["document"]} for c in batch],
                ids=[str(c["id"]) for c in batch],
            )
        with store.session_maker() as session:  # the HNSW index pgvector's docs recommend for this table
            session.execute(sql("DROP INDEX IF EXISTS langchain_pg_embedding_hnsw"))
            session.execute(
                sql(
                    "CREATE INDEX langchain_pg_embedding_hnsw ON langchain_pg_embedding USING hnsw (embedding vector_cosine_ops)"
                )
            )
            session.commit()
        log(f"langchain: wrote {len(chunks)} documents in {time.perf_counter() - started:.1f}s")

    def dense(text, vector):
        found = store.similarity_search_with_score_by_vector(vector, k=k)
        return [int(doc.metadata["chunk_id"]) for doc, _ in found]

    return {"langchain_dense": dense}


PEERS = {"haystack": haystack_retrievers, "langchain": langchain_retrievers}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("-k", type=int, default=100)
    parser.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS))
    args = parser.parse_args()
    chunks, vectors, queries, query_vectors = load_inputs(args.workdir)
    retrievers: dict = {}
    load_s: dict[str, float] = {}
    errors: dict[str, str] = {}
    for name in args.peers:
        started = time.perf_counter()
        try:
            retrievers.update(PEERS[name](args.dsn, chunks, vectors, rebuild=args.rebuild, k=args.k))
        except Exception as exc:  # a broken peer is reported, the others still run
            errors[name] = f"{type(exc).__name__}: {exc}"
            log(f"{name}: {errors[name]}")
        load_s[name] = round(time.perf_counter() - started, 2)
    versions = {
        name: _version(name)
        for name in ("haystack-ai", "pgvector-haystack", "langchain-postgres", "langchain-core", "psycopg", "pgvector")
    }
    print(
        json.dumps(
            {"ready": True, "retrievers": list(retrievers), "versions": versions, "load_s": load_s, "errors": errors}
        ),
        flush=True,
    )
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        i = int(request["q"])
        text, vector = queries[i], query_vectors[i].tolist()
        results = {}
        names = list(retrievers)
        shift = i % len(names) if names else 0
        for name in names[shift:] + names[:shift]:  # rotate the order: no retriever always goes first
            started = time.perf_counter()
            ids = retrievers[name](text, vector)
            results[name] = {"ms": (time.perf_counter() - started) * 1000, "ids": ids[: args.k]}
        print(json.dumps({"q": i, "results": results}), flush=True)


if __name__ == "__main__":
    main()
