"""Signal reranker ``personal`` (see ``retrieval.stages.rerank``): a bounded boost of what the asker
prefers and found useful (seed ``magic-of-rag-retrieval.txt``, "Response Personalization":
personal context added "without altering the core retrieval"). The settings name it among
retrieval's signal rerankers (``KB_SIGNAL_RERANKERS``, ``retrieval.registry``), at its place in the chain.

For each result, a multiplicative factor from the asker's ``PersonalSignals``
(``people.personalization.personal_signals_get``)::

    factor = 1 + personal_boost * preferred_source
               + personal_useful_boost * (useful_document + useful_source / 2)
    factor = clamp(factor, 1 - personal_cap, 1 + personal_cap)
    factor = 1 - personal_mute                 for a muted source (instead)

``useful_*`` is in (-1, 1): ``tanh`` of the feedback and opened-citation evidence of the asker
(full weight) and their team (half weight); negative ratings count against.

Why it cannot hide relevance: only results in the *relevance band* of the top score
(fused score >= top * (1 - personal_band)) are re-ordered, by ``score * factor``, and they keep
the band's places; every result below the band keeps its place. So personalization chooses
among results that retrieval already judged about equally relevant, never promotes a weak
match over a strong one, and a muted source's result only moves to the end of the band (it is
never removed). The fused ``score`` is left as it was (the relevance); the factor is in the
result's ``components["personal"]`` and the moves in the step summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.schema import setting
from people.personalization import PersonalSignals, personal_signals_cached

NAME = "personal"


@dataclass(frozen=True)
class Config:
    """Settings of the ``personal`` reranker."""

    personal_boost: float = setting(0.2, range=(0.0, 1.0), doc="added to the factor for a preferred source")
    personal_useful_boost: float = setting(
        0.2, range=(0.0, 1.0), doc="weight of the usefulness from feedback and opened citations"
    )
    personal_cap: float = setting(0.2, range=(0.0, 1.0), doc="the factor stays within 1 ± cap")
    personal_mute: float = setting(0.2, range=(0.0, 1.0), doc="a muted source's results are multiplied by 1 - mute")
    personal_band: float = setting(
        0.15, range=(0.0, 1.0), doc="only results within this share of the top score are reordered"
    )


_UNSET = object()


def signals_for(run) -> PersonalSignals | None:
    """The run's personal signals (read once per run and kept on it), or ``None`` when the request
    says ``personalize: false`` or nobody is signed in."""
    cached = run.memo.get(NAME, _UNSET)
    if cached is _UNSET:
        cached = None
        if run.request.personalize and run.user is not None:
            cached = personal_signals_cached(tenant=run.tenant, user=run.user)
        run.memo[NAME] = cached
    return cached


def active(run) -> bool:
    """On when the request personalizes (``run.request.personalize``), someone is signed in and
    their profile or history holds something that could change a ranking."""
    signals = signals_for(run)
    return signals is not None and not signals.empty


def _factor(result, signals: PersonalSignals, spec) -> dict:
    document = result.chunk.version.document
    source_id = document.source_id
    preferred = source_id in signals.preferred
    useful_document = signals.documents.get(document.pk, 0.0)
    useful_source = signals.sources.get(source_id, 0.0)
    muted = source_id in signals.muted
    if muted:
        factor = 1.0 - spec.personal_mute
    else:
        raw = 1.0 + spec.personal_boost * preferred + spec.personal_useful_boost * (useful_document + useful_source / 2)
        factor = min(1.0 + spec.personal_cap, max(1.0 - spec.personal_cap, raw))
    return {
        "factor": round(factor, 4),
        "preferred": int(preferred),
        "muted": int(muted),
        "useful_document": round(useful_document, 4),
        "useful_source": round(useful_source, 4),
    }


def rerank(run, results, *, k: int):
    """``results`` with the band of the top score re-ordered by ``score * factor`` (see the module
    docstring), re-ranked 1..n; and the summary: signals, band, and the results that moved
    (``[chunk_id, from rank, to rank, factor]``)."""
    signals = signals_for(run)
    spec = run.spec.of(Config)
    if not results or signals is None:
        return results, {}
    floor = max(r.score for r in results) * (1.0 - spec.personal_band)
    before = {r.chunk.pk: i for i, r in enumerate(results, 1)}
    for result in results:
        components = _factor(result, signals, spec)
        components["in_band"] = int(result.score >= floor)
        result.components["personal"] = components
    # The band's members are permuted among the band's own places; every other result stays put.
    places = [i for i, r in enumerate(results) if r.score >= floor]
    band = sorted(
        (results[i] for i in places), key=lambda r: r.score * r.components["personal"]["factor"], reverse=True
    )
    reranked = list(results)
    for place, result in zip(places, band, strict=True):
        reranked[place] = result
    moved = []
    for rank, result in enumerate(reranked, 1):
        if before[result.chunk.pk] != rank and rank <= k:
            moved.append([result.chunk.pk, before[result.chunk.pk], rank, result.components["personal"]["factor"]])
        result.rank = rank
    summary = {
        **signals.summary(),
        "settings": {
            "boost": spec.personal_boost,
            "useful_boost": spec.personal_useful_boost,
            "cap": spec.personal_cap,
            "mute": spec.personal_mute,
            "band": spec.personal_band,
        },
        "band_size": len(band),
        "boosted": sum(1 for r in band if r.components["personal"]["factor"] > 1),
        "demoted": sum(1 for r in band if r.components["personal"]["factor"] < 1),
        "moved": moved[:20],
    }
    return reranked, summary
