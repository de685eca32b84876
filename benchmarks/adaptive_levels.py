"""How often the adaptive pipeline escalates, and what each level costs in latency and LLM calls.

Usage: python benchmarks/adaptive_levels.py [--datasets bioasq hotpotqa] [--limit N] [--threshold 0.8]
Answers the dev questions with ``pipeline="adaptive"`` on the ``bench-<dataset>`` tenants with the
configured LLM (``KB_LLM_MODEL``/``OPENAI_BASE_URL``; none -> every run stays at ``simple`` with
reason "no LLM available", and ``below_threshold`` shows how many would escalate). Prints JSON:
per dataset, how many questions each level answered, the reasons, and p50/p95 latency and mean LLM
calls per level. With the tiny local model the figures prove the flow, not answer quality.
"""

import argparse
import json
import time
from collections import Counter, defaultdict

from _setup import django_setup
from _toolkit import log, percentile, tenant_for
from retrieval_quality import DATASETS


def main() -> None:
    django_setup()
    from quality.importers import dataset_load
    from quality.models import Judgment
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=["bioasq", "hotpotqa"], choices=list(DATASETS))
    parser.add_argument("--limit", type=int, default=0, help="questions per dataset (0 = all)")
    parser.add_argument("--threshold", type=float, default=None, help="default: the pipeline's (0.8)")
    parser.add_argument("--candidates", type=int, default=None, help="SuperRAG candidates (default 50)")
    args = parser.parse_args()
    overrides = {}
    if args.threshold is not None:
        overrides["adaptive_threshold"] = args.threshold
    if args.candidates is not None:
        overrides["superrag_candidates"] = args.candidates
    output: dict = {"datasets": {}}
    for name in args.datasets:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        tenant, judgment_list, _ = tenant_for(dataset, name=name)
        judgments = list(Judgment.objects.filter(judgment_list=judgment_list).order_by("pk"))
        if args.limit:
            judgments = judgments[: args.limit]
        levels, reasons = Counter(), Counter()
        times, calls = defaultdict(list), defaultdict(list)
        below = 0
        for number, judgment in enumerate(judgments, 1):
            started = time.perf_counter()
            run = pipeline_answer(
                AnswerRequest(question=judgment.question[:2000], pipeline="adaptive"),
                tenant=tenant,
                overrides=overrides or None,
                trace=False,
            )
            level = run.escalation["level"]
            levels[level] += 1
            reasons[f"{level}: {run.escalation['reason']}"] += 1
            times[level].append((time.perf_counter() - started) * 1000)
            calls[level].append(run.usage.llm_calls)
            below += run.escalation["levels"][0]["confidence"] < run.escalation["threshold"]
            if number % 20 == 0:
                log(f"{name}: {number}/{len(judgments)}")
        output["datasets"][name] = {
            "questions": len(judgments),
            "below_threshold": below,
            "levels": dict(levels),
            "reasons": dict(reasons),
            "latency_ms": {
                level: {"p50": round(percentile(v, 50), 1), "p95": round(percentile(v, 95), 1)}
                for level, v in times.items()
            },
            "llm_calls_mean": {level: round(sum(v) / len(v), 2) for level, v in calls.items()},
        }
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
