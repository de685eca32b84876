"""Answers side by side: the product's pipelines and peer-style prompts, same passages, same model.

Usage: python benchmarks/answers.py --dataset hotpotqa|bioasq [--pipelines extractive simple ...]
       [--baselines [NAME ...]] [--start N] [--limit N] [--types yesno factoid] [--model qwen2.5-1.5b]
       [--llm-url URL] [--judge [ROW ...]] [--overrides JSON] [--facts-clear] [--out FILE]
Prints JSON (and writes it to ``benchmarks/results/answers-<dataset>.json`` unless ``--out``).

The dataset is ingested into its ``bench-<dataset>`` tenant (as in ``retrieval_quality.py``). For
each question, every row answers in turn (the order rotates per question, so no row always
follows another on the model server):

- ``extractive``: the product's LLM-free answer (``pipeline_answer(use_llm=False)``); its
  passages, the top 5 of the default hybrid search as packed for the answer, are the passages
  every baseline gets;
- a product pipeline (``simple``, ``rephrase``, ``hyde``, ``superrag``, ``walkingrag``,
  ``adaptive``): ``pipeline_answer`` with the local model, streamed (``on_event``), untraced, in
  the default answer style (``quoted``); ``simple-written`` is ``simple`` in the ``written`` style,
  ``simple-compressed`` the quoted style with the prompt's context cut to the passages' 8 best
  sentences (``VARIANTS``);
- with ``--baselines``, three plain prompts written the way the peers write theirs, in our own
  words: ``generic`` (answer from the context, say you don't know, three sentences at most: the
  LangChain and Haystack defaults), ``answer_only`` (answer only, no other words: FlashRAG's
  standard RAG) and ``cite_numbered`` (numbered passages, "cite [n]"), streamed as plain text.

Memory (``retrieval.walks``): every walk keeps its facts in the tenant. ``--facts-clear`` forgets
them first (the walks of the run start from an empty memory); ``--overrides '{"memory_weight": 0.3}'``
turns the memory field on for every product row (a second pass then answers with the first's
memory).

One local llama.cpp server answers every row (``llm.local.local_llm_start``, 2 threads,
temperature 0), started here unless ``--llm-url`` points at one.

Metrics per row (``quality.answer_metrics``; ``[n]`` markers are removed before scoring):
HotpotQA ``em`` and ``f1`` of the short answer (of the whole answer for the extractive answer's
text and the baselines, which have no short answer), ``gold_in_answer`` of everything the row
shows (short answer and explanation), ``cited`` (the answer carries a citation), ``coverage``
(the share of its sentences that are cited), ``supporting_cited`` (a cited passage is one of the
question's supporting-fact documents), ``passage_precision`` (the share of the passages the
answer was written from that are supporting-fact documents: the fused top 5 for ``extractive``
and the baselines, SuperRAG's kept passages, WalkingRAG's fact passages), ``refusal`` among
``answerable`` questions (the gold answer is in the passages); BioASQ ``yes_no`` accuracy, ``factoid`` lenient accuracy and
``rouge_l`` against the ideal answer. Time: ``seconds`` per answer (mean, p95), ``ttft_s`` (the
first streamed token or short answer), ``llm_calls``, ``tokens_in``, ``tokens_out``.

``--judge [ROW ...]``: after each question, the LLM judge (``retrieval.stages.score.judge``, the seed
``rag-quality-design.txt``'s answer-quality grades, 1-5) grades the named rows' answers (every
LLM row's without names) against their passages, untimed; the output adds each row's mean grades
and the Spearman rank correlation of the judge's ``question_score`` with token F1 and with
gold-in-answer over all judged answers (``scipy.stats.spearmanr``): does the judge track
correctness?
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import ROOT, django_setup  # noqa: E402
from _toolkit import free_port, log, percentile, tenant_for  # noqa: E402

DATASETS_DIR = ROOT.parent / "shared" / "datasets"
FILES = {
    "hotpotqa": DATASETS_DIR / "hotpotqa" / "hotpotqa-distractor-dev50.json",
    "bioasq": DATASETS_DIR / "bioasq" / "bioasq-12b-dev.json",
}
PIPELINES = (
    "extractive",
    "simple",
    "simple-written",
    "simple-compressed",
    "rephrase",
    "hyde",
    "superrag",
    "walkingrag",
    "adaptive",
)
# A row "<pipeline>-<variant>" runs the pipeline with these settings.
VARIANTS = {"written": {"answer_style": "written"}, "compressed": {"context_sentences": 8}}
BASELINES = ("generic", "answer_only", "cite_numbered")
BASELINE_MAX_TOKENS = 256
_MARKER = re.compile(r"\[\d{1,3}\]")
_REFUSAL = re.compile(
    r"\b(?:do(?:es)? not|don['’]t|doesn['’]t|cannot|can['’]t|unable to)\b.{0,40}"
    r"\b(?:know|contain|mention|provide|say|answer|find|determine|include|specify)",
    re.IGNORECASE,
)


# ---- the peer-style prompts (our own words) ---------------------------------------------------


def baseline_messages(kind: str, question: str, texts: list[str]) -> list[dict[str, str]]:
    """The chat messages of baseline ``kind`` for ``question`` over passage ``texts`` (best first)."""
    if kind == "generic":
        context = "\n\n".join(texts)
        return [
            {"role": "system", "content": "You are an assistant that answers questions."},
            {
                "role": "user",
                "content": "Answer the question using the context below. If the context does not hold the "
                "answer, say that you don't know. Use three sentences at most and keep the answer short.\n\n"
                f"Context:\n{context}\n\nQuestion: {question}\n\nAnswer:",
            },
        ]
    if kind == "answer_only":
        documents = "\n".join(f"Document {n}: {text}" for n, text in enumerate(texts, start=1))
        return [
            {
                "role": "system",
                "content": "Answer the question from the documents below. Reply with the answer only, "
                f"no other words.\n\nThe documents:\n{documents}",
            },
            {"role": "user", "content": f"Question: {question}"},
        ]
    if kind == "cite_numbered":
        passages = "\n\n".join(f"[{n}] {text}" for n, text in enumerate(texts, start=1))
        return [
            {
                "role": "system",
                "content": "Answer the question using only the numbered passages. Cite the passages you use "
                "with their numbers in square brackets, like [1] or [2].",
            },
            {"role": "user", "content": f"{passages}\n\nQuestion: {question}\nAnswer:"},
        ]
    raise ValueError(f"unknown baseline {kind!r}")


# ---- one row's answer to one question --------------------------------------------------------


OVERRIDES: dict = {}  # --overrides: settings for every product pipeline row (e.g. memory_weight)


def product_answer(tenant, question: str, pipeline: str, client) -> dict:
    """The product's answer through ``pipeline`` (``extractive``: no LLM): text, short answer,
    citations' documents, coverage, passages, seconds, ttft and usage."""
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    first: list[float] = []

    def on_event(event: str, data: dict) -> None:
        if event in ("token", "short_answer") and not first:
            first.append(time.perf_counter())

    started = time.perf_counter()
    extractive = pipeline == "extractive"
    pipeline, _, style = pipeline.partition("-")
    run = pipeline_answer(
        AnswerRequest(question=question, pipeline="simple" if extractive else pipeline, k=5, use_llm=not extractive),
        tenant=tenant,
        overrides={**OVERRIDES, **(VARIANTS[style] if style else {})} or None,
        llm=None if extractive else client,
        trace=False,
        on_event=None if extractive else on_event,
    )
    seconds = time.perf_counter() - started
    answer = run.answer
    return {
        "text": answer.text,
        "short": answer.short_answer,
        "found": answer.found,
        "cited_documents": [c.passage.document.external_id for c in answer.citations],
        "coverage": answer.citation_coverage,
        "passages": [p.text for p in run.passages],
        "passage_documents": [p.document.external_id for p in run.passages],
        "passage_objects": run.passages,
        "answer": answer,
        "seconds": seconds,
        "ttft_s": (first[0] - started) if first else None,
        "degraded": run.degraded,
        **run.usage.as_dict(),
    }


def baseline_answer(kind: str, question: str, passages: list[str], documents: list[str], client) -> dict:
    """Baseline ``kind``'s streamed reply over ``passages`` (``documents``: their external ids)."""
    from llm import LLMError

    messages = baseline_messages(kind, question, passages)
    started, first, parts = time.perf_counter(), None, []
    try:
        for delta in client.stream(messages, max_tokens=BASELINE_MAX_TOKENS):
            first = first or time.perf_counter()
            parts.append(delta)
    except LLMError as exc:
        log(f"  {kind}: {exc}")
    seconds = time.perf_counter() - started
    text = "".join(parts).strip()
    usage = client.last_stream_usage
    numbers = {int(n) for n in re.findall(r"\[(\d{1,3})\]", text) if 1 <= int(n) <= len(documents)}
    return {
        "text": text,
        "short": "",
        "found": bool(text) and not _REFUSAL.search(text),
        "cited_documents": [documents[n - 1] for n in sorted(numbers)],
        "coverage": _coverage(text),
        "passages": passages,
        "passage_documents": documents,
        "seconds": seconds,
        "ttft_s": (first - started) if first else None,
        "degraded": not text,
        **(usage.as_dict() if usage else {"llm_calls": 1, "tokens_in": 0, "tokens_out": 0}),
    }


def _coverage(text: str) -> float | None:
    """The share of ``text``'s sentences that carry a ``[n]`` marker (``None`` without sentences)."""
    from retrieval.stages.generate.citations import sentence_spans

    spans = sentence_spans(text)
    return (sum(1 for span in spans if span.numbers) / len(spans)) if spans else None


# ---- scoring ---------------------------------------------------------------------------------


def plain(text: str) -> str:
    """``text`` without ``[n]`` markers."""
    return " ".join(_MARKER.sub(" ", text or "").split())


def scored(dataset: str, item: dict, row: dict) -> dict:
    """Per-answer metrics of ``row`` for the gold ``item`` (``question_items``'s shape)."""
    from quality.answer_metrics import exact_match, factoid_lenient, gold_in_answer, rouge_l, token_f1, yes_no

    text, short = plain(row["text"]), plain(row["short"])
    shown = f"{short} {text}".strip()
    scored_text = short or text
    out = {
        "seconds": row["seconds"],
        "ttft_s": row["ttft_s"],
        "llm_calls": row["llm_calls"],
        "tokens_in": row["tokens_in"],
        "tokens_out": row["tokens_out"],
        "cited": bool(row["cited_documents"]),
        "coverage": row["coverage"],
        "degraded": row["degraded"],
        "type": item["type"],
    }
    passages = " ".join(row["passages"])
    if dataset == "hotpotqa":
        gold = item["answer"]
        answerable = bool(gold_in_answer(passages, gold)) or gold.lower() in ("yes", "no")
        documents = row["passage_documents"]
        out |= {
            # the share of the passages the answer was written from that are supporting documents
            "passage_precision": (sum(d in item["supporting"] for d in documents) / len(documents))
            if documents
            else None,
            "em": exact_match(scored_text, gold),
            "f1": token_f1(scored_text, gold),
            "gold_in_answer": gold_in_answer(shown, gold),
            "supporting_cited": bool(set(row["cited_documents"]) & set(item["supporting"])),
            "answerable": answerable,
            "refusal": answerable and not row["found"],
        }
    else:
        out["rouge_l"] = rouge_l(text, item["ideal_answer"])
        if item["type"] == "yesno":
            out["yes_no"] = yes_no(shown, item["exact_answer"]) or 0.0
        elif item["type"] == "factoid":
            out["factoid"] = factoid_lenient(shown, item["exact_answer"])
        out["refusal"] = not row["found"]
    return out


def summary(rows: list[dict]) -> dict:
    """Means (and p95 seconds) of the per-answer metrics of one row."""

    def mean(key: str, among=None) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None and (among is None or among(r))]
        return round(statistics.fmean(float(v) for v in values), 4) if values else None

    seconds = sorted(r["seconds"] for r in rows)
    out = {
        "answers": len(rows),
        "seconds_mean": mean("seconds"),
        "seconds_p95": round(percentile(seconds, 95), 2) if seconds else None,
        "ttft_s_mean": mean("ttft_s"),
        "llm_calls_mean": mean("llm_calls"),
        "tokens_in_mean": mean("tokens_in"),
        "tokens_out_mean": mean("tokens_out"),
        "cited": mean("cited"),
        "coverage": mean("coverage"),
        "degraded": mean("degraded"),
    }
    for key in ("em", "f1", "gold_in_answer", "supporting_cited", "passage_precision", "rouge_l", "yes_no", "factoid"):
        value = mean(key)
        if value is not None:
            out[key] = value
    if any("answerable" in r for r in rows):
        out["refusal_when_answerable"] = mean("refusal", among=lambda r: r["answerable"])
    else:
        out["refusal"] = mean("refusal")
    if any("f1" in r for r in rows):  # HotpotQA: bridge and comparison questions apart
        out["by_type"] = {
            kind: {
                key: mean(key, among=lambda r, kind=kind: r.get("type") == kind)
                for key in ("em", "f1", "gold_in_answer")
            }
            | {"answers": sum(r.get("type") == kind for r in rows)}
            for kind in sorted({r["type"] for r in rows if r.get("type")})
        }
    return out


def judged(question: str, row: dict, passages: list, client) -> dict:
    """The LLM judge's grades of ``row``'s answer over ``passages`` (a baseline's text becomes an
    ``Answer`` citing what its markers cite): ``{"judge_question", "judge_context"}``, ``None``
    each when the judge failed."""
    from llm import LLMError
    from retrieval.stages.score.judge import answer_judge
    from retrieval.types import Answer, Citation

    answer = row.get("answer")
    if answer is None:
        numbers = sorted({int(n) for n in re.findall(r"\[(\d{1,3})\]", row["text"]) if 1 <= int(n) <= len(passages)})
        citations = [Citation(n=n, passage=passages[n - 1]) for n in numbers]
        answer = Answer(question=question, text=row["text"] or "(no answer)", mode="llm", citations=citations)
    elif answer.short_answer:
        answer = Answer(
            question=question,
            text=f"{answer.short_answer}. {answer.text}",
            mode=answer.mode,
            citations=answer.citations,
        )
    try:
        grades = answer_judge(answer, passages, llm=client)
    except LLMError as exc:
        log(f"  judge: {exc}")
        return {"judge_question": None, "judge_context": None}
    return {"judge_question": grades["question_score"], "judge_context": grades["context_score"]}


def judge_agreement(per_row: dict[str, list[dict]]) -> dict:
    """Spearman's rho (and p-value) of the judge's question score against token F1 and against
    gold-in-answer, over every judged answer of every row; the mean grades per row."""
    from scipy.stats import spearmanr

    pairs = [r for rows in per_row.values() for r in rows if r.get("judge_question") is not None]
    out: dict = {"judged": len(pairs)}
    for key in ("f1", "gold_in_answer"):
        if len(pairs) > 2 and all(key in r for r in pairs):
            rho, p = spearmanr([r["judge_question"] for r in pairs], [r[key] for r in pairs])
            out[f"spearman_{key}"] = {"rho": round(float(rho), 4), "p": round(float(p), 6)}
    out["mean_grades"] = {
        row: {
            key: round(statistics.fmean(r[key] for r in rows if r.get(key) is not None), 3)
            for key in ("judge_question", "judge_context")
            if any(r.get(key) is not None for r in rows)
        }
        for row, rows in per_row.items()
        if any(r.get("judge_question") is not None for r in rows)
    }
    return out


# ---- the questions ---------------------------------------------------------------------------


def question_items(dataset: str, *, limit: int | None, types: list[str]) -> list[dict]:
    """The gold questions: ``{"question", "answer"|"exact_answer"/"ideal_answer", "type", ...}``."""
    raw = json.loads(FILES[dataset].read_text(encoding="utf-8"))
    if dataset == "hotpotqa":
        items = [
            {
                "question": q["question"],
                "answer": q["answer"],
                "type": q["type"],
                "supporting": sorted(set(q["supporting_facts"]["title"])),
            }
            for q in raw
        ]
    else:
        items = [
            {
                "question": q["body"],
                "type": q["type"],
                "exact_answer": q.get("exact_answer"),
                "ideal_answer": q.get("ideal_answer") or [],
            }
            for q in raw["questions"]
            if q["type"] in types
        ]
    return items[:limit] if limit else items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=list(FILES), default="hotpotqa")
    parser.add_argument("--pipelines", nargs="+", default=["extractive", "simple"], choices=PIPELINES)
    parser.add_argument(
        "--baselines",
        nargs="*",
        default=None,
        choices=BASELINES,
        metavar="NAME",
        help=f"add these peer-style prompts (no NAME: all three, {', '.join(BASELINES)})",
    )
    parser.add_argument("--limit", type=int, default=None, help="N questions only")
    parser.add_argument("--start", type=int, default=0, help="skip the first N questions")
    parser.add_argument("--types", nargs="+", default=["yesno", "factoid"], help="BioASQ question types")
    parser.add_argument("--model", default="qwen2.5-1.5b", help="local model alias (llm.local)")
    parser.add_argument("--llm-url", default=None, help="an OpenAI-compatible /v1 URL serving --model")
    parser.add_argument(
        "--judge",
        nargs="*",
        default=None,
        metavar="ROW",
        help="grade these rows' answers with the LLM judge (no ROW: every LLM row)",
    )
    parser.add_argument(
        "--overrides", default=None, help="JSON settings for every product row, e.g. '{\"memory_weight\": 0.3}'"
    )
    parser.add_argument(
        "--facts-clear",
        action="store_true",
        help="forget the tenant's walks and facts first (memory empty); walks of this run then build it",
    )
    parser.add_argument("--out", default=None)
    parser.add_argument("--combine", nargs="+", metavar="JSON", help="summarize earlier runs' outputs together")
    args = parser.parse_args()
    if args.combine:
        print(json.dumps(combined(args.combine), indent=2))
        return

    django_setup()
    from django.conf import settings
    from retrieval_quality import DATASETS

    from llm import LLMClient
    from llm.local import local_llm_start
    from quality.importers import dataset_load

    items = question_items(args.dataset, limit=None, types=args.types)[args.start :]
    items = items[: args.limit] if args.limit else items
    tenant, _, _ = tenant_for(dataset_load(name=args.dataset, paths=DATASETS[args.dataset]), name=args.dataset)
    if args.overrides:
        OVERRIDES.update(json.loads(args.overrides))
    from retrieval.walks.models import Fact, Walk

    if args.facts_clear:
        Walk.objects.for_tenant(tenant).delete()
        Fact.objects.for_tenant(tenant).delete()
    log(f"memory: {Fact.objects.for_tenant(tenant).count()} facts before the run; overrides {OVERRIDES}")
    rows = list(args.pipelines) + (list(args.baselines or BASELINES) if args.baselines is not None else [])
    needs_llm = any(row != "extractive" for row in rows)
    server, client, url = None, None, args.llm_url
    if needs_llm and not url:
        port = free_port()
        server = local_llm_start(settings.KB_DATA_DIR, port=port, model=args.model)
        url = f"http://127.0.0.1:{port}/v1"
    if needs_llm:
        client = LLMClient(args.model, base_url=url, timeout_s=600, retries=0, concurrency=4)
    per_row: dict[str, list[dict]] = {row: [] for row in rows}
    examples: list[dict] = []
    load_before = _load()
    started = time.perf_counter()
    try:
        for index, item in enumerate(items):
            question = item["question"]
            extractive = product_answer(tenant, question, "extractive", None)
            passages = extractive["passages"]
            documents = extractive["passage_documents"]
            order = rows[index % len(rows) :] + rows[: index % len(rows)]
            answers = {}
            for row in order:
                if row == "extractive":
                    answers[row] = extractive
                elif row in BASELINES:
                    answers[row] = baseline_answer(row, question, passages, documents, client)
                else:
                    answers[row] = product_answer(tenant, question, row, client)
            for row in rows:
                per_row[row].append(scored(args.dataset, item, answers[row]))
                if args.judge is not None and row != "extractive" and (not args.judge or row in args.judge):
                    per_row[row][-1] |= judged(question, answers[row], _passages_of(answers[row], extractive), client)
            gold = item.get("answer") or item.get("exact_answer")
            examples.append({"question": question, "gold": gold, **{r: _shown(answers[r]) for r in rows}})
            report(args, items, rows, per_row, examples, needs_llm, load_before, started)
            log(
                f"[{index + 1}/{len(items)}] gold={gold!r} "
                + " | ".join(f"{r}: {_shown(answers[r])[:60]!r}" for r in rows)
            )
    finally:
        if server is not None:
            server.terminate()
    result = report(args, items, rows, per_row, examples, needs_llm, load_before, started)
    print(json.dumps({k: v for k, v in result.items() if k not in ("examples", "per_question")}, indent=2))


def report(args, items, rows, per_row, examples, needs_llm, load_before, started) -> dict:
    """The run's JSON so far (summaries of the answered questions), also written to the output
    file, so a long run can be read, or stopped, before it ends."""
    answered = len(examples)
    result = {
        "benchmark": "answers",
        "dataset": args.dataset,
        "questions": answered,
        "first_question": args.start,
        "model": args.model if needs_llm else None,
        "machine": "2 cores",
        "load_average_1min_before": load_before,
        "load_average_1min_after": _load(),
        "wall_s": round(time.perf_counter() - started, 1),
        "overrides": OVERRIDES,
        "facts_cleared": args.facts_clear,
        "rows": {row: summary(per_row[row]) for row in rows if per_row[row]},
        **({"judge": judge_agreement(per_row)} if args.judge is not None else {}),
        "examples": examples,
        "per_question": per_row,
    }
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"answers-{args.dataset}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def combined(paths: list[str]) -> dict:
    """The summaries of several runs' ``per_question`` answers together (runs over different
    questions of one dataset, e.g. ``--start 0 --limit 12`` and ``--start 12``)."""
    per_row: dict[str, list[dict]] = {}
    runs = []
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        runs.append({k: data.get(k) for k in ("first_question", "questions", "wall_s", "load_average_1min_before")})
        for row, answers in data["per_question"].items():
            per_row.setdefault(row, []).extend(answers)
    return {"runs": runs, "rows": {row: summary(answers) for row, answers in per_row.items()}}


def _passages_of(row: dict, extractive: dict) -> list:
    """The ``Passage``s ``row`` answered from: its own (a product pipeline) or the shared top 5."""
    return row.get("passage_objects") or extractive["passage_objects"]


def _shown(row: dict) -> str:
    return (f"{row['short']} || " if row["short"] else "") + row["text"]


def _load() -> float:
    import os

    return round(os.getloadavg()[0], 2)


if __name__ == "__main__":
    main()
