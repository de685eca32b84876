"""The local embedder's backends side by side (speed, agreement with torch, retrieval quality), or the
local embedding models against each other (``--models``).

Usage: python benchmarks/embedders.py [--backends torch onnx onnx-int8] [--chunks 1200]
       [--rounds 3] [--queries 170] [--datasets rag4p hotpotqa bioasq] [--skip-speed] [--skip-quality]
       [--keep]
       python benchmarks/embedders.py --models local mpnet [--variants] [--chunks 256] [--rounds 3]
       [--queries 60] [--datasets ...] [--bioasq-questions N] [--skip-speed] [--skip-quality] [--keep]
Writes benchmarks/results/embedders.json (and the table for docs/benchmarks.md, embedders.md) and prints the JSON.

all-MiniLM-L6-v2 on each ``KB_EMBEDDER_BACKEND`` (``torch``, ``onnx``, ``onnx-int8``):

* ingestion throughput (chunks/s): real chunks (the Django docs the demo downloads into
  ``.kb-data/downloads/``, split by the ingestion splitter, as ingestion embeds them; else the
  BioASQ corpus), embedded in slices of 256 like ``documents_ingest``; backends run interleaved,
  ``--rounds`` times, and the median round is reported (the machine's 2 cores are shared);
* single-query latency p50/p95 (ms) on the BioASQ questions, backends interleaved per query,
  query cache off; the LRU cache's hit latency (µs);
* agreement: cosine between each backend's vectors and torch's on the same chunks and queries;
* retrieval quality: for each backend a child process (``KB_EMBEDDER_BACKEND`` set, query cache
  off) ingests the three dev sets into tenants ``bench-emb-<backend>-<dataset>`` and evaluates
  dense and hybrid search (``quality.services.evaluation_run``), so documents and queries are
  both embedded by that backend; the ONNX backends are also evaluated against the torch tenants
  (documents stored by torch, queries by the backend: what switching the default does to an
  existing installation). The rule for a new default: nDCG@10 loss at most 0.01 on each set.

``--models local mpnet`` compares embedding *models* instead (each on ``KB_EMBEDDER_BACKEND``,
ONNX by default) and writes ``benchmarks/results/embedder_models.{json,md}``:

* embedding throughput (chunks/s, the same chunks, models interleaved per round, median round)
  and single-query embedding p50/p95 (models interleaved per query, cache off);
* per dataset, one tenant per model (``bench-model-<key>-<dataset>``, the tenant's ``embedder``
  set to the model) ingested back to back: ingestion chunks/s (chunks / wall seconds of
  ``documents_ingest``) and the embedding's share; then ``VACUUM (ANALYZE)``, and dense and hybrid
  evaluations, models alternated, the query cache cleared before each run (so hybrid p50 includes
  the query embedding); with ``--variants`` also ``retrieval_quality.VARIANTS`` (fusion settings)
  on each tenant. The load average is recorded beside every step (the machine is shared).
  ``--bioasq-questions N`` keeps BioASQ's first N questions and only their documents
  (``bioasq_subset``), for when the slower model cannot embed the whole corpus in the time at hand.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log, percentile, tenant_for

BACKENDS = ["torch", "onnx", "onnx-int8"]
DJANGO_DOCS = ROOT / ".kb-data" / "downloads"
METRICS = ("ndcg@10", "recall@10", "hit@1", "mrr@10", "p50_ms")


def dataset_paths() -> dict:
    """``retrieval_quality.DATASETS`` (``../shared/datasets``), or under ``KB_BENCH_DATASETS`` when set."""
    from retrieval_quality import DATASETS, DATASETS_DIR

    base = os.environ.get("KB_BENCH_DATASETS")
    if not base:
        return DATASETS
    return {name: [Path(base) / p.relative_to(DATASETS_DIR) for p in paths] for name, paths in DATASETS.items()}


def chunk_texts(limit: int) -> tuple[str, list[str]]:
    """Up to ``limit`` chunk texts as ingestion embeds them, and where they come from."""
    from knowledge.ingestion.readers import read_path
    from knowledge.ingestion.splitters import get_splitter
    from knowledge.services.embeddings import embedding_input

    splitter = get_splitter("max_tokens")
    docs = sorted(DJANGO_DOCS.glob("django-*/docs"))
    texts: list[str] = []
    if docs:
        origin = f"Django docs ({docs[-1].parent.name}/docs/topics, ref)"
        files = sorted((docs[-1] / "topics").rglob("*.txt")) + sorted((docs[-1] / "ref").rglob("*.txt"))
        for path in files:
            for document in read_path(path, root=docs[-1], fmt="rst"):
                texts += [embedding_input(span) for span in splitter.split(document)]
            if len(texts) >= limit:
                break
    else:
        from quality.importers import dataset_load

        origin = "BioASQ dev abstracts"
        dataset = dataset_load(name="bioasq", paths=dataset_paths()["bioasq"])
        for document in dataset.documents:
            texts += [embedding_input(span) for span in splitter.split(document)]
            if len(texts) >= limit:
                break
    return origin, texts[:limit]


def speed(backends: list[str], *, chunks: int, rounds: int, queries: int) -> dict:
    """Throughput, query latency, cache-hit latency and agreement with torch, in this process."""
    import numpy as np

    from knowledge.embedders import LocalMiniLMEmbedder
    from quality.importers import dataset_load

    origin, texts = chunk_texts(chunks)
    questions = [q.question for q in dataset_load(name="bioasq", paths=dataset_paths()["bioasq"]).judgments][:queries]
    log(f"speed: {len(texts)} chunks from {origin}, {len(questions)} queries, {rounds} interleaved rounds")
    embedders = {}
    for backend in backends:
        started = time.perf_counter()
        embedders[backend] = LocalMiniLMEmbedder(backend=backend, query_cache_size=0)
        log(f"{backend}: loaded in {time.perf_counter() - started:.1f}s")
        embedders[backend].embed(texts[:16])  # warm up
    throughput: dict[str, list[float]] = {b: [] for b in backends}
    vectors = {}
    for r in range(rounds):
        for backend in backends:
            started = time.perf_counter()
            parts = [embedders[backend].embed(texts[i : i + 256]) for i in range(0, len(texts), 256)]
            throughput[backend].append(len(texts) / (time.perf_counter() - started))
            vectors[backend] = np.concatenate(parts)
            log(f"round {r + 1} {backend}: {throughput[backend][-1]:.1f} chunks/s")
    latency: dict[str, list[float]] = {b: [] for b in backends}
    query_vectors: dict[str, list] = {b: [] for b in backends}
    for question in questions:
        for backend in backends:
            started = time.perf_counter()
            query_vectors[backend].append(embedders[backend].embed_query(question))
            latency[backend].append((time.perf_counter() - started) * 1000)
    cached = LocalMiniLMEmbedder(backend=backends[-1], query_cache_size=1024)
    hits = []
    for question in questions:
        cached.embed_query(question)
        started = time.perf_counter()
        cached.embed_query(question)
        hits.append((time.perf_counter() - started) * 1e6)
    result: dict = {
        "chunks_from": origin,
        "chunks": len(texts),
        "queries": len(questions),
        "rounds": rounds,
        "cache_hit_us": {"p50": percentile(hits, 50), "p95": percentile(hits, 95)},
        "backends": {},
    }
    for backend in backends:
        entry = {
            "chunks_per_s": statistics.median(throughput[backend]),
            "chunks_per_s_rounds": throughput[backend],
            "query_p50_ms": percentile(latency[backend], 50),
            "query_p95_ms": percentile(latency[backend], 95),
            "model_file_mb": None,
        }
        if backend != "torch":
            entry["model_file_mb"] = embedders[backend].onnx_path.stat().st_size / 2**20
        if "torch" in vectors and backend != "torch":
            chunk_cos = np.sum(vectors["torch"] * vectors[backend], axis=1)
            query_cos = np.sum(np.stack(query_vectors["torch"]) * np.stack(query_vectors[backend]), axis=1)
            entry["cosine_to_torch"] = {
                "chunks_mean": float(chunk_cos.mean()),
                "chunks_min": float(chunk_cos.min()),
                "queries_mean": float(query_cos.mean()),
                "queries_min": float(query_cos.min()),
            }
        result["backends"][backend] = entry
    return result


def quality_child(*, backend: str, docs_backend: str, datasets: list[str]) -> dict:
    """In a process whose KB_EMBEDDER_BACKEND is ``backend``: dense and hybrid metrics per dataset
    on the tenants whose documents ``docs_backend`` embedded (ingested here when they are new)."""
    from django.conf import settings

    from knowledge.models import Chunk
    from quality.importers import dataset_load
    from quality.services import evaluation_run
    from retrieval.search import SearchConfig

    assert settings.KB_EMBEDDER_BACKEND == backend, (settings.KB_EMBEDDER_BACKEND, backend)
    out: dict = {}
    for name in datasets:
        dataset = dataset_load(name=name, paths=dataset_paths()[name])
        tenant, judgment_list, report = tenant_for(
            dataset, name=name, slug=f"bench-emb-{docs_backend}-{name}", origin=dataset.name
        )
        entry: dict = {"chunks": Chunk.objects.for_tenant(tenant).count(), "embed_seconds": report.embed_seconds}
        config = SearchConfig.for_tenant(tenant)
        for mode in ("dense", "hybrid"):
            run = evaluation_run(
                judgment_list=judgment_list, mode=mode, config=config, k=100, splitter=dataset.splitter
            )
            entry[mode] = {m: run.metrics.get(m) for m in METRICS}
            log(f"[{backend} queries, {docs_backend} documents] {name} {mode}: {entry[mode]}")
        out[name] = entry
    return out


def quality(backends: list[str], datasets: list[str], *, keep: bool, save) -> dict:
    """Run ``quality_child`` per dataset and backend (and ONNX queries on torch documents), each in
    a subprocess; ``save(results)`` is called after each, so an interrupted run keeps what it has."""
    from core.models import Tenant

    runs = [(b, b) for b in backends]
    if "torch" in backends:
        runs += [(b, "torch") for b in backends if b != "torch"]
    results: dict = {}
    try:
        for name in datasets:
            for backend, docs_backend in runs:
                env = {**os.environ, "KB_EMBEDDER_BACKEND": backend, "KB_QUERY_EMBED_CACHE": "0"}
                command = [sys.executable, __file__, "--quality-child", backend, docs_backend, "--datasets", name]
                completed = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
                label = backend if backend == docs_backend else f"{backend} queries, {docs_backend} documents"
                results.setdefault(label, {}).update(json.loads(completed.stdout.strip().splitlines()[-1]))
                save(results)
    finally:
        if not keep:
            Tenant.objects.filter(slug__startswith="bench-emb-").delete()
    return results


def markdown(results: dict) -> str:
    """The docs/benchmarks.md table: per backend, speed, agreement with torch and quality on the dev sets."""
    speed_results = results.get("speed", {}).get("backends", {})
    quality_results = results.get("quality", {})
    sets = [("bioasq", "ndcg@10"), ("hotpotqa", "ndcg@10"), ("hotpotqa", "recall@10"), ("rag4p", "hit@1")]
    header = " | ".join(f"{name} {metric} (dense / hybrid)" for name, metric in sets)
    lines = [
        f"| backend | chunks/s | query p50 / p95 ms | cosine to torch (mean / min) | {header} |",
        "|---|---|---|---|" + "---|" * len(sets),
    ]
    for label, per_set in quality_results.items():
        backend = label.split(" ")[0]
        timing = speed_results.get(backend, {}) if label == backend else {}
        cosine = timing.get("cosine_to_torch")
        cells = [
            label,
            f"{timing['chunks_per_s']:.1f}" if timing else "",
            f"{timing['query_p50_ms']:.1f} / {timing['query_p95_ms']:.1f}" if timing else "",
            f"{cosine['chunks_mean']:.4f} / {cosine['chunks_min']:.4f}"
            if cosine
            else ("1" if label == "torch" else ""),
        ]
        for name, metric in sets:
            run = per_set.get(name)
            cells.append(f"{run['dense'][metric]:.3f} / {run['hybrid'][metric]:.3f}" if run else "not run")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def models_speed(keys: list[str], *, chunks: int, rounds: int, queries: int) -> dict:
    """Embedding throughput and single-query latency of each model, interleaved, in this process."""
    from knowledge.embedders import LOCAL_EMBEDDERS
    from quality.importers import dataset_load

    origin, texts = chunk_texts(chunks)
    questions = [q.question for q in dataset_load(name="bioasq", paths=dataset_paths()["bioasq"]).judgments][:queries]
    log(f"models speed: {len(texts)} chunks from {origin}, {len(questions)} queries, {rounds} interleaved rounds")
    embedders = {}
    for key in keys:
        started = time.perf_counter()
        embedders[key] = LOCAL_EMBEDDERS[key](query_cache_size=0)
        log(f"{key}: loaded in {time.perf_counter() - started:.1f}s")
        embedders[key].embed(texts[:16])  # warm up
    throughput: dict[str, list[float]] = {k: [] for k in keys}
    loads = [load()]
    for r in range(rounds):
        for key in keys:
            started = time.perf_counter()
            for i in range(0, len(texts), 256):
                embedders[key].embed(texts[i : i + 256])
            throughput[key].append(len(texts) / (time.perf_counter() - started))
            log(f"round {r + 1} {key}: {throughput[key][-1]:.1f} chunks/s (load {load()})")
        loads.append(load())
    latency: dict[str, list[float]] = {k: [] for k in keys}
    for question in questions:
        for key in keys:
            started = time.perf_counter()
            embedders[key].embed_query(question)
            latency[key].append((time.perf_counter() - started) * 1000)
    loads.append(load())
    return {
        "chunks_from": origin,
        "chunks": len(texts),
        "queries": len(questions),
        "rounds": rounds,
        "load_average": loads,
        "models": {
            key: {
                "backend": embedders[key].backend,
                "dimensions": embedders[key].dimensions,
                "chunks_per_s": statistics.median(throughput[key]),
                "chunks_per_s_rounds": throughput[key],
                "query_p50_ms": percentile(latency[key], 50),
                "query_p95_ms": percentile(latency[key], 95),
            }
            for key in keys
        },
    }


# Beyond retrieval_quality.VARIANTS: a better dense model may want more of the dense list.
DENSER_VARIANTS = [
    {"fusion": "weighted", "dense_weight": 0.8, "lexical_weight": 0.2},
    {"fusion": "weighted", "dense_weight": 0.9, "lexical_weight": 0.1},
]


def bioasq_subset(dataset, questions: int):
    """BioASQ dev cut to its first ``questions`` questions and the documents relevant to them.

    The BioASQ corpus is by construction the union of the questions' relevant documents, so each
    kept question still ranks among the other kept questions' documents (its distractors).
    """
    from dataclasses import replace

    judgments = dataset.judgments[:questions]
    keep = {entry["document"] for judgment in judgments for entry in judgment.relevant}
    return replace(dataset, judgments=judgments, documents=[d for d in dataset.documents if d.external_id in keep])


def models_quality(
    keys: list[str], datasets: list[str], *, variants: bool, keep: bool, save, bioasq_questions: int | None = None
) -> dict:
    """Per dataset: ingest one tenant per model back to back, vacuum, then evaluate dense and
    hybrid (and the fusion variants) with the models alternated; ``save(results)`` after each set."""
    from retrieval_quality import VARIANTS

    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.embedders import get_embedder
    from knowledge.models import Chunk
    from knowledge.services.maintenance import tables_maintain
    from quality.importers import dataset_load
    from quality.services import evaluation_run
    from retrieval.search import SearchConfig

    results: dict = {}
    try:
        for name in datasets:
            dataset = dataset_load(name=name, paths=dataset_paths()[name])
            if name == "bioasq" and bioasq_questions:
                dataset, name = bioasq_subset(dataset, bioasq_questions), f"bioasq-first{bioasq_questions}"
            per_model: dict = {}
            tenants = {}
            for key in keys:
                slug = f"bench-model-{key}-{name}"
                if not Tenant.objects.filter(slug=slug).exists():
                    tenant_create(slug=slug, embedder=key)
                get_embedder(key)  # load (and export) the model outside the timed ingestion
                before = load()
                started = time.perf_counter()
                tenant, judgment_list, report = tenant_for(dataset, name=name, slug=slug, origin=dataset.name)
                seconds = time.perf_counter() - started
                chunks = Chunk.objects.for_tenant(tenant).count()
                tenants[key] = (tenant, judgment_list)
                per_model[key] = {"chunks": chunks}
                if report.counts()["chunks"]:  # else the tenant was reused: keep the figures of its ingestion
                    per_model[key].update(
                        ingest_seconds=round(seconds, 2),
                        embed_seconds=round(report.embed_seconds, 2),
                        ingest_chunks_per_s=round(chunks / seconds, 2),
                        load_average_ingest=[before, load()],
                    )
                log(f"{name} {key}: {per_model[key]}")
            tables_maintain()
            for mode in ("dense", "hybrid"):
                for key in keys:
                    tenant, judgment_list = tenants[key]
                    get_embedder(key).query_cache_clear()
                    before = load()
                    run = evaluation_run(
                        judgment_list=judgment_list,
                        mode=mode,
                        config=SearchConfig.for_tenant(tenant),
                        k=100,
                        splitter=dataset.splitter,
                    )
                    embed = [q["timings_ms"].get("embed_ms", 0.0) for q in run.per_query if q.get("timings_ms")]
                    per_model[key][mode] = {
                        **{m: run.metrics.get(m) for m in (*METRICS, "p95_ms")},
                        "embed_p50_ms": percentile(embed, 50) if embed else None,
                        "load_average": [before, load()],
                    }
                    log(f"{name} {key} {mode}: {per_model[key][mode]}")
            if variants:
                for variant in [*VARIANTS, *DENSER_VARIANTS]:
                    label = ", ".join(f"{k}={v}" for k, v in variant.items())
                    for key in keys:
                        tenant, judgment_list = tenants[key]
                        config = SearchConfig.for_tenant(tenant, **variant)
                        run = evaluation_run(judgment_list=judgment_list, mode="hybrid", config=config, k=100)
                        per_model[key].setdefault("variants", {})[label] = {
                            m: run.metrics.get(m) for m in ("ndcg@10", "recall@10", "hit@1", "mrr@10")
                        }
                        log(f"{name} {key} hybrid [{label}]: {per_model[key]['variants'][label]}")
            results[name] = per_model
            save(results)
    finally:
        if not keep:
            Tenant.objects.filter(slug__startswith="bench-model-").delete()
    return results


def models_markdown(results: dict) -> str:
    """The docs/benchmarks.md tables for ``--models``: speed, then quality and latency per set."""
    lines = []
    speed_results = results.get("speed")
    if speed_results:
        lines += [
            f"Embedding alone ({speed_results['chunks']} chunks from {speed_results['chunks_from']}, "
            f"{speed_results['rounds']} interleaved rounds; {speed_results['queries']} single BioASQ "
            f"questions; load average {speed_results['load_average'][0]} to {speed_results['load_average'][-1]}):",
            "",
            "| model | backend | dims | chunks/s (median round) | single query p50 / p95 ms |",
            "|---|---|---|---|---|",
        ]
        for key, m in speed_results["models"].items():
            lines.append(
                f"| {key} | {m['backend']} | {m['dimensions']} | {m['chunks_per_s']:.1f} | "
                f"{m['query_p50_ms']:.1f} / {m['query_p95_ms']:.1f} |"
            )
        lines.append("")
    quality_results = results.get("quality", {})
    if quality_results:
        lines += [
            "| dataset | model | chunks | ingestion chunks/s | dense nDCG@10 / recall@10 | hybrid nDCG@10 / "
            "recall@10 | hybrid hit@1 | hybrid p50 / p95 ms | query embedding p50 ms (hybrid) | load average |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, per_model in quality_results.items():
            for key, e in per_model.items():
                d, h = e.get("dense", {}), e.get("hybrid", {})
                lines.append(
                    f"| {name} | {key} | {e['chunks']} | {e.get('ingest_chunks_per_s', 'not measured')} | "
                    f"{d.get('ndcg@10', 0):.3f} / {d.get('recall@10', 0):.3f} | "
                    f"{h.get('ndcg@10', 0):.3f} / {h.get('recall@10', 0):.3f} | {h.get('hit@1', 0):.3f} | "
                    f"{h.get('p50_ms', 0):.1f} / {h.get('p95_ms', 0):.1f} | {h.get('embed_p50_ms') or 0:.1f} | "
                    f"{e.get('load_average_ingest', [[None]])[0][0]}-{h.get('load_average', [[None]])[-1][0]} |"
                )
        labels = next(
            (list(e["variants"]) for p in quality_results.values() for e in p.values() if "variants" in e), []
        )
        if labels:
            names = list(quality_results)
            keys = list(next(iter(quality_results.values())))
            lines += [
                "",
                "Fusion variants (hybrid nDCG@10; " + ", ".join(names) + "):",
                "",
                "| variant | " + " | ".join(keys) + " |",
                "|---|" + "---|" * len(keys),
            ]
            for label in labels:
                cells = [
                    " / ".join(
                        f"{quality_results[n].get(k, {}).get('variants', {}).get(label, {}).get('ndcg@10', float('nan')):.3f}"
                        for n in names
                    )
                    for k in keys
                ]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def models_main(args) -> None:
    """``--models``: speed and quality of embedding models, merged into embedder_models.json."""
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / "embedder_models.json"
    results: dict = json.loads(path.read_text()) if path.exists() else {}
    results.update({"cpu_count": os.cpu_count(), "load_average_at_start": load()})

    def save(quality_results: dict | None = None) -> None:
        for name, per_model in (quality_results or {}).items():
            for key, entry in per_model.items():
                results.setdefault("quality", {}).setdefault(name, {}).setdefault(key, {}).update(entry)
        results["load_average_at_end"] = load()
        path.write_text(json.dumps(results, indent=2))
        (args.output / "embedder_models.md").write_text(models_markdown(results))

    if not args.skip_speed:
        results["speed"] = models_speed(args.models, chunks=args.chunks, rounds=args.rounds, queries=args.queries)
        save()
    if not args.skip_quality:
        models_quality(
            args.models,
            args.datasets,
            variants=args.variants,
            keep=args.keep,
            save=save,
            bioasq_questions=args.bioasq_questions,
        )
    save()
    print(json.dumps(results, indent=2))


def main() -> None:
    django_setup()
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", nargs="+", default=BACKENDS, choices=BACKENDS)
    parser.add_argument("--datasets", nargs="+", default=["rag4p", "hotpotqa", "bioasq"])
    parser.add_argument("--chunks", type=int, default=1200, help="chunks embedded per backend and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=170)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the bench-emb-* tenants")
    parser.add_argument("--quality-child", nargs=2, metavar=("BACKEND", "DOCS_BACKEND"), help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--models", nargs="+", choices=["local", "mpnet"], help="compare embedding models")
    parser.add_argument("--variants", action="store_true", help="--models: also the fusion variants")
    parser.add_argument(
        "--bioasq-questions", type=int, help="--models: BioASQ's first N questions and their documents only"
    )
    args = parser.parse_args()
    if args.models:
        models_main(args)
        return
    if args.quality_child:
        backend, docs_backend = args.quality_child
        print(json.dumps(quality_child(backend=backend, docs_backend=docs_backend, datasets=args.datasets)))
        return

    # Parts can be measured in separate runs (--skip-speed, --datasets): each save merges what this
    # run measured into the results file as it is then, keeping the rest.
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / "embedders.json"
    results: dict = {"cpu_count": os.cpu_count(), "load_average_at_start": os.getloadavg()}

    def save(quality_results: dict | None = None) -> None:
        merged = json.loads(path.read_text()) if path.exists() else {}
        for key, value in results.items():
            if key != "quality":
                merged[key] = value
        for label, datasets in (quality_results or {}).items():
            merged.setdefault("quality", {}).setdefault(label, {}).update(datasets)
        merged["load_average_at_end"] = os.getloadavg()
        path.write_text(json.dumps(merged, indent=2))
        (args.output / "embedders.md").write_text(markdown(merged))
        results["quality"] = merged.get("quality", {})

    if not args.skip_speed:
        results["speed"] = speed(args.backends, chunks=args.chunks, rounds=args.rounds, queries=args.queries)
        save()
    if not args.skip_quality:
        quality(args.backends, args.datasets, keep=args.keep, save=save)
    save()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
