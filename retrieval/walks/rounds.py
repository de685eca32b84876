"""One round of a WalkingRAG walk (``retrieval.walks.stage``): read each query's unseen chunks,
ask the LLM for the facts they hold and where to look next, decide whether the walk stops.

A round is its own step (``walk.round1``, ``walk.round2``, ...) whose summary holds the queries,
the chunks read and shown to the LLM, the facts, the new queries and the stop reason; with a
``WalkRecorder`` (``recorder_of(run)``) the round is kept too (``retrieval.walks.recorder``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.conf import settings

from llm import LLMError
from retrieval.types import SearchResult
from retrieval.walks.config import WalkConfig
from retrieval.walks.extraction import Fact, RoundResult, facts_extract
from retrieval.walks.reading import chunk_passage, chunks_read
from retrieval.walks.recorder import recorder_of


@dataclass
class WalkProgress:
    """Where a walk stands between rounds: the question (a person may edit it), the facts in use,
    the next round's queries and who named each (``question``, ``facts``, ``person``), the chunks
    left out of the answer (every fact from them removed by a person) and why it stops (``""``:
    it goes on).

    Also what it did so far: ``rounds`` run, ``seen`` (every chunk read, chunk id -> result, in
    reading order), ``asked`` (every query searched, the question first), ``led_by`` (ids of the
    stored facts of the last round, which led to the next round's queries) and ``started``
    (``time.perf_counter()`` of the walk's start, moved on by the time it stood paused: its
    budget clock).
    """

    question: str
    queries: list[str]
    origins: dict[str, str]
    facts: list[Fact] = field(default_factory=list)
    excluded: set[int] = field(default_factory=set)
    stop_reason: str = ""
    rounds: int = 0
    seen: dict[int, SearchResult] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    led_by: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)


def budget_spent(started: float, usd: float) -> str:
    """Which budget a run that started at ``started`` (``time.perf_counter()``) and spent ``usd``
    on its LLM has used up: ``"time"`` (``KB_BUDGET_MS``), ``"cost"`` (``KB_BUDGET_USD``) or ``""``."""
    if (time.perf_counter() - started) * 1000 >= settings.KB_BUDGET_MS:
        return "time"
    if usd >= settings.KB_BUDGET_USD:
        return "cost"
    return ""


def walk_round(run, walk: WalkProgress) -> None:
    """Run the walk's next round (a ``walk.roundN`` step) from ``walk.queries``: the chunks read
    join ``walk.seen``, the new facts ``walk.facts``; ``walk.queries`` become the queries the LLM
    named (their origin ``facts``) and ``walk.stop_reason`` is set when the walk stops (module
    docstring of ``retrieval.walks.stage``). An LLM failure degrades the run and stops the walk
    (``llm_failed``); it never raises."""
    walk.rounds += 1
    queries, origins = walk.queries, walk.origins
    found: dict[str, list[int]] = {}
    facts: list[Fact] = []
    next_queries: list[str] = []
    with run.step(f"walk.round{walk.rounds}") as step:
        walk.asked.extend(queries)
        new = chunks_read(run, queries, walk.seen, k=run.request.k, found=found)
        summary: dict = {"round": walk.rounds, "queries": queries, "chunks_read": [r.chunk.pk for r in new]}
        step.summary = summary
        if not new:
            walk.stop_reason = "no_new_chunks"
        else:
            outcome = _facts_extract(run, walk, new, found, step)
            if outcome is not None:
                facts, next_queries = _facts_take(run, walk, outcome, step)
        _round_record(run, walk, queries, origins, found, facts, next_queries, summary)
        summary["stop_reason"] = walk.stop_reason or None
    walk.queries, walk.origins = next_queries, {q: "facts" for q in next_queries}
    walk.led_by = [f.id for f in facts if f.id is not None]


def _facts_extract(run, walk: WalkProgress, new: list[SearchResult], found: dict, step) -> RoundResult | None:
    """The round's LLM call over the best ``walk_facts_from`` new chunks of each query; ``None``
    when it failed (the run degraded, the walk stopped as ``llm_failed``)."""
    summary = step.summary
    try:
        per_query = run.spec.of(WalkConfig).walk_facts_from
        shown_ids = {c for ids in found.values() for c in ids[:per_query]}
        shown = [r for r in new if r.chunk.pk in shown_ids]
        summary["chunks_shown"] = [r.chunk.pk for r in shown]
        outcome, step.usage = facts_extract(walk.question, [chunk_passage(r) for r in shown], walk.facts, llm=run.llm)
    except LLMError as exc:
        run.llm_failed(step.stage, exc, step)
        walk.stop_reason = "llm_failed"
        if getattr(exc, "reply", None):
            summary["llm_reply"] = exc.reply
        return None
    return outcome


def _facts_take(run, walk: WalkProgress, outcome: RoundResult, step) -> tuple[list[Fact], list[str]]:
    """Add the round's new facts to the walk and decide whether it stops; the new facts and the
    queries named that were not searched yet."""
    for fact in outcome.facts:
        fact.round = walk.rounds
    walk.facts.extend(outcome.facts)
    known = {q.lower() for q in walk.asked}
    next_queries = [q for q in outcome.queries if q.lower() not in known]
    step.summary.update(
        model=getattr(run.llm, "name", ""),
        facts=[f.as_dict() for f in outcome.facts],
        dropped=outcome.dropped,
        sufficient=outcome.sufficient,
        new_queries=next_queries,
    )
    spent = budget_spent(walk.started, run.usage.cost_usd + step.usage.cost_usd)
    if outcome.sufficient:
        walk.stop_reason = "sufficient"
    elif not outcome.facts:
        walk.stop_reason = "no_new_facts"
    elif walk.rounds >= run.spec.of(WalkConfig).walk_max_rounds:
        walk.stop_reason = "max_rounds"
    elif spent:
        walk.stop_reason = "budget"
        step.summary["budget"] = spent
    elif not next_queries:
        walk.stop_reason = "no_new_queries"
    return outcome.facts, next_queries


def _round_record(run, walk: WalkProgress, queries, origins, found, facts, next_queries, summary: dict) -> None:
    """Keep the round with the run's ``WalkRecorder``, if any: its path (which query found which
    chunks, led by which facts) and its facts, whose stored ids then show in ``summary``."""
    recorder = recorder_of(run)
    if recorder is None:
        return
    recorder.round_done(
        round=walk.rounds,
        queries=queries,
        origins=origins,
        led_by=walk.led_by,
        found=found,
        facts=facts,
        next_queries=next_queries,
        stop_reason=walk.stop_reason,
    )
    summary["walk_id"] = recorder.walk.pk
    if facts:  # now with the stored facts' ids
        summary["facts"] = [f.as_dict() for f in facts]
