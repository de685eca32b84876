"""What a walk leaves while it runs: its row, its path, its facts, and the pauses a person asked for.

The WalkingRAG stage (``retrieval.walks.stage``) calls a ``WalkRecorder`` after each round
(``round_done``: the facts kept as memory, one ``WalkStep`` per query), then asks it whether to
go on (``checkpoint``): a steered walk pauses there after its ``pause_after`` round or when a
person asked, waits (polling its row) until a person resumes or stops it, or until
``KB_WALK_PAUSE_TIMEOUT_S`` runs out (then it answers from what it has), and hands the stage the
person's edits: the question, the facts still in use (removed ones dropped, corrected ones with
their new text) and the next queries. ``answered`` stores the answer; ``finish`` ends the walk once the run's trace is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from retrieval.walks.memory import facts_keep
from retrieval.walks.models import Fact, Walk, WalkStep


@dataclass
class Steering:
    """A person's edits to a paused walk, for the stage to go on with.

    ``facts``: the walk's facts still in use, in the order they were found (``walking.Fact``
    objects, texts as corrected). ``queries``: the next round's queries; ``origins`` maps each to
    ``"facts"`` (the walk named it) or ``"person"``. ``stop``: answer now. ``paused_s``: seconds
    the walk waited (not counted against its time budget).
    """

    question: str
    facts: list
    queries: list[str]
    origins: dict[str, str] = field(default_factory=dict)
    stop: bool = False
    paused_s: float = 0.0


@dataclass
class Resumed:
    """A walk's state read back from its rows, to go on from after its process stopped.

    ``round``: rounds done. ``asked``: every query searched, in order. ``chunk_ids``: the chunks
    read, in reading order. ``facts``: the facts still in use (``Fact`` rows, in the order found).
    ``queries`` and ``origins``: the next round's queries and who named each (``facts`` or
    ``person``). ``excluded``: chunks whose every fact a person removed. ``paused``: the walk was
    waiting for a person. ``stop_reason``: why it would stop now (``""``: it goes on).
    """

    round: int
    asked: list[str]
    chunk_ids: list[int]
    facts: list
    queries: list[str]
    origins: dict[str, str]
    excluded: set[int]
    paused: bool
    stop_reason: str


class WalkTakenOver(Exception):
    """Another process runs the walk now: this one's lease ran out while it was still going."""


# Where a run keeps its walk's recorder (``RunState.memo``): the WalkingRAG stage's own state.
RECORDER = "walkingrag.recorder"


def recorder_of(run) -> WalkRecorder | None:
    """The ``WalkRecorder`` of ``run`` (a ``RunState``): given for a steered walk
    (``pipeline_answer(walk=...)``), set by the stage for any other walk with an LLM; ``None``
    otherwise."""
    return run.memo.get(RECORDER)


class WalkRecorder:
    """Keeps one walk's row, path and facts as the stage runs it (module docstring).

    ``poll_s``: how often a paused walk reads its row. ``worker_id``: the lease this process holds
    on the walk (``retrieval.walks.steering``), checked whenever the row is read. Errors of the
    database propagate.
    """

    def __init__(self, walk: Walk, *, poll_s: float = 0.3, worker_id: str = ""):
        self.walk = walk
        self.poll_s = poll_s
        self.worker_id = worker_id

    @classmethod
    def for_run(cls, run) -> WalkRecorder:
        """A recorder with a new, unsteered ``Walk`` row for a pipeline run (``RunState``)."""
        walk = Walk.objects.create(
            tenant=run.tenant, user=run.user, question=run.request.question, pipeline=run.spec.name, status="running"
        )
        walk.tenant = run.tenant
        return cls(walk)

    def round_done(
        self,
        *,
        round: int,
        queries: list[str],
        origins: dict[str, str],
        led_by: list[int],
        found: dict[str, list[int]],
        facts: list,
        next_queries: list[str],
        stop_reason: str,
    ) -> None:
        """Record round ``round``: its facts (``walking.Fact``; ids set) and one step per query
        (``found``: query -> new chunk ids), the walk's round and next queries."""
        facts_keep(walk=self.walk, facts=facts, round=round, next_sources=next_queries)
        per_chunk: dict[int, int] = {}
        for fact in facts:
            per_chunk[fact.chunk_id] = per_chunk.get(fact.chunk_id, 0) + 1
        steps = []
        for query in queries:
            chunk_ids = found.get(query, [])
            count = sum(per_chunk.get(c, 0) for c in chunk_ids)
            origin = origins.get(query, "question")
            steps.append(
                WalkStep(
                    tenant_id=self.walk.tenant_id,
                    walk=self.walk,
                    round=round,
                    query=query,
                    origin=origin,
                    led_by=led_by if origin == "facts" else [],
                    chunk_ids=chunk_ids,
                    fact_count=count,
                    false_start=count == 0,
                )
            )
        WalkStep.objects.bulk_create(steps)
        self.walk.round = round
        self.walk.next_queries = [] if stop_reason else list(next_queries)
        self.walk.save(update_fields=["round", "next_queries", "updated_at"])

    def _should_pause(self, round: int) -> bool:
        walk = self.walk
        return walk.steered and (walk.pause_requested or (walk.pause_after is not None and walk.pause_after == round))

    def _refresh(self) -> None:
        """Read the walk's row again; ``WalkTakenOver`` when another process holds it now."""
        self.walk.refresh_from_db()
        if self.worker_id and self.walk.worker_id != self.worker_id:
            raise WalkTakenOver(f"Walk {self.walk.pk} is run by {self.walk.worker_id or 'another process'} now.")

    def checkpoint(self, *, round: int, facts: list, next_queries: list[str], stop_reason: str) -> Steering | None:
        """After round ``round``: ``None`` to go on as the walk decided, or the ``Steering`` a
        person left (after a pause, or a stop asked while it ran). An unsteered walk goes on
        without reading its row: nobody can pause or stop it. ``WalkTakenOver`` when another
        process took the walk over (this one's lease ran out)."""
        if not self.walk.steered:
            return None
        self._refresh()
        if not self._should_pause(round):
            if self.walk.stop_requested:
                return Steering(question=self.walk.question, facts=facts, queries=[], stop=True)
            return None
        walk = self.walk
        walk.status, walk.paused_at, walk.pause_requested = "paused", timezone.now(), False
        walk.next_queries = list(next_queries)
        walk.stop_reason = stop_reason
        walk.save(update_fields=["status", "paused_at", "pause_requested", "next_queries", "stop_reason", "updated_at"])
        return self.wait(facts=facts, next_queries=next_queries)

    def wait(self, *, facts: list, next_queries: list[str]) -> Steering:
        """Wait while the walk is paused (polling its row) until a person resumes or stops it, or
        ``KB_WALK_PAUSE_TIMEOUT_S`` after it paused (``paused_at``; a walk taken over after its
        process stopped keeps its deadline); then the ``Steering`` it left. ``next_queries``: the
        queries the walk itself named (any other is the person's)."""
        walk = self.walk
        paused = time.monotonic()
        waited = (timezone.now() - walk.paused_at).total_seconds() if walk.paused_at else 0.0
        deadline = paused + settings.KB_WALK_PAUSE_TIMEOUT_S - max(0.0, waited)
        timed_out = False
        while True:
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(self.poll_s)
            self._refresh()
            if walk.status != "paused" or walk.stop_requested:
                break
        if walk.status == "paused":  # timed out, or a stop asked: running again until it answers
            walk.status = "running"
            walk.save(update_fields=["status", "updated_at"])
        live = {
            f.pk: f.text
            for f in Fact.objects.for_tenant(walk.tenant_id).filter(walk=walk).exclude(retired_reason="wrong")
        }
        kept = []
        for fact in facts:
            if fact.id in live:
                fact.text = live[fact.id]
                kept.append(fact)
        queries = [q for q in walk.next_queries if isinstance(q, str) and q.strip()]
        origins = {q: ("facts" if q in next_queries else "person") for q in queries}
        return Steering(
            question=walk.question,
            facts=kept,
            queries=queries,
            origins=origins,
            stop=timed_out or walk.stop_requested,
            paused_s=time.monotonic() - paused,
        )

    def resumed(self, *, visible) -> Resumed | None:
        """What a walk taken over from a stopped process had done, read back from its rows; ``None``
        for a walk that finished no round (it starts from the question).

        ``visible(chunk_ids) -> set`` says which chunks the asker may still read (the run's
        filter): chunks and facts gone from view since are left out. The round in progress when
        the process stopped is lost (its facts were never kept); the walk goes on with the next
        queries it had recorded, or answers when it had decided to stop.
        """
        walk = self.walk
        if walk.round == 0:
            return None
        steps = list(WalkStep.objects.for_tenant(walk.tenant_id).filter(walk=walk).order_by("round", "id"))
        read: list[int] = []
        for step in steps:
            read.extend(c for c in step.chunk_ids if c not in read)
        rows = list(Fact.objects.for_tenant(walk.tenant_id).filter(walk=walk).order_by("round", "id"))
        shown = visible(read + [f.chunk_id for f in rows])
        live = [f for f in rows if f.retired_reason != "wrong" and f.chunk_id in shown]
        removed = {f.chunk_id for f in rows if f.retired_reason == "wrong"}
        named = {q for f in rows if f.round == walk.round for q in f.next_sources}
        queries = [q for q in walk.next_queries if isinstance(q, str) and q.strip()]
        if walk.stop_requested:
            stop_reason = "stopped"
        elif queries or walk.status == "paused":
            stop_reason = walk.stop_reason if walk.status == "paused" else ""
        else:
            stop_reason = walk.stop_reason or "no_new_queries"
        return Resumed(
            round=walk.round,
            asked=[s.query for s in steps],
            chunk_ids=[c for c in read if c in shown],
            facts=live,
            queries=queries,
            origins={q: ("facts" if q in named else "person") for q in queries},
            excluded=removed - {f.chunk_id for f in live},
            paused=walk.status == "paused",
            stop_reason=stop_reason,
        )

    def answered(self, *, answer, stop_reason: str, degraded: bool) -> None:
        """Store the walk's answer and stop reason (the walk ends with ``finish``, once the run is done)."""
        walk = self.walk
        walk.answer = {
            "text": answer.text if answer is not None else "",
            "citations": [
                {"n": c.n, "chunk_id": c.passage.anchor.pk, "document_id": c.passage.document.pk}
                for c in (answer.citations if answer is not None else [])
            ],
            "degraded": degraded,
        }
        walk.stop_reason = stop_reason
        walk.next_queries = []
        walk.save(update_fields=["answer", "stop_reason", "next_queries", "updated_at"])

    def finish(self, *, trace_id: int | None = None) -> None:
        """End the walk once its run is done (the trace written): ``stopped`` when a person stopped
        it or its pause timed out, else ``done``; the walk and its facts linked to ``trace_id``."""
        walk = self.walk
        walk.status = "stopped" if walk.stop_reason == "stopped" else "done"
        walk.finished_at = timezone.now()
        walk.trace_id = trace_id
        walk.save(update_fields=["status", "finished_at", "trace_id", "updated_at"])
        if trace_id is not None:
            Fact.objects.for_tenant(walk.tenant_id).filter(walk_id=walk.pk).update(trace_id=trace_id)
