"""Retrieval with the memory field (facts kept by walks) against without, on held-out questions.

Usage: python benchmarks/walk_memory.py [--datasets hotpotqa rag4p bioasq] [--weights 0 0.3 0.6]
       [--modes hybrid] [--walk [--llm-url URL] [--model qwen2.5-1.5b] [--limit N]] [--out FILE]
Prints JSON and writes benchmarks/results/walk_memory.json (``--out`` another file).

Each dataset's questions are split in two halves by position: the even ones build the memory, the
odd ones are held out. The memory is the facts of the walks over the even questions only: facts of
walks over any other question (an earlier ``benchmarks/answers.py`` run walks every question) are
set aside for the evaluation (retired as wrong inside a transaction that is rolled back). With
``--walk``, the even questions that no walk has answered yet in the ``bench-<dataset>`` tenant are
walked first (WalkingRAG with the local model, ``llm.local``; ``--limit`` at most N of them),
keeping their facts. Then every question is evaluated (``quality.services.evaluation_run``,
``k`` = 100) at each ``memory_weight`` and mode; the JSON gives nDCG@10, recall@10 and hit@1 for
the held-out half (does memory help new questions?) and for the memory half (does it help the
questions it was built from?), with the number of facts used.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _setup import ROOT, django_setup
from _toolkit import free_port, log, tenant_for
from retrieval_quality import DATASETS

METRICS = ("ndcg@10", "recall@10", "hit@1")


def halves(judgments) -> tuple[set[str], set[str]]:
    """The questions that build the memory (even positions) and the held-out ones (odd)."""
    questions = [j.question for j in judgments]
    return set(questions[0::2]), set(questions[1::2])


def walk_missing(tenant, questions: list[str], *, client, limit: int | None) -> dict:
    """Walk the ``questions`` no walk of ``tenant`` has answered yet (their facts are kept)."""
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest
    from retrieval.walks.models import Walk

    done = set(Walk.objects.for_tenant(tenant).values_list("question", flat=True))
    todo = [q for q in questions if q not in done][: limit or None]
    seconds = []
    for index, question in enumerate(todo, start=1):
        started = time.perf_counter()
        pipeline_answer(
            AnswerRequest(question=question, pipeline="walkingrag", k=5), tenant=tenant, llm=client, trace=False
        )
        seconds.append(time.perf_counter() - started)
        log(f"walked {index}/{len(todo)} in {seconds[-1]:.1f} s: {question[:70]}")
    return {"walked": len(todo), "seconds_mean": round(statistics.fmean(seconds), 1) if seconds else None}


def evaluate(tenant, judgment_list, memory: set[str], held_out: set[str], *, mode: str, weight: float) -> dict:
    """Every question at ``memory_weight`` = ``weight``, with only the memory half's facts live."""
    from django.db import transaction
    from django.utils import timezone

    from quality.services import evaluation_run
    from retrieval.walks.models import Fact

    with transaction.atomic():
        facts = Fact.objects.for_tenant(tenant).filter(retired_reason="")
        facts.exclude(walk__question__in=memory).update(retired_reason="wrong", retired_at=timezone.now())
        used = Fact.objects.for_tenant(tenant).filter(retired_reason="").count()
        run = evaluation_run(judgment_list=judgment_list, mode=mode, overrides={"memory_weight": weight}, k=100)
        transaction.set_rollback(True)
    result: dict = {"weight": weight, "facts": used}
    for label, questions in (("held_out", held_out), ("memory_half", memory)):
        rows = [q["metrics"] for q in run.per_query if q["question"] in questions]
        result[label] = {m: round(statistics.fmean(r[m] for r in rows), 4) for m in METRICS} | {"questions": len(rows)}
    log(f"{tenant.slug} {mode} memory_weight={weight}: {result}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["hotpotqa"], choices=list(DATASETS))
    parser.add_argument("--weights", nargs="+", type=float, default=[0.0, 0.3, 0.6])
    parser.add_argument("--modes", nargs="+", default=["hybrid"], choices=["lexical", "dense", "hybrid"])
    parser.add_argument("--walk", action="store_true", help="walk the memory half's questions not walked yet")
    parser.add_argument("--limit", type=int, default=None, help="walk at most N questions per dataset")
    parser.add_argument("--llm-url", default=None)
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--out", default="benchmarks/results/walk_memory.json", help="the JSON file written")
    args = parser.parse_args()
    django_setup()
    from django.conf import settings

    from llm import LLMClient
    from llm.local import local_llm_start
    from quality.importers import dataset_load

    server, client = None, None
    if args.walk:
        url = args.llm_url
        if not url:
            port = free_port()
            server = local_llm_start(settings.KB_DATA_DIR, port=port, model=args.model)
            url = f"http://127.0.0.1:{port}/v1"
        client = LLMClient(args.model, base_url=url, timeout_s=600, retries=0)
    results: dict = {"machine": f"{os.cpu_count()} cores", "weights": args.weights, "modes": args.modes, "datasets": {}}
    try:
        for name in args.datasets:
            dataset = dataset_load(name=name, paths=DATASETS[name])
            tenant, judgment_list, _ = tenant_for(dataset, name=name)
            memory, held_out = halves(dataset.judgments)
            entry: dict = {"questions": len(dataset.judgments), "memory_half": len(memory), "held_out": len(held_out)}
            if client is not None:
                entry["walks"] = walk_missing(tenant, sorted(memory), client=client, limit=args.limit)
            entry["load_average_1min"] = os.getloadavg()[0]
            entry["runs"] = {
                mode: [evaluate(tenant, judgment_list, memory, held_out, mode=mode, weight=w) for w in args.weights]
                for mode in args.modes
            }
            results["datasets"][name] = entry
    finally:
        if server is not None:
            server.terminate()
    out = ROOT / args.out
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
