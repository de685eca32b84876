"""Search latency straight after an ingestion against the same searches minutes later.

Usage: python benchmarks/fresh_search_latency.py [--dataset bioasq] [--wait 300] [--no-upkeep]
Ingests the dataset's dev documents into a fresh tenant, runs its evaluation (hybrid, the query
embedding included) at once, waits ``--wait`` seconds and runs it again on the same tenant.
Prints one JSON object (also written to benchmarks/results/fresh_search_latency.json; other
datasets add ``_<dataset>``, ``--no-upkeep`` adds ``_no_upkeep``): p50/p95 of each run, the mean row fetch (``fetch_ms``), and
``first_over_later_p50`` (the target is at most 1.1). ``--no-upkeep`` leaves out the vacuum
queued after ingestion (``knowledge.services.maintenance``), to show what it changes.
The query-embedding cache is off (``KB_QUERY_EMBED_CACHE=0``), so both runs embed every query:
with it on, the later run would find every query embedded by the first.
"""

import argparse
import json
import os
import statistics
import time

from _setup import ROOT, django_setup

DATASETS = {
    "bioasq": ("bioasq", [ROOT.parent / "shared" / "datasets" / "bioasq" / "bioasq-12b-dev.json"]),
    "hotpotqa": ("hotpotqa", [ROOT.parent / "shared" / "datasets" / "hotpotqa" / "hotpotqa-distractor-dev50.json"]),
}


def _run_figures(run) -> dict:
    fetch = [q["timings_ms"].get("fetch_ms", 0.0) for q in run.per_query if q.get("timings_ms")]
    return {
        "p50_ms": run.metrics.get("p50_ms"),
        "p95_ms": run.metrics.get("p95_ms"),
        "fetch_ms_mean": round(statistics.fmean(fetch), 2) if fetch else None,
        "ndcg@10": round(run.metrics.get("ndcg@10", 0.0), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="bioasq", choices=sorted(DATASETS))
    parser.add_argument("--wait", type=float, default=300.0, help="seconds between the two runs")
    parser.add_argument("--no-upkeep", action="store_true", help="no vacuum after the ingestion")
    args = parser.parse_args()
    os.environ["KB_QUERY_EMBED_CACHE"] = "0"
    django_setup()
    from django.core.management import call_command

    from knowledge.services import ingestion
    from quality.importers import dataset_load
    from quality.services.runs import _dataset_tenant, evaluation_run

    call_command("migrate", verbosity=0)
    if args.no_upkeep:
        ingestion.tables_maintain_enqueue = lambda: None
    name, paths = DATASETS[args.dataset]
    dataset = dataset_load(name=name, paths=paths)
    with _dataset_tenant(dataset=dataset, keep=False, progress=False, log=lambda m: None) as (_tenant, judgments):
        started = time.perf_counter()
        first = evaluation_run(judgment_list=judgments, mode="hybrid", dataset=name, splitter=dataset.splitter)
        first_s = time.perf_counter() - started
        load_first = os.getloadavg()[0]
        time.sleep(max(args.wait - first_s, 0))
        later = evaluation_run(judgment_list=judgments, mode="hybrid", dataset=name, splitter=dataset.splitter)
    out = {
        "machine": f"{os.cpu_count()} cores",
        "dataset": name,
        "upkeep": not args.no_upkeep,
        "wait_s": args.wait,
        "load_average_1min": {"after_first": load_first, "after_later": os.getloadavg()[0]},
        "first": _run_figures(first),
        "later": _run_figures(later),
    }
    out["first_over_later_p50"] = round(out["first"]["p50_ms"] / out["later"]["p50_ms"], 3)
    suffix = ("" if args.dataset == "bioasq" else f"_{args.dataset}") + ("_no_upkeep" if args.no_upkeep else "")
    (ROOT / "benchmarks" / "results" / f"fresh_search_latency{suffix}.json").write_text(
        json.dumps(out, indent=2) + "\n"
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
