"""The extractive answer (no LLM) before and after lexical sentence choice: quality and cost.

Usage: python benchmarks/extractive_answers.py [--tenant demo] [--rounds 3] [--skip-demo] [--skip-hotpotqa] [--keep]

"before" is the sentence scorer as it was until lexical choice replaced it (kept below as
``embedded_extract``: it embeds the question and every candidate sentence of the passages at
question time, score = cosine + 0.3 x term overlap + 0.2 / (rank + 1), short answer = the best
sentence); "after" is ``retrieval.stages.generate.extractive.answer_extract`` (BM25 over the
passages' sentences plus a rank prior; the short answer a typed span, else the best sentence).

* HotpotQA dev (the 50 distractor questions of ../shared/datasets/hotpotqa, ingested into the
  ``bench-hotpotqa`` tenant as ``retrieval_quality.py`` does): the default hybrid pipeline's top 5
  passages (``pipeline_answer(use_llm=False, k=5)``), then both methods on the same passages;
  gold in answer, token F1 and exact match (``quality.answer_metrics``) of the short answer and of
  the whole answer text, and how often the gold answer is in the passages at all.
* The demo tenant (``--tenant``): the 20 questions of ``search_latency.py``, ``rounds`` times after
  a warm-up pass, each method in turn plugged into the pipeline's ``generate`` stage (the two
  alternate question by question); p50/p95 of that stage's milliseconds as the trace records it.
  Without the tenant, the same on ``bench-hotpotqa`` (the JSON says which).

Prints one JSON object (also written to benchmarks/results/extractive_answers.json) with the
machine's cores and load average.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from _setup import ROOT, django_setup
from _toolkit import log, percentile, tenant_for
from retrieval_quality import DATASETS
from search_latency import QUESTIONS


def embedded_extract(question, passages, *, embedder, sentences=3, label=None):
    """The extractive answer as it was: every candidate sentence embedded at question time."""
    from knowledge.embedders import get_embedder
    from knowledge.ingestion.splitters import sentence_offsets
    from retrieval.stages.generate.extractive import LABEL, SHORT_WORDS
    from retrieval.stages.pack import text_defang
    from retrieval.types import Answer, Citation

    word = re.compile(r"[a-z0-9_]+")
    stop = frozenset(
        "a an and are as at be by can do does for from how i in is it my of on or the this to what when where "
        "which who why with you your".split()
    )

    def words_of(text):
        return {w for w in word.findall(text.lower()) if w not in stop and len(w) > 1}

    candidates = []
    for n, passage in enumerate(passages, start=1):
        text = text_defang(passage.text)
        for a, b in sentence_offsets(text):
            sentence = " ".join(text[a:b].split())
            count = len(sentence.split())
            if 7 <= count <= 80 and not (count < 8 and not sentence.endswith((".", "!", "?", ":", ")"))):
                candidates.append((n, sentence))
    if not candidates:
        candidates = [(n, " ".join(text_defang(p.text).split())[:400]) for n, p in enumerate(passages, start=1)]
    vectors = get_embedder(embedder).embed([question] + [s for _, s in candidates])
    similarity = vectors[1:] @ vectors[0]
    query_terms = words_of(question)
    overlap = np.array([len(query_terms & words_of(s)) / max(1, len(query_terms)) for _, s in candidates])
    score = similarity + 0.3 * overlap + 0.2 * np.array([1.0 / (n + 1) for n, _ in candidates])
    chosen = sorted(np.argsort(-score)[:sentences], key=lambda i: (candidates[i][0], i))
    lines = [f"{candidates[i][1]} [{candidates[i][0]}]" for i in chosen]
    used = sorted({candidates[i][0] for i in chosen})
    best = candidates[int(np.argmax(score))][1].split()
    short = " ".join(best) if len(best) <= SHORT_WORDS else " ".join(best[:SHORT_WORDS]).rstrip(",;:") + "…"
    return Answer(
        question=question,
        text=(label or LABEL) + "\n" + "\n".join(f"- {line}" for line in lines),
        mode="extractive",
        citations=[Citation(n=n, passage=passages[n - 1]) for n in used],
        short_answer=short,
        sentences=[
            {"text": candidates[i][1], "citations": [candidates[i][0]], "supported": True, "added": False}
            for i in chosen
        ],
        citation_coverage=1.0,
    )


@contextmanager
def generate_with(method, seen: list):
    """The pipeline's ``generate`` stage answering with ``method``; each call's passages appended to ``seen``."""
    import retrieval.stages.generate as generate

    original = generate.answer_extract

    def recording(question, passages, **kwargs):
        seen.append(list(passages))
        return method(question, passages, **kwargs)

    generate.answer_extract = recording
    try:
        yield
    finally:
        generate.answer_extract = original


def generate_ms(run) -> float:
    return next(step.ms for step in run.steps if step.stage == "generate")


def hotpotqa(methods: dict, keep: bool) -> tuple[dict, object]:
    from core.models import Tenant
    from quality.answer_metrics import answer_normalize, exact_match, gold_in_answer, token_f1
    from quality.importers import dataset_load
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    dataset = dataset_load(name="hotpotqa", paths=DATASETS["hotpotqa"])
    items = json.loads(DATASETS["hotpotqa"][0].read_text())
    tenant, _judgments, _report = tenant_for(dataset, name="hotpotqa")
    rows = {name: {"short": [], "text": []} for name in methods}
    ms = {name: [] for name in methods}
    in_passages = []
    by_type: dict = {}
    for item in items:
        question, gold = item["question"], item["answer"]
        seen: list = []
        with generate_with(methods["after"], seen):
            pipeline_answer(AnswerRequest(question=question, use_llm=False, k=5), tenant=tenant, trace=False)
        passages = seen[0]
        in_passages.append(gold_in_answer(" ".join(p.text for p in passages), gold))
        for name, method in methods.items():
            started = time.perf_counter()
            answer = method(question, passages, embedder=tenant.embedder)
            ms[name].append((time.perf_counter() - started) * 1000)
            for part, text in (("short", answer.short_answer), ("text", answer.text)):
                scores = {"gold_in_answer": gold_in_answer(text, gold), "f1": token_f1(text, gold)}
                scores |= {"em": exact_match(text, gold), "words": len(text.split())}
                rows[name][part].append(scores)
                kind = "yes/no" if answer_normalize(gold) in ("yes", "no") else item["type"]
                by_type.setdefault(kind, {}).setdefault(name, {}).setdefault(part, []).append(scores["f1"])
            if name == "after":
                log(f"{gold!r:40} <- {answer.short_answer[:70]!r}")
    result = {
        "questions": len(items),
        "tenant": tenant.slug,
        "gold_in_passages": round(statistics.mean(in_passages), 3),
        "methods": {
            name: {
                part: {
                    metric: round(statistics.mean(s[metric] for s in scores), 3)
                    for metric in ("gold_in_answer", "f1", "em", "words")
                }
                for part, scores in parts.items()
            }
            | {"call_p50_ms": round(percentile(ms[name], 50), 2)}
            for name, parts in rows.items()
        },
        "short_f1_by_question_type": {
            kind: {name: round(statistics.mean(v["short"]), 3) for name, v in per.items()}
            | {"questions": len(next(iter(per.values()))["short"])}
            for kind, per in by_type.items()
        },
    }
    if not keep:
        Tenant.objects.filter(pk=tenant.pk).delete()
        tenant = None
    return result, tenant


def generate_latency(tenant, methods: dict, rounds: int, questions: list[str]) -> dict:
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    def ask(name, question):
        with generate_with(methods[name], []):
            return pipeline_answer(AnswerRequest(question=question, use_llm=False, k=5), tenant=tenant, trace=False)

    names = list(methods)
    for question in questions:  # warm-up: the embedder, query plans, caches
        for name in names:
            ask(name, question)
    times: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(rounds):
        for i, question in enumerate(questions):
            order = names if (i + turn) % 2 == 0 else names[::-1]
            for name in order:
                times[name].append(generate_ms(ask(name, question)))
    return {
        "tenant": tenant.slug,
        "questions": len(questions),
        "rounds": rounds,
        **{
            name: {"p50_ms": round(percentile(values, 50), 2), "p95_ms": round(percentile(values, 95), 2)}
            for name, values in times.items()
        },
    }


def main() -> None:
    django_setup()
    from core.models import Tenant
    from retrieval.stages.generate.extractive import answer_extract

    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="demo", help="tenant whose generate stage is timed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-hotpotqa", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the bench-hotpotqa tenant for the next run")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()

    methods = {"before": embedded_extract, "after": answer_extract}
    report: dict = {
        "machine": {"cores": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
        "command": "python " + " ".join(sys.argv),
        "before": "every candidate sentence embedded at question time (cosine + overlap + rank prior)",
        "after": "BM25 over the passages' sentences + rank prior; short answer a typed span",
    }
    hotpot_tenant = None
    if not args.skip_hotpotqa:
        report["hotpotqa"], hotpot_tenant = hotpotqa(methods, keep=args.keep or not args.skip_demo)
        log(json.dumps(report["hotpotqa"], indent=2))
    if not args.skip_demo:
        tenant = Tenant.objects.filter(slug=args.tenant).first()
        if tenant is not None:
            report["generate_stage"] = generate_latency(tenant, methods, args.rounds, QUESTIONS)
        else:
            log(f"No tenant {args.tenant!r} (run scripts/demo.sh --no-serve): timing on bench-hotpotqa instead.")
            tenant = hotpot_tenant or Tenant.objects.get(slug="bench-hotpotqa")
            items = json.loads(DATASETS["hotpotqa"][0].read_text())
            questions = [item["question"] for item in items[:20]]
            report["generate_stage"] = generate_latency(tenant, methods, args.rounds, questions)
            report["generate_stage"]["note"] = f"no {args.tenant!r} tenant: measured on bench-hotpotqa"
        if hotpot_tenant is not None and not args.keep:
            Tenant.objects.filter(pk=hotpot_tenant.pk).delete()
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "extractive_answers.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
