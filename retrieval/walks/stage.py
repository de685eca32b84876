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
as memory with their chunk and version. A steered walk (its recorder given to the run, started through the walks
API) may pause after a round; the person's edits (question, facts removed or corrected, queries
added or removed) come back as a ``walk.steeredN`` step and the walk goes on from them: a removed
fact is not used, an added query is searched, and a person's query restarts a walk that would
have stopped.

Where each part lives: one round in ``retrieval.walks.rounds``, the reading of chunks, the entity
hop and the answer's passages in ``retrieval.walks.reading``, the LLM call in
``retrieval.walks.extraction``, the settings in ``retrieval.walks.config``.
"""

from __future__ import annotations

import time
from dataclasses import replace

from retrieval.stages.base import Stage, ranking_run
from retrieval.stages.fetch import chunks_load
from retrieval.stages.generate import Generate
from retrieval.types import Passage, QueryPlan, SearchResult
from retrieval.walks.config import WalkConfig
from retrieval.walks.extraction import Fact
from retrieval.walks.reading import answer_passages, bridge_entities, chunks_read, entity_hop
from retrieval.walks.recorder import RECORDER, WalkRecorder, recorder_of
from retrieval.walks.rounds import WalkProgress, walk_round
from retrieval.walks.selectors import chunks_visible

# Stop reasons a person's steering overrides: a walk that stopped for one of them goes on when the
# person adds a query or keeps next queries.
RESTARTABLE = ("sufficient", "no_new_facts", "no_new_queries", "no_new_chunks")


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

    def run(self, run):
        """Ranking only: the ``ranking`` stages. Answering: the walk's rounds until it stops
        (pausing for a person between rounds when steered), the entity hop, the answer's
        passages (the ``walk`` step), then the answer."""
        if not run.answering:
            return ranking_run(run, self.ranking, depth=run.request.k)
        walk = self.walk_begin(run)
        while not walk.stop_reason:
            walk_round(run, walk)
            self.checkpoint(run, walk)
        hops = self.hop(run, walk)
        passages = self.passages_choose(run, walk, hops)
        return self.answer(run, walk, passages)

    def walk_begin(self, run) -> WalkProgress:
        """The walk at its start: from the question, with a ``WalkRecorder`` (``recorder_of(run)``)
        whenever there is an LLM (every walk keeps its facts and path). Without an LLM its one
        round has run already; a walk whose process stopped goes on where it was (``resume``),
        and if it stood paused it waits for the person first."""
        question = run.request.question
        walk = WalkProgress(question=question, queries=[question], origins={question: "question"})
        recorder = recorder_of(run)
        if recorder is None and run.llm is not None:
            recorder = run.memo[RECORDER] = WalkRecorder.for_run(run)
        if recorder is not None:  # the walk ends once the run's trace is written
            run.after_trace.append(lambda trace_id: recorder.finish(trace_id=trace_id))
        if run.llm is None:
            self.round_without_llm(run, walk)
        elif recorder is not None:
            self.resume_stopped(run, walk)
        walk.led_by = [f.id for f in walk.facts if f.round == walk.rounds and f.id is not None]
        return walk

    def round_without_llm(self, run, walk: WalkProgress) -> None:
        """Round 1 without an LLM (``walk_without_llm``), kept with the run's recorder, if any."""
        walk.rounds = 1
        walk.asked.append(walk.question)
        found: dict[str, list[int]] = {}
        walk.stop_reason = self.walk_without_llm(run, walk.seen, found)
        if recorder_of(run) is not None:
            recorder_of(run).round_done(
                round=1,
                queries=[walk.question],
                origins={},
                led_by=[],
                found=found,
                facts=[],
                next_queries=[],
                stop_reason=walk.stop_reason,
            )

    def walk_without_llm(self, run, seen: dict, found: dict | None = None) -> str:
        """The fallback: one round of hybrid retrieval (the ``walk.round1`` step); the stop reason."""
        question = run.request.question
        with run.step("walk.round1") as step:
            new = chunks_read(run, [question], seen, k=run.request.k, found=found)
            step.summary = {
                "round": 1,
                "mode": "retrieval only",
                "reason": f"{run.no_llm_reason}: one round of hybrid retrieval, then the extractive answer",
                "queries": [question],
                "chunks_read": [r.chunk.pk for r in new],
                "facts": [],
                "new_queries": [],
                "stop_reason": "no_llm",
            }
        return "no_llm"

    def resume_stopped(self, run, walk: WalkProgress) -> None:
        """Go on from the recorded rounds of a walk whose process stopped, if any (``resume``);
        when it stood paused, wait for the person's steering and apply it (``steer``)."""
        recorder = recorder_of(run)
        resumed = recorder.resumed(visible=lambda ids: chunks_visible(where=run.where, chunk_ids=ids))
        if resumed is None:
            return
        walk.rounds = resumed.round
        walk.asked.extend(resumed.asked)
        self.resume(run, walk, resumed, walk.seen)
        if resumed.paused:
            named = [q for q, origin in walk.origins.items() if origin == "facts"]
            steering = recorder.wait(facts=walk.facts, next_queries=named)
            walk.started += steering.paused_s
            self.steer(run, walk, steering, walk.rounds)

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

    def checkpoint(self, run, walk: WalkProgress) -> None:
        """After a round: let the recorder pause the walk for a person (steered walks) and apply
        what the person did (``steer``); the time paused is not the walk's budget. Nothing after
        an LLM failure or without a recorder."""
        recorder = recorder_of(run)
        if recorder is None or walk.stop_reason == "llm_failed":
            return
        steering = recorder.checkpoint(
            round=walk.rounds, facts=walk.facts, next_queries=walk.queries, stop_reason=walk.stop_reason
        )
        if steering is not None:
            walk.started += steering.paused_s  # a person's time is not the walk's budget
            self.steer(run, walk, steering, walk.rounds)

    def steer(self, run, walk: WalkProgress, steering, rounds: int) -> None:
        """Apply a person's ``Steering`` after round ``rounds`` to ``walk`` (a ``walk.steeredN`` step):
        the question (the run's too), the facts kept, the next queries; a stop, or a person's
        query restarting a walk that would have stopped."""
        with run.step(f"walk.steered{rounds}") as step:
            still = {id(f) for f in steering.facts}
            removed = [f.id for f in walk.facts if id(f) not in still]
            walk.excluded |= {f.chunk_id for f in walk.facts if id(f) not in still}
            walk.excluded -= {f.chunk_id for f in steering.facts}
            edited = walk.question != steering.question
            walk.question = steering.question
            run.request = replace(run.request, question=steering.question)
            walk.facts = steering.facts
            added = [q for q in steering.queries if steering.origins.get(q) == "person"]
            walk.queries, walk.origins = steering.queries, steering.origins
            if steering.stop:
                walk.stop_reason = "stopped"
            elif added or (walk.queries and walk.stop_reason in RESTARTABLE):
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

    def hop(self, run, walk: WalkProgress) -> dict[str, int | None]:
        """The entity hop (a ``walk.hop`` step) after the last round: the best chunk of each bridge
        entity the facts name, ``{entity: chunk id read, or None}``; ``{}`` without facts, with
        ``walk_entity_hop`` 0, or when a person stopped the walk."""
        limit = run.spec.of(WalkConfig).walk_entity_hop
        if not walk.facts or not limit or walk.stop_reason == "stopped":
            return {}
        with run.step("walk.hop") as step:
            entities = bridge_entities(walk.question, walk.facts, limit=limit)
            hops = entity_hop(run, entities, walk.seen)
            step.summary = {"entities": entities, "chunks_read": {e: c for e, c in hops.items()}}
        return hops

    def passages_choose(self, run, walk: WalkProgress, hops: dict[str, int | None]) -> list[Passage]:
        """The answer's passages (``answer_passages``, per ``walk_answer_from`` and
        ``walk_answer_fill``), recorded with the whole walk as the ``walk`` step."""
        config = run.spec.of(WalkConfig)
        from_chunks = config.walk_answer_from == "chunks"
        with_facts = run.llm is not None and not from_chunks
        with run.step("walk") as step:
            passages = answer_passages(
                walk.facts,
                walk.seen,
                with_facts=with_facts,
                excluded=frozenset(walk.excluded),
                hops=tuple(c for c in hops.values() if c is not None),
                fill=min(run.request.k, config.walk_answer_fill) if from_chunks else 0,
            )
            step.summary = {
                "rounds": walk.rounds,
                "stop_reason": walk.stop_reason,
                "queries": walk.asked,
                "facts": [f.as_dict() for f in walk.facts],
                "chunks_read": list(walk.seen),
                "passages_from": ("facts" if with_facts else "fact chunks") if walk.facts else "chunks read",
                "entity_hop": hops,
                "passages": [{"chunk_id": p.anchor.pk, "chunks": p.chunks} for p in passages],
                "spent_ms": round((time.perf_counter() - walk.started) * 1000, 2),
                "spent_usd": round(run.usage.cost_usd, 6),
            }
            if recorder_of(run) is not None:
                step.summary["walk_id"] = recorder_of(run).walk.pk
        return passages

    def answer(self, run, walk: WalkProgress, passages: list[Passage]):
        """Write the answer from ``passages`` (the ``generate`` stage), keep it with the walk, and
        leave every chunk read as the run's results (reading order) and the walk's queries as
        its plan's notes; the run."""
        recorder = recorder_of(run)
        run.search_ms = run.elapsed_ms()
        run.passages = passages
        run = self.generate.run(run)
        if recorder is not None:
            recorder.answered(answer=run.answer, stop_reason=walk.stop_reason, degraded=run.degraded)
        results = list(walk.seen.values())
        for rank, result in enumerate(results, start=1):
            result.rank = rank
        run.results = results
        run.plan = QueryPlan.from_question(walk.question)
        run.plan.notes = [f"walk query: {q}" for q in walk.asked[1:]]
        run.confidence = None
        return run
