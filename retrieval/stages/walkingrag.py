"""WalkingRAG, a composite stage: rounds of retrieval and fact extraction, then an answer from the facts.

Seed ``walkingrag-multi-turn.txt`` ("Better RAG 2: Single-shot is not good enough"). Round 1
searches the question; each round reads up to ``k`` unseen chunks per query (hybrid retrieval,
chunks read in earlier rounds skipped), and one LLM call (``facts_extract``) over the best
``walk_facts_from`` of them per query keeps the facts they hold, each tied to its chunk, judges whether the facts suffice and names what is still
missing (``nextSource`` + ``expectedInfo``), which become the next round's queries. The walk
stops at the first of these, recorded as ``stop_reason`` on the last round's step and on the
``walk`` step:

==================  ==========================================================================
``sufficient``      the LLM says the facts collected suffice to answer
``no_new_facts``    a round found no new fact
``max_rounds``      ``walk_max_rounds`` rounds ran
``budget``          the run's wall time reached ``KB_BUDGET_MS`` or its LLM cost ``KB_BUDGET_USD``
``no_new_queries``  the LLM wants more but named nowhere new to look
``no_new_chunks``   the queries found no chunk not read already
``llm_failed``      the LLM call failed (the run is degraded; the answer uses what was gathered)
``stopped``         a person stopped a steered walk, or its pause timed out (``retrieval.walks``)
``no_llm``          no LLM: one round of hybrid retrieval, then the extractive answer
==================  ==========================================================================

After the last round the entity hop (``walk_entity_hop``, LLM-free) reads the best chunk of each
named entity the facts name and the question does not. The answer is written by the ``generate``
stage from the text of the chunks that yielded facts, then the hop's chunks, then other chunks
read until there are ``walk_answer_fill`` passages (``walk_answer_from: facts``: one passage per
chunk that yielded facts, its text those facts); citations point at those chunks. Without an LLM,
or after it failed, the passages are the chunks themselves (those that yielded facts, else every
chunk read) and the answer is extractive. Every round is its own step (``walk.round1``,
``walk.round2``, …) whose summary holds the queries, the chunks read, the facts, the new
queries and the stop reason, so a streaming caller sees each round as it ends.

Every walk with an LLM is kept (``retrieval.walks``): a ``Walk`` row, one ``WalkStep`` per query
(the path: which query found which chunks, which facts led to it, the false starts) and its facts
as memory with their chunk and version. A steered walk (``run.walk``, started through the walks
API) may pause after a round; the person's edits (question, facts removed or corrected, queries
added or removed) come back as a ``walk.steeredN`` step and the walk goes on from them: a removed
fact is not used, an added query is searched, and a person's query restarts a walk that would
have stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.conf import settings

from core.schema import setting
from llm import LLMError
from retrieval.stages.base import Stage, ranking_run
from retrieval.stages.fetch import chunks_load
from retrieval.stages.fuse import candidates_fuse, results_fetch
from retrieval.stages.generate import Generate
from retrieval.stages.generate.walking import Fact, facts_extract
from retrieval.stages.retrieve.candidates import candidates_retrieve
from retrieval.types import Passage, QueryPlan, SearchResult
from retrieval.walks.recorder import WalkRecorder
from retrieval.walks.selectors import chunks_visible

MAX_PASSAGES = 20  # passages the final answer is written from


@dataclass(frozen=True)
class WalkConfig:
    """Settings of the WalkingRAG stage."""

    walk_max_rounds: int = setting(3, range=(1, 10), integer=True, doc="WalkingRAG: rounds of retrieval at most")
    walk_facts_from: int = setting(
        2,
        range=(1, 20),
        integer=True,
        doc="WalkingRAG: chunks per query the LLM reads for facts each round (the best of the k read)",
    )
    walk_answer_from: str = setting(
        "chunks",
        choices=("chunks", "facts"),
        doc="WalkingRAG: answer from the text of the chunks that yielded facts, or from the facts themselves",
    )
    walk_answer_fill: int = setting(
        MAX_PASSAGES,
        range=(0, MAX_PASSAGES),
        integer=True,
        doc=(
            "WalkingRAG: the answer's passages are the chunks that yielded facts and the entity hop's, "
            "then other chunks read until there are this many (at most k, so the default fills up to k; "
            "0: no others)"
        ),
    )
    walk_entity_hop: int = setting(
        2,
        range=(0, 5),
        integer=True,
        doc="WalkingRAG: bridge entities (named in facts, not in the question) searched once more, LLM-free",
    )


@dataclass
class WalkProgress:
    """Where a walk stands between rounds: the question (a person may edit it), the facts in use,
    the next round's queries and who named each (``question``, ``facts``, ``person``), the chunks
    left out of the answer (every fact from them removed by a person) and why it stops (``""``:
    it goes on)."""

    question: str
    queries: list[str]
    origins: dict[str, str]
    facts: list[Fact] = field(default_factory=list)
    excluded: set[int] = field(default_factory=set)
    stop_reason: str = ""


def bridge_entities(question: str, facts: list[Fact], *, limit: int) -> list[str]:
    """The named entities the facts name and the question does not (``knowledge.enrichment.entities``,
    LLM-free), in order of the facts, at most ``limit``: the links between hops a bridge question
    hides ("the father of X" -> the father's name). ``[]`` when the NER model is not installed."""
    from knowledge.enrichment.entities import EntitiesUnavailable, entities_extract

    if limit <= 0 or not facts:
        return []
    try:
        per_fact = entities_extract([f.text for f in facts])
    except EntitiesUnavailable:
        return []
    asked = question.lower()
    found: list[str] = []
    for entities in per_fact:
        for entity in entities:
            key = entity.lower()
            if key not in asked and key not in {e.lower() for e in found} and len(key) > 2:
                found.append(entity)
    return found[:limit]


def entity_hop(run, entities: list[str], seen: dict[int, SearchResult]) -> dict[str, int | None]:
    """Search each entity on its own (the run's mode and filter) and read its best chunk when the
    walk has not read it; ``{entity: chunk id read, or None}``. The new chunks join ``seen``."""
    spec = run.spec
    hops: dict[str, int | None] = {}
    for entity in entities:
        plan = QueryPlan.from_question(entity)
        candidates, timings = candidates_retrieve(
            plan,
            where=run.where,
            embedder=run.tenant.embedder,
            mode=run.mode,
            config=spec.search,
            limit=spec.search.candidates,
        )
        for name, ms in timings.items():
            run.timings[name] = run.timings.get(name, 0.0) + ms
        ranking = candidates_fuse(candidates, spec.search)
        if not ranking or ranking[0][0] in seen:
            hops[entity] = None
            continue
        [result] = results_fetch(tenant=run.tenant, ranking=ranking[:1], candidates=candidates, k=1) or [None]
        if result is None:
            hops[entity] = None
            continue
        seen[result.chunk.pk] = result
        hops[entity] = result.chunk.pk
    return hops


def chunks_read(
    run, queries: list[str], seen: dict[int, SearchResult], *, k: int, found: dict | None = None
) -> list[SearchResult]:
    """Up to ``k`` chunks per query not in ``seen`` (chunk id -> result), best first per query.

    Each query is searched on its own (the run's mode and search settings, the run's filter);
    chunks already read, this round or before, are skipped, and the new ones are added to
    ``seen``. ``found``, when given, gets each query's new chunk ids (the walk's path).
    Retriever timings add up in ``run.timings``.
    """
    spec = run.spec
    new: list[SearchResult] = []
    for query in queries:
        plan = QueryPlan.from_question(query)
        candidates, timings = candidates_retrieve(
            plan,
            where=run.where,
            embedder=run.tenant.embedder,
            mode=run.mode,
            config=spec.search,
            limit=max(spec.search.candidates, k),
        )
        for name, ms in timings.items():
            run.timings[name] = run.timings.get(name, 0.0) + ms
        ranking = [(item, score) for item, score in candidates_fuse(candidates, spec.search) if item not in seen]
        for result in results_fetch(tenant=run.tenant, ranking=ranking, candidates=candidates, k=k):
            seen[result.chunk.pk] = result
            new.append(result)
            if found is not None:
                found.setdefault(query, []).append(result.chunk.pk)
    return new


def _chunk_passage(result: SearchResult) -> Passage:
    return Passage(
        anchor=result.chunk,
        text=result.chunk.text,
        score=result.score,
        chunks=[result.chunk.ordinal],
        duplicates=result.duplicates,
    )


def _budget_spent(started: float, usd: float) -> str:
    """Which budget the run has spent ("time", "cost") or ""."""
    if (time.perf_counter() - started) * 1000 >= settings.KB_BUDGET_MS:
        return "time"
    if usd >= settings.KB_BUDGET_USD:
        return "cost"
    return ""


def answer_passages(
    facts: list[Fact],
    seen: dict[int, SearchResult],
    *,
    with_facts: bool,
    excluded: frozenset = frozenset(),
    hops: tuple = (),
    fill: int = 0,
) -> list[Passage]:
    """The final answer's passages: one per chunk that yielded facts, in order of its first fact,
    then the chunks the entity hop read (``hops``, chunk ids), then, up to ``fill`` passages in
    all, the other chunks read in reading order.

    ``with_facts``: a passage's text is its chunk's facts, one per line (for the LLM); else the
    chunk's own text. Without facts, every chunk read, in reading order. Chunks in ``excluded``
    (whose every fact a person removed) are left out. At most ``MAX_PASSAGES``.
    """
    if not facts:
        return [_chunk_passage(r) for chunk_id, r in seen.items() if chunk_id not in excluded][:MAX_PASSAGES]
    by_chunk: dict[int, list[str]] = {}
    for fact in facts:
        by_chunk.setdefault(fact.chunk_id, []).append(fact.text)
    passages = []
    for chunk_id, texts in list(by_chunk.items())[:MAX_PASSAGES]:
        passage = _chunk_passage(seen[chunk_id])
        if with_facts:
            passage.text = "\n".join(texts)
        passages.append(passage)
    used = set(by_chunk)
    for chunk_id in hops:
        if chunk_id in seen and chunk_id not in used and chunk_id not in excluded:
            passages.append(_chunk_passage(seen[chunk_id]))
            used.add(chunk_id)
    for chunk_id, result in seen.items():
        if len(passages) >= fill:
            break
        if chunk_id not in used and chunk_id not in excluded:
            passages.append(_chunk_passage(result))
            used.add(chunk_id)
    return passages[:MAX_PASSAGES]


class WalkingRAG(Stage):
    """The WalkingRAG composite stage (module docstring) over the ``ranking`` stages.

    Answering: walk the documents in rounds, then answer from the facts with citations; ``k``
    chunks are read per query per round, ``history`` is not used (the walk starts from the
    question). The state is left with a plan whose notes list the walk's queries, every chunk
    read as ``results`` (in reading order, ranked 1..n) and the answer. LLM failures end the
    walk and degrade the run; they never raise. Ranking only (search, evaluation): the
    ``ranking`` stages. The LLM-free fallback is ``walk_without_llm``.
    """

    name = "walkingrag"
    config = WalkConfig

    def __init__(self, ranking: tuple):
        self.ranking = ranking
        self.generate = Generate()

    def walk_without_llm(self, run, seen: dict, found: dict | None = None) -> str:
        """The fallback: one round of hybrid retrieval (the ``walk.round1`` step); the stop reason."""
        with run.step("walk.round1") as step:
            new = chunks_read(run, [run.question], seen, k=run.k, found=found)
            step.summary = {
                "round": 1,
                "mode": "retrieval only",
                "reason": f"{run.no_llm_reason}: one round of hybrid retrieval, then the extractive answer",
                "queries": [run.question],
                "chunks_read": [r.chunk.pk for r in new],
                "facts": [],
                "new_queries": [],
                "stop_reason": "no_llm",
            }
        return "no_llm"

    def resume(self, run, walk: WalkProgress, resumed, seen: dict[int, SearchResult]) -> None:
        """Go on from a walk whose process stopped (``WalkRecorder.resumed``): its chunks read
        (still visible to the asker) back in ``seen``, its facts, next queries and stop reason
        in ``walk``; a ``walk.resumed`` step says from where."""
        chunks = chunks_load(tenant=run.tenant, chunk_ids=resumed.chunk_ids)
        for rank, chunk_id in enumerate(resumed.chunk_ids, start=1):
            if chunk_id in chunks:
                seen[chunk_id] = SearchResult(chunk=chunks[chunk_id], score=0.0, rank=rank)
        walk.facts = [
            Fact(text=f.text, relevance=f.relevance, n=0, chunk_id=f.chunk_id, round=f.round, id=f.pk)
            for f in resumed.facts
            if f.chunk_id in seen
        ]
        walk.queries, walk.origins = resumed.queries, resumed.origins
        walk.excluded = set(resumed.excluded)
        walk.stop_reason = resumed.stop_reason
        with run.step("walk.resumed") as step:
            step.summary = {
                "round": resumed.round,
                "chunks_read": list(seen),
                "facts": [f.as_dict() for f in walk.facts],
                "queries": walk.queries,
                "paused": resumed.paused,
                "stop_reason": walk.stop_reason or None,
            }

    def steer(self, run, walk: WalkProgress, steering, rounds: int) -> None:
        """Apply a person's ``Steering`` after round ``rounds`` to ``walk`` (a ``walk.steeredN`` step):
        the question, the facts kept, the next queries; a stop, or a person's query restarting a
        walk that would have stopped."""
        with run.step(f"walk.steered{rounds}") as step:
            still = {id(f) for f in steering.facts}
            removed = [f.id for f in walk.facts if id(f) not in still]
            walk.excluded |= {f.chunk_id for f in walk.facts if id(f) not in still}
            walk.excluded -= {f.chunk_id for f in steering.facts}
            edited = walk.question != steering.question
            walk.question = run.question = steering.question
            walk.facts = steering.facts
            added = [q for q in steering.queries if steering.origins.get(q) == "person"]
            walk.queries, walk.origins = steering.queries, steering.origins
            if steering.stop:
                walk.stop_reason = "stopped"
            elif added or (
                walk.queries and walk.stop_reason in ("sufficient", "no_new_facts", "no_new_queries", "no_new_chunks")
            ):
                walk.stop_reason = ""  # a person named somewhere to look (or kept the walk's queries): it goes on
            elif not walk.queries and not walk.stop_reason:
                walk.stop_reason = "no_new_queries"
            step.summary = {
                "round": rounds,
                "question_edited": edited,
                "facts_removed": removed,
                "queries": walk.queries,
                "queries_added": added,
                "stop_reason": walk.stop_reason or None,
            }

    def run(self, run):
        if not run.answering:
            return ranking_run(run, self.ranking, depth=run.k)
        k = run.k
        started = time.perf_counter()
        seen: dict[int, SearchResult] = {}
        asked: list[str] = []
        rounds = 0
        recorder = run.walk
        if recorder is None and run.llm is not None:
            recorder = run.walk = WalkRecorder.for_run(run)  # every walk keeps its facts and path
        walk = WalkProgress(question=run.question, queries=[run.question], origins={run.question: "question"})
        if run.llm is None:
            rounds = 1
            asked.append(walk.question)
            found: dict[str, list[int]] = {}
            walk.stop_reason = self.walk_without_llm(run, seen, found)
            if recorder is not None:
                recorder.round_done(
                    round=1,
                    queries=[walk.question],
                    origins={},
                    led_by=[],
                    found=found,
                    facts=[],
                    next_queries=[],
                    stop_reason=walk.stop_reason,
                )
        elif recorder is not None:
            resumed = recorder.resumed(visible=lambda ids: chunks_visible(where=run.where, chunk_ids=ids))
            if resumed is not None:
                rounds = resumed.round
                asked.extend(resumed.asked)
                self.resume(run, walk, resumed, seen)
                if resumed.paused:
                    named = [q for q, origin in walk.origins.items() if origin == "facts"]
                    steering = recorder.wait(facts=walk.facts, next_queries=named)
                    started += steering.paused_s
                    self.steer(run, walk, steering, rounds)
        led_by: list[int] = [f.id for f in walk.facts if f.round == rounds and f.id is not None]
        while not walk.stop_reason:
            rounds += 1
            stage = f"walk.round{rounds}"
            round_facts: list[Fact] = []
            found = {}
            queries, origins = walk.queries, walk.origins
            with run.step(stage) as step:
                asked.extend(queries)
                new = chunks_read(run, queries, seen, k=k, found=found)
                summary: dict = {"round": rounds, "queries": queries, "chunks_read": [r.chunk.pk for r in new]}
                step.summary = summary
                next_queries: list[str] = []
                if not new:
                    walk.stop_reason = "no_new_chunks"
                else:
                    try:
                        per_query = run.spec.of(WalkConfig).walk_facts_from
                        shown_ids = {c for ids in found.values() for c in ids[:per_query]}
                        shown = [r for r in new if r.chunk.pk in shown_ids]
                        summary["chunks_shown"] = [r.chunk.pk for r in shown]
                        outcome, step.usage = facts_extract(
                            walk.question, [_chunk_passage(r) for r in shown], walk.facts, llm=run.llm
                        )
                    except LLMError as exc:
                        run.llm_failed(stage, exc, step)
                        walk.stop_reason = "llm_failed"
                        if getattr(exc, "reply", None):
                            summary["llm_reply"] = exc.reply
                    else:
                        for fact in outcome.facts:
                            fact.round = rounds
                        round_facts = outcome.facts
                        walk.facts.extend(outcome.facts)
                        known = {q.lower() for q in asked}
                        next_queries = [q for q in outcome.queries if q.lower() not in known]
                        summary.update(
                            model=getattr(run.llm, "name", ""),
                            facts=[f.as_dict() for f in outcome.facts],
                            dropped=outcome.dropped,
                            sufficient=outcome.sufficient,
                            new_queries=next_queries,
                        )
                        spent = _budget_spent(started, run.usage.cost_usd + step.usage.cost_usd)
                        if outcome.sufficient:
                            walk.stop_reason = "sufficient"
                        elif not outcome.facts:
                            walk.stop_reason = "no_new_facts"
                        elif rounds >= run.spec.of(WalkConfig).walk_max_rounds:
                            walk.stop_reason = "max_rounds"
                        elif spent:
                            walk.stop_reason = "budget"
                            summary["budget"] = spent
                        elif not next_queries:
                            walk.stop_reason = "no_new_queries"
                if recorder is not None:
                    recorder.round_done(
                        round=rounds,
                        queries=queries,
                        origins=origins,
                        led_by=led_by,
                        found=found,
                        facts=round_facts,
                        next_queries=next_queries,
                        stop_reason=walk.stop_reason,
                    )
                    summary["walk_id"] = recorder.walk.pk
                    if round_facts:  # now with the stored facts' ids
                        summary["facts"] = [f.as_dict() for f in round_facts]
                summary["stop_reason"] = walk.stop_reason or None
            walk.queries, walk.origins = next_queries, {q: "facts" for q in next_queries}
            led_by = [f.id for f in round_facts if f.id is not None]
            if recorder is None or walk.stop_reason == "llm_failed":
                continue
            steering = recorder.checkpoint(
                round=rounds, facts=walk.facts, next_queries=walk.queries, stop_reason=walk.stop_reason
            )
            if steering is not None:
                started += steering.paused_s  # a person's time is not the walk's budget
                self.steer(run, walk, steering, rounds)
        question, facts, excluded, stop_reason = walk.question, walk.facts, walk.excluded, walk.stop_reason
        config = run.spec.of(WalkConfig)
        hops: dict[str, int | None] = {}
        if facts and config.walk_entity_hop and stop_reason != "stopped":
            with run.step("walk.hop") as step:
                entities = bridge_entities(question, facts, limit=config.walk_entity_hop)
                hops = entity_hop(run, entities, seen)
                step.summary = {"entities": entities, "chunks_read": {e: c for e, c in hops.items()}}
        from_chunks = config.walk_answer_from == "chunks"
        with_facts = run.llm is not None and not from_chunks
        with run.step("walk") as step:
            passages = answer_passages(
                facts,
                seen,
                with_facts=with_facts,
                excluded=frozenset(excluded),
                hops=tuple(c for c in hops.values() if c is not None),
                fill=min(k, config.walk_answer_fill) if from_chunks else 0,
            )
            step.summary = {
                "rounds": rounds,
                "stop_reason": stop_reason,
                "queries": asked,
                "facts": [f.as_dict() for f in facts],
                "chunks_read": list(seen),
                "passages_from": ("facts" if with_facts else "fact chunks") if facts else "chunks read",
                "entity_hop": hops,
                "passages": [{"chunk_id": p.anchor.pk, "chunks": p.chunks} for p in passages],
                "spent_ms": round((time.perf_counter() - started) * 1000, 2),
                "spent_usd": round(run.usage.cost_usd, 6),
            }
            if recorder is not None:
                step.summary["walk_id"] = recorder.walk.pk
        run.search_ms = run.elapsed_ms()
        run.passages = passages
        run = self.generate.run(run)
        if recorder is not None:
            recorder.answered(answer=run.answer, stop_reason=stop_reason, degraded=run.degraded)
        results = list(seen.values())
        for rank, result in enumerate(results, start=1):
            result.rank = rank
        run.results = results
        run.plan = QueryPlan.from_question(question)
        run.plan.notes = [f"walk query: {q}" for q in asked[1:]]
        run.confidence = None
        return run
