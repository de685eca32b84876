"""Signal reranker ``recency``: relevance x recency decay x source reliability.

Seed ``magic-of-rag-retrieval.txt``, "Data Freshness vs. Quality": a composite score of the
source's reliability and a timestamp weight, and a threshold below which a candidate does not
proceed. For each fused result::

    age       = days from the version's ``published_at`` to the reference day (the run's
                ``as_of`` date, else today; never negative)
    decay     = 0.5 ** (age / half_life)                 exponential decay, half-life in days
    recency   = floor + (1 - floor) * decay              in [floor, 1]: old material is damped,
                                                         never erased
    quality   = reliability ** quality_weight            the source's reliability in [0, 1]
                x feedback                               (when ``source_feedback_weight`` > 0)
    score     = fused score x recency x quality

``half_life`` is the source's ``half_life_days``, else the tenant's ``recency_half_life_days``
(0 = no decay). A version without ``published_at`` is *undated*: its recency factor is neutral
(1.0) by default, because the ingestion time says when we read a document, not when it was
written (re-ingesting an old page would make it "fresh"); ``recency_undated = "ingested"`` uses
the ingestion time instead. Results are re-sorted by the new score (stable: equal factors keep
the fused order, so undated, equally reliable corpora rank exactly as before), and a result whose
score is below ``recency_threshold`` x the best fused score of the run is dropped. Every factor is
in the result's ``components["recency"]``.

Source feedback (off by default, ``source_feedback_weight`` = 0): users' thumbs on citations
(``people.models.Feedback``) give each source a negative share, smoothed towards the tenant's
own share by ``FEEDBACK_PRIOR_VOTES`` pseudo-votes (a Bayesian average, so two thumbs down do not
condemn a source)::

    tenant    = down / (up + down) over all of the tenant's citation feedback
    smoothed  = (down_s + m * tenant) / (up_s + down_s + m)
    feedback  = 1 - source_feedback_weight * max(0, smoothed - tenant)     in [1 - weight, 1]

Only a source rated worse than the tenant's average is damped, never boosted (like reliability,
the factor is at most 1), and by at most ``source_feedback_weight``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from datetime import time as clock_time

from django.db.models import Q
from django.utils import timezone

from core.schema import setting
from knowledge.models import DocumentVersion, Source

NAME = "recency"


@dataclass(frozen=True)
class Config:
    """Settings of the ``recency`` reranker."""

    recency: str = setting("on", choices=("on", "off"), doc="the recency and quality reranker")
    recency_floor: float = setting(0.5, range=(0.0, 1.0), doc="lowest recency factor")
    recency_half_life_days: float = setting(
        0.0, range=(0.0, 36500.0), doc="half-life of sources without their own, in days (0 = none)"
    )
    recency_undated: str = setting(
        "neutral", choices=("neutral", "ingested"), doc="factor of a version without `published_at`"
    )
    recency_threshold: float = setting(0.0, range=(0.0, 1.0), doc="drop below this share of the best fused score")
    quality_weight: float = setting(1.0, range=(0.0, 1.0), doc="exponent on the source's reliability")
    source_feedback_weight: float = setting(
        0.0, range=(0.0, 1.0), doc="largest damping of a source by its negative citation feedback (0 = off)"
    )


# Tenant id -> (checked at, monotonic seconds; whether a source decays or is less than reliable).
# Kept per process for ``SIGNALS_TTL_S`` so a search does not pay a query for it: a change of a
# source's half-life or reliability reaches running processes within that time.
SIGNALS_TTL_S = 30.0
_signals: dict[int, tuple[float, bool]] = {}
# Pseudo-votes at the tenant's negative share added to each source's feedback (see the docstring).
FEEDBACK_PRIOR_VOTES = 5.0
# Tenant id -> (read at, monotonic seconds; {source id: (up, down)}), kept like ``_signals``.
_feedback: dict[int, tuple[float, dict[int, tuple[int, int]]]] = {}


def _tenant_has_signals(run) -> bool:
    """Whether any of the tenant's sources decays or is less than fully reliable.

    One ``exists()`` query per tenant and process every ``SIGNALS_TTL_S`` seconds (the answer is
    also kept on the run, which asks twice).
    """
    cached = run.memo.get(NAME)
    if cached is not None:
        return cached
    tenant_id = run.tenant.pk
    now = time.monotonic()
    checked = _signals.get(tenant_id)
    if checked is not None and now - checked[0] < SIGNALS_TTL_S:
        cached = checked[1]
    else:
        cached = (
            Source.objects.filter(tenant_id=tenant_id)
            .filter(Q(half_life_days__isnull=False) | Q(reliability__lt=1.0))
            .exists()
        )
        _signals[tenant_id] = (now, cached)
    run.memo[NAME] = cached
    return cached


def active(run) -> bool:
    """Whether this reranker runs for ``run``: ``recency`` is on and something can change a score.

    Something can when the tenant sets a default half-life or a threshold, or one of its sources
    has a half-life or a reliability below 1; otherwise every factor would be 1 and the stage is
    skipped (no deeper fetch, no step).
    """
    spec = run.spec.of(Config)
    if spec.recency != "on":
        return False
    if spec.recency_half_life_days > 0 or spec.recency_threshold > 0 or spec.source_feedback_weight > 0:
        return True
    return _tenant_has_signals(run)


def reference_time(run) -> datetime:
    """The moment ages are measured to: the end of the run's ``as_of`` day (UTC), else now."""
    as_of = getattr(run.where, "as_of", None)
    if as_of is not None:
        return datetime.combine(as_of, clock_time.max, tzinfo=UTC)
    return timezone.now()


def recency_factor(*, age_days: float | None, half_life_days: float | None, floor: float) -> float:
    """``floor + (1 - floor) * 0.5 ** (age_days / half_life_days)``, in [floor, 1].

    1.0 (neutral) when ``age_days`` is None (undated) or ``half_life_days`` is None or <= 0 (the
    source does not decay). A negative age (dated in the future) counts as 0.
    """
    if age_days is None or not half_life_days or half_life_days <= 0:
        return 1.0
    decay = math.pow(0.5, max(age_days, 0.0) / half_life_days)
    return floor + (1.0 - floor) * decay


def quality_factor(*, reliability: float | None, weight: float) -> float:
    """``reliability ** weight`` (1.0 when reliability is unknown); ``weight`` 0 ignores it."""
    if reliability is None:
        return 1.0
    return math.pow(max(0.0, min(1.0, reliability)), weight) if weight > 0 else 1.0


def feedback_factor(*, up: int, down: int, tenant_share: float, weight: float) -> tuple[float, float]:
    """``(factor, smoothed negative share)`` of a source with ``up``/``down`` citation feedback in a
    tenant whose negative share is ``tenant_share`` (see the module docstring); factor in
    [1 - weight, 1], 1.0 when ``weight`` is 0 or the source is rated no worse than the tenant."""
    smoothed = (down + FEEDBACK_PRIOR_VOTES * tenant_share) / (up + down + FEEDBACK_PRIOR_VOTES)
    return 1.0 - weight * max(0.0, smoothed - tenant_share), smoothed


def _source_feedback(run) -> dict[int, tuple[int, int]]:
    """The tenant's citation feedback per source (the ``source_feedback_counts`` hook), read once per
    tenant and process every ``SIGNALS_TTL_S`` seconds; empty when no app keeps feedback."""
    source_feedback_counts = run.registry.source_feedback_counts
    if source_feedback_counts is None:
        return {}
    now = time.monotonic()
    cached = _feedback.get(run.tenant.pk)
    if cached is None or now - cached[0] >= SIGNALS_TTL_S:
        cached = _feedback[run.tenant.pk] = (now, source_feedback_counts(tenant=run.tenant))
    return cached[1]


def _ingestion_times(results) -> dict[int, datetime]:
    """``{version id: ingested_at}`` of the undated results' versions, in one query (the result
    rows are loaded without ``ingested_at``; reading it per row would cost a query each)."""
    ids = {r.chunk.version_id for r in results if r.chunk.version.published_at is None}
    if not ids:
        return {}
    return dict(DocumentVersion.objects.filter(pk__in=ids).values_list("pk", "ingested_at"))


def _dated(version: DocumentVersion, ingested: dict[int, datetime]) -> tuple[datetime | None, str]:
    if version.published_at is not None:
        return version.published_at, "published"
    if version.pk in ingested:
        return ingested[version.pk], "ingested"
    return None, "undated"


def rerank(run, results, *, k: int):
    """``results`` re-scored by recency and reliability, re-sorted, those below the threshold dropped.

    ``results``: ``SearchResult`` rows best first with chunk, version, document and source loaded.
    Returns (results best first, summary for the trace: counts of dated results, damped and
    dropped ones, and which chunks moved into the top ``k``).
    """
    spec = run.spec.of(Config)
    if not results:
        return results, {"results": 0}
    now = reference_time(run)
    best = max(r.score for r in results)
    before = [r.chunk.pk for r in results[:k]]
    ingested = _ingestion_times(results) if spec.recency_undated == "ingested" else {}
    votes = _source_feedback(run) if spec.source_feedback_weight > 0 else {}
    total_up, total_down = sum(u for u, _ in votes.values()), sum(d for _, d in votes.values())
    tenant_share = total_down / (total_up + total_down) if votes else 0.0
    dated = damped = 0
    for result in results:
        version = result.chunk.version
        source = version.document.source
        half_life = source.half_life_days or (spec.recency_half_life_days or None)
        when, basis = _dated(version, ingested)
        age = (now - when).total_seconds() / 86400 if when is not None else None
        recency = recency_factor(age_days=age, half_life_days=half_life, floor=spec.recency_floor)
        quality = quality_factor(reliability=source.reliability, weight=spec.quality_weight)
        up, down = votes.get(source.pk, (0, 0))
        feedback, negative_share = feedback_factor(
            up=up, down=down, tenant_share=tenant_share, weight=spec.source_feedback_weight
        )
        quality *= feedback
        relevance = result.score
        result.score = relevance * recency * quality
        dated += when is not None
        damped += recency * quality < 1.0
        result.components["recency"] = {
            "relevance": round(relevance, 6),
            "date": when.date().isoformat() if when is not None else None,
            "basis": basis,
            "age_days": round(max(age, 0.0), 1) if age is not None else None,
            "half_life_days": half_life,
            "factor": round(recency, 4),
            "floor": spec.recency_floor,
            "reliability": source.reliability,
            "feedback": round(feedback, 4),
            "feedback_votes": [up, down],
            "feedback_negative_share": round(negative_share, 4),
            "quality": round(quality, 4),
            "composite": round(result.score / best, 4) if best > 0 else 0.0,
        }
    ranked = sorted(results, key=lambda r: -r.score)
    threshold = spec.recency_threshold * best
    kept = [r for r in ranked if r.score >= threshold] if spec.recency_threshold > 0 else ranked
    after = [r.chunk.pk for r in kept[:k]]
    summary = {
        "reference": now.date().isoformat(),
        "results": len(results),
        "dated": dated,
        "damped": damped,
        "dropped": len(ranked) - len(kept),
        "threshold": spec.recency_threshold,
        "entered_top_k": [pk for pk in after if pk not in before],
    }
    return kept, summary
