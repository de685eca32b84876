"""Side by side on the shared BioASQ dev set: the product's retrievers against the peers'.

Usage: python benchmarks/peers.py [--install] [--rebuild] [--rounds 1] [--warmup 20] [--no-peers]
       [--peers haystack langchain] [--questions N]

``--install`` creates ``benchmarks/.peers-venv`` (``python -m venv``) and installs the peers
there, never into the product's environment: Haystack 2.x (``haystack-ai`` +
``pgvector-haystack``) and LangChain (``langchain-postgres``). They need no torch (every vector
is computed here, once, by the product's embedder), and a constraint refuses any that would
pull one in. Without the venv the script says how to make it and still prints the product's rows.

What runs: the BioASQ dev corpus (``../shared/datasets``, built as its README says) is ingested
once into the tenant ``bench-bioasq`` (shared with ``retrieval_quality.py``; reused while its
documents are unchanged). Its chunks (the text the product embedded) and their stored MiniLM
vectors are handed to the peers, which index them in their own tables of the database
``kb_peers`` on the same PostgreSQL server (reused between runs; ``--rebuild`` reloads them).
The 170 questions are embedded once with the product's embedder and every retriever gets the
same query vector, so latency is retrieval only (no embedding anywhere): for the product, the
retrieve and fuse stages plus fetching the top 100 result rows (``Retrieve``, ``Fuse``, ``Rerank``); for a
peer, its retriever's ``run`` returning documents. Two more product rows include the query
embedding (the embedder's query cache cleared first): ``product_hybrid+embed`` embeds while BM25
runs, ``product_hybrid+embed_sequential`` one after the other.

Quality is document level for everyone: the top 100 chunks, a document ranked at its best
chunk (``quality.metrics``), nDCG@10, recall@10, recall@100, MRR@10. Latency: p50/p95 over all
questions x rounds, warm (``--warmup`` questions first, untimed), product and peers interleaved
per question (which goes first alternates). Prints JSON; writes benchmarks/results/peers.json
and peers.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from _setup import ROOT, django_setup
from _toolkit import log, percentile, tenant_for

DATASET = ROOT.parent / "shared" / "datasets" / "bioasq" / "bioasq-12b-dev.json"
TENANT = "bench-bioasq"
PEERS_DB = "kb_peers"
VENV = ROOT / "benchmarks" / ".peers-venv"
RUNNER = ROOT / "benchmarks" / "_peers_runner.py"
RESULTS = ROOT / "benchmarks" / "results"
# Pinned so re-runs compare; the peers need no torch (vectors are given to them).
PEER_REQUIREMENTS = [
    "haystack-ai==2.31.0",
    "pgvector-haystack==8.1.2",
    "langchain-postgres==0.0.19",
    "psycopg[binary]==3.3.9",
]
NO_TORCH = "torch==0.0.0\n"  # an impossible pin: installation fails if a peer ever requires torch
K = 100
PRODUCT_MODES = ("lexical", "dense", "hybrid")


def venv_python() -> Path:
    return VENV / "bin" / "python"


def peers_install() -> None:
    """Create ``benchmarks/.peers-venv`` and install ``PEER_REQUIREMENTS`` into it (no torch)."""
    if not venv_python().exists():
        log(f"Creating {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write(NO_TORCH)
    try:
        subprocess.run(
            [str(venv_python()), "-m", "pip", "install", "-q", "-c", constraints.name, *PEER_REQUIREMENTS],
            check=True,
        )
    finally:
        os.unlink(constraints.name)
    probe = subprocess.run([str(venv_python()), "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        raise SystemExit(f"{VENV} has torch installed; remove the venv and re-run --install.")
    log(f"Peers installed in {VENV}")


def bench_tenant(dataset, *, rebuild: bool):
    """The tenant ``bench-bioasq`` holding the dataset (ingested once; ``rebuild`` starts afresh)
    and its chunk count: ``retrieval_quality.py``'s tenant, with its judgment list."""

    from core.models import Tenant
    from knowledge.models import Chunk

    if rebuild:
        Tenant.objects.filter(slug=TENANT).delete()
    tenant, _, _ = tenant_for(dataset, name="bioasq", slug=TENANT)
    return tenant, Chunk.objects.for_tenant(tenant).count()


def chunk_documents(tenant) -> dict[int, list[str]]:
    """Chunk id -> the document ids it stands for, as the product's evaluation counts them.

    A chunk stands for its document and for documents stored as exact duplicates of that
    document's version (they have no chunks of their own).
    """
    from knowledge.models import Chunk, DocumentVersion

    duplicates: dict[int, list[str]] = {}
    for original, external_id in (
        DocumentVersion.objects.for_tenant(tenant)
        .filter(is_current=True, duplicate_of__isnull=False)
        .values_list("duplicate_of_id", "document__external_id")
        .order_by("pk")
    ):
        duplicates.setdefault(original, []).append(external_id)
    return {
        pk: [external_id, *duplicates.get(version_id, ())]
        for pk, version_id, external_id in Chunk.objects.for_tenant(tenant).values_list(
            "pk", "version_id", "version__document__external_id"
        )
    }


def corpus_export(tenant, workdir: Path) -> None:
    """Write the tenant's chunks for the peers: ``chunks.jsonl`` (id, document, embedded text)
    and ``chunk_vectors.npy`` (the stored MiniLM vectors, float32, same order)."""
    import numpy as np

    from knowledge.models import Chunk
    from knowledge.services.embeddings import HEADING_MIN_TOKENS

    rows = (
        Chunk.objects.for_tenant(tenant)
        .order_by("pk")
        .values_list("pk", "heading", "text", "token_count", "version__document__external_id", "embedding")
    )
    vectors = []
    with open(workdir / "chunks.jsonl", "w") as out:
        for pk, heading, text, tokens, external_id, embedding in rows:
            # The text the product embedded (knowledge.services.ingestion.embedding_input).
            long_enough = heading and tokens >= HEADING_MIN_TOKENS and not text.startswith(heading)
            content = f"{heading}\n{text}" if long_enough else text
            out.write(json.dumps({"id": pk, "document": external_id, "content": content}) + "\n")
            vectors.append(np.asarray(embedding, dtype=np.float32))
    np.save(workdir / "chunk_vectors.npy", np.vstack(vectors))


def peers_database() -> str:
    """The DSN of database ``kb_peers`` on the product's PostgreSQL server (created with pgvector if missing)."""
    import psycopg
    from django.db import connection

    params = connection.settings_dict
    user = quote(params.get("USER") or "postgres")
    password = f":{quote(params['PASSWORD'])}" if params.get("PASSWORD") else ""
    options = [f"host={quote(params['HOST'], safe='')}"] if params.get("HOST") else []
    if params.get("PORT"):
        options.append(f"port={params['PORT']}")
    dsn = f"postgresql://{user}{password}@/{PEERS_DB}" + ("?" + "&".join(options) if options else "")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [PEERS_DB])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{PEERS_DB}"')
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return dsn


class Peers:
    """The peer runner subprocess (``_peers_runner.py`` in the peers' venv), one question at a time."""

    def __init__(self, *, workdir: Path, dsn: str, rebuild: bool, names: list[str]):
        command = [str(venv_python()), str(RUNNER), "--workdir", str(workdir), "--dsn", dsn, "-k", str(K)]
        command += ["--peers", *names] + (["--rebuild"] if rebuild else [])
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._read()
        if not self.info.get("ready"):
            raise SystemExit(f"The peer runner did not start: {self.info}")

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"The peer runner exited (code {self.process.wait()}); see its messages above.")
        return json.loads(line)

    def ask(self, i: int) -> dict:
        self.process.stdin.write(json.dumps({"q": i}) + "\n")
        self.process.stdin.flush()
        return self._read()["results"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write(json.dumps({"quit": True}) + "\n")
            self.process.stdin.flush()
            self.process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--install", action="store_true", help="create benchmarks/.peers-venv with the peers")
    parser.add_argument("--rebuild", action="store_true", help="re-ingest the tenant and reload the peers' tables")
    parser.add_argument("--no-peers", action="store_true", help="only the product's rows")
    parser.add_argument("--peers", nargs="+", default=["haystack", "langchain"], choices=["haystack", "langchain"])
    parser.add_argument("--rounds", type=int, default=1, help="timed passes over the questions")
    parser.add_argument("--warmup", type=int, default=20, help="untimed questions first")
    parser.add_argument("--questions", type=int, default=0, help="only the first N questions (0: all)")
    args = parser.parse_args()
    if args.install:
        peers_install()
    django_setup()
    import numpy as np

    from knowledge.embedders import get_embedder
    from quality.importers import dataset_load
    from quality.metrics import documents_from_chunks, query_metrics
    from retrieval.filters import RetrievalFilter
    from retrieval.pipeline import pipeline_spec
    from retrieval.request import AnswerRequest
    from retrieval.stages.base import stages_run
    from retrieval.stages.fuse import Fuse
    from retrieval.stages.rerank import Rerank
    from retrieval.stages.retrieve.candidates import Retrieve
    from retrieval.state import RunState
    from retrieval.types import QueryPlan

    dataset = dataset_load(name="bioasq", paths=[DATASET])
    judgments = dataset.judgments[: args.questions or None]
    tenant, chunk_count = bench_tenant(dataset, rebuild=args.rebuild)
    questions = [j.question for j in judgments]
    embedder = get_embedder(tenant.embedder)
    vectors = np.vstack([embedder.embed([q])[0] for q in questions]).astype(np.float32)
    # The full path must embed for real: forget cached query vectors before each of its calls.
    cache_clear = getattr(embedder, "query_cache_clear", lambda: None)
    spec = pipeline_spec(tenant=tenant, name="simple")
    where = RetrievalFilter.for_tenant(tenant)

    ranking = {concurrent: (Retrieve(concurrent=concurrent), Fuse(), Rerank()) for concurrent in (True, False)}

    def product(mode: str, i: int) -> tuple[float, list[int], dict]:
        plan = QueryPlan.from_question(questions[i])
        plan.dense_vector = vectors[i]
        run = RunState(
            AnswerRequest(question=questions[i], k=K), tenant=tenant, spec=spec, where=where, plan=plan, mode=mode
        )
        started = time.perf_counter()
        run = stages_run(run, ranking[True])
        return (time.perf_counter() - started) * 1000, [r.chunk.pk for r in run.results], run.timings

    def product_embedded(i: int, *, concurrent: bool) -> tuple[float, list[int], dict]:
        cache_clear()
        plan = QueryPlan.from_question(questions[i])
        run = RunState(
            AnswerRequest(question=questions[i], k=K), tenant=tenant, spec=spec, where=where, plan=plan, mode="hybrid"
        )
        started = time.perf_counter()
        run = stages_run(run, ranking[concurrent])
        return (time.perf_counter() - started) * 1000, [r.chunk.pk for r in run.results], run.timings

    product_runs = {f"product_{mode}": (lambda i, mode=mode: product(mode, i)) for mode in PRODUCT_MODES}
    product_runs["product_hybrid+embed"] = lambda i: product_embedded(i, concurrent=True)
    product_runs["product_hybrid+embed_sequential"] = lambda i: product_embedded(i, concurrent=False)

    peers = None
    workdir = Path(tempfile.mkdtemp(prefix="kb-peers-"))
    output: dict = {
        "dataset": "bioasq-12b-dev",
        "questions": len(questions),
        "documents": len(dataset.documents),
        "chunks": chunk_count,
        "k": K,
        "rounds": args.rounds,
        "embedder": tenant.embedder,
        "config": spec.search.as_dict(),
        "cpus": os.cpu_count(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        if args.no_peers:
            output["peers"] = "skipped (--no-peers)"
        elif not venv_python().exists():
            output["peers"] = f"not installed: run `python benchmarks/peers.py --install` to create {VENV}"
            log(output["peers"])
        else:
            corpus_export(tenant, workdir)
            with open(workdir / "queries.jsonl", "w") as out:
                out.writelines(json.dumps({"text": q}) + "\n" for q in questions)
            np.save(workdir / "query_vectors.npy", vectors.astype(np.float32))
            peers = Peers(workdir=workdir, dsn=peers_database(), rebuild=args.rebuild, names=args.peers)
            output["peer_versions"] = peers.info["versions"]
            output["peer_load_s"] = peers.info["load_s"]
            if peers.info.get("errors"):
                output["peer_errors"] = peers.info["errors"]
        latencies: dict[str, list[float]] = {}
        rankings: dict[str, dict[int, list[int]]] = {}
        breakdown: dict[str, list[float]] = {}

        def one(i: int, *, timed: bool) -> None:
            peer_results = None
            if peers is not None and i % 2 == 1:  # alternate who goes first
                peer_results = peers.ask(i)
            names = list(product_runs)
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                ms, ids, timings = product_runs[name](i)
                if timed:
                    latencies.setdefault(name, []).append(ms)
                    rankings.setdefault(name, {})[i] = ids
                    if name == "product_hybrid":
                        for key, value in timings.items():
                            breakdown.setdefault(key, []).append(value)
                    if name == "product_hybrid+embed":
                        for key in ("lexical_ms", "embed_ms", "embed_wait_ms", "overlap_ms"):
                            if key in timings:
                                breakdown.setdefault(f"embedded_{key}", []).append(timings[key])
            if peers is not None and peer_results is None:
                peer_results = peers.ask(i)
            if timed and peer_results is not None:
                for name, result in peer_results.items():
                    latencies.setdefault(name, []).append(result["ms"])
                    rankings.setdefault(name, {})[i] = result["ids"]

        for i in range(min(args.warmup, len(questions))):
            one(i, timed=False)
        for _ in range(args.rounds):
            for i in range(len(questions)):
                one(i, timed=True)
    finally:
        if peers is not None:
            peers.close()
        for name in ("chunks.jsonl", "chunk_vectors.npy", "queries.jsonl", "query_vectors.npy"):
            (workdir / name).unlink(missing_ok=True)
        workdir.rmdir()

    documents_of = chunk_documents(tenant)
    systems: dict = {}
    for name, times in latencies.items():
        per_query = []
        for i, ids in rankings[name].items():
            ranking = documents_from_chunks(doc for pk in ids for doc in documents_of.get(pk, ()))
            grades = {entry["document"]: entry["grade"] for entry in judgments[i].relevant}
            per_query.append(query_metrics(ranking, grades))
        systems[name] = {
            **{
                m: round(statistics.mean(q[m] for q in per_query), 4)
                for m in ("ndcg@10", "recall@10", "recall@100", "mrr@10")
            },
            "p50_ms": round(percentile(times, 50), 2),
            "p95_ms": round(percentile(times, 95), 2),
            "mean_ms": round(statistics.mean(times), 2),
        }
    output["systems"] = systems
    output["product_hybrid_breakdown_mean_ms"] = {k: round(statistics.mean(v), 2) for k, v in breakdown.items()}
    peer_hybrids = {n: s for n, s in systems.items() if not n.startswith("product") and n.endswith("hybrid")}
    if peer_hybrids and "product_hybrid" in systems:
        best = min(peer_hybrids, key=lambda n: peer_hybrids[n]["p50_ms"])
        ours = systems["product_hybrid"]
        output["target"] = {
            "best_peer_hybrid": best,
            "product_over_best_peer_p50": round(ours["p50_ms"] / peer_hybrids[best]["p50_ms"], 3),
            "ndcg@10_delta": round(ours["ndcg@10"] - peer_hybrids[best]["ndcg@10"], 4),
            "met": ours["p50_ms"] <= peer_hybrids[best]["p50_ms"] and ours["ndcg@10"] >= peer_hybrids[best]["ndcg@10"],
        }
    output["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "peers.json").write_text(json.dumps(output, indent=2))
    (RESULTS / "peers.md").write_text(markdown(output))
    print(json.dumps(output, indent=2))


def markdown(output: dict) -> str:
    """The side-by-side table (quality and latency, ratio to the product's hybrid p50)."""
    systems = output["systems"]
    reference = systems.get("product_hybrid", {}).get("p50_ms")
    lines = [
        f"BioASQ dev: {output['questions']} questions, {output['documents']} documents, {output['chunks']} chunks; "
        f"top {output['k']} chunks, document-level scores; latency retrieval only (query vectors given), "
        f"warm, interleaved, {output['rounds']} round(s), {output['cpus']} CPUs.",
        "",
        "| retriever | nDCG@10 | recall@10 | recall@100 | MRR@10 | p50 ms | p95 ms | p50 / product hybrid |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in systems.items():
        ratio = f"{s['p50_ms'] / reference:.2f}" if reference else "-"
        lines.append(
            f"| {name} | {s['ndcg@10']:.3f} | {s['recall@10']:.3f} | {s['recall@100']:.3f} | {s['mrr@10']:.3f} | "
            f"{s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
