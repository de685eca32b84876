"""Personalized answers (seed ``magic-of-rag-retrieval.txt``, "Response Personalization").

Two layers, both off for a request with ``personalize: false`` and both recorded in the trace:

(a) ranking: ``personal_signals_get`` reads what the asker's profile prefers and mutes and what
    they and their team found useful (positive or negative feedback, opened citations); the
    ``personal`` signal reranker (``people.rerank``, registered with retrieval's rerank stage)
    turns it into a bounded boost;
(b) prompt: ``user_layer_compose`` writes a short description of the asker (profile, what they
    may search, recent questions) that the generate stage puts in the answer prompt (through
    the run's registry, ``retrieval.registry``), so the answer is shaped for the person without changing what is
    retrieved.

Everything is read inside the run's tenant only (``for_tenant``), so another tenant's profile,
feedback or opens never count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from django.core.cache import cache
from django.db.models import Count, Q

from core.models import Membership
from knowledge.access import sources_visible
from knowledge.models import Source
from people.models import CitationOpen, Feedback, Profile
from people.selectors import history_questions

# Evidence a history event adds to a document (and to its source). The asker's own judgement
# counts twice as much as a teammate's; a negative rating counts against the document.
EVIDENCE = {
    "user_up": 1.0,
    "user_down": -1.0,
    "user_answer_up": 0.5,  # a helpful answer: each document it cited
    "user_open": 0.5,
    "team_up": 0.5,
    "team_down": -0.5,
    "team_open": 0.25,
}
# A source's usefulness is the sum over its documents, scaled down: many useful documents of a
# source say less about a new document of it than about those documents themselves.
SOURCE_EVIDENCE_SCALE = 3.0
# Signals are cached per tenant and user this long (seconds): seven small queries cost ~100 ms on
# a loaded machine, which doubled the hybrid p50 (benchmarks/personalization.py). The asker's own
# profile changes, feedback and opens clear their entry at once (``personal_signals_forget``); a
# teammate's reach them within the TTL.
SIGNALS_TTL_S = 60
RECENT_QUESTIONS = 5
ABOUT_CHARS = 500


@dataclass
class PersonalSignals:
    """What ranking may use about one asker in one tenant.

    ``preferred``/``muted``: source id -> name (from the profile); ``documents``/``sources``:
    id -> usefulness in (-1, 1) (``tanh`` of the summed evidence, see ``EVIDENCE``); ``counts``:
    the history events read (for the trace).
    """

    profile: Profile | None = None
    team: str = ""
    preferred: dict[int, str] = field(default_factory=dict)
    muted: dict[int, str] = field(default_factory=dict)
    documents: dict[int, float] = field(default_factory=dict)
    sources: dict[int, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when nothing could change a ranking."""
        return not (self.preferred or self.muted or self.documents or self.sources)

    def summary(self) -> dict:
        """The JSON-able description of the signals for the trace."""
        return {
            "team": self.team,
            "preferred_sources": sorted(self.preferred.values()),
            "muted_sources": sorted(self.muted.values()),
            "useful_documents": sum(1 for v in self.documents.values() if v > 0),
            "unhelpful_documents": sum(1 for v in self.documents.values() if v < 0),
            "history": self.counts,
        }


def _team_user_ids(*, tenant, user, team: str) -> list[int]:
    if not team:
        return []
    return list(
        Profile.objects.for_tenant(tenant)
        .filter(team__iexact=team)
        .exclude(membership__user_id=user.pk)
        .values_list("membership__user_id", flat=True)
    )


def personal_signals_get(*, tenant, user) -> PersonalSignals:
    """``user``'s ranking signals in ``tenant``: profile sources and the usefulness of documents and
    sources from their own and their team's feedback and opened citations (``PersonalSignals``).

    An anonymous user, or one without a profile and history, gets empty signals. Seven small
    queries, each bounded by the tenant and the user (or their team).
    """
    signals = PersonalSignals()
    if user is None or not getattr(user, "pk", None):
        return signals
    profile = _profile_get(tenant=tenant, user=user)
    if profile is not None:
        signals.profile = profile
        signals.team = profile.team.strip()
        signals.preferred = {s.pk: s.name for s in profile.preferred_sources.all()}
        signals.muted = {s.pk: s.name for s in profile.muted_sources.all()}
    team = _team_user_ids(tenant=tenant, user=user, team=signals.team)
    documents: dict[int, float] = defaultdict(float)
    sources: dict[int, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)

    def credit(kind: str, document_id, source_id, times: int = 1) -> None:
        counts[kind] += times
        if document_id is not None:
            documents[document_id] += EVIDENCE[kind] * times
        if source_id is not None:
            sources[source_id] += EVIDENCE[kind] * times

    cited = (
        Feedback.objects.for_tenant(tenant)
        .filter(citation__isnull=False)
        .filter(Q(user_id=user.pk) | Q(user_id__in=team))
        .values("user_id", "document_id", "source_id")
        .annotate(up=Count("id", filter=Q(rating=1)), down=Count("id", filter=Q(rating=-1)))
    )
    for row in cited:
        who = "user" if row["user_id"] == user.pk else "team"
        if row["up"]:
            credit(f"{who}_up", row["document_id"], row["source_id"], row["up"])
        if row["down"]:
            credit(f"{who}_down", row["document_id"], row["source_id"], row["down"])
    answers = (
        Feedback.objects.for_tenant(tenant)
        .filter(citation__isnull=True, user_id=user.pk, rating=1)
        .values_list("trace__citations", flat=True)[:200]
    )
    for citations in answers:
        for c in {(c.get("document_id"), c.get("source_id")) for c in citations or []}:
            credit("user_answer_up", *c)
    opened = (
        CitationOpen.objects.for_tenant(tenant)
        .filter(Q(user_id=user.pk) | Q(user_id__in=team))
        .values("user_id", "document_id", "source_id")
        .annotate(n=Count("id"))
    )
    for row in opened:
        who = "user" if row["user_id"] == user.pk else "team"
        credit(f"{who}_open", row["document_id"], row["source_id"], row["n"])
    signals.documents = {d: math.tanh(e) for d, e in documents.items() if e}
    signals.sources = {s: math.tanh(e / SOURCE_EVIDENCE_SCALE) for s, e in sources.items() if e}
    signals.counts = {**counts, "team_members": len(team)}
    return signals


def _signals_key(tenant, user) -> str:
    return f"personal-signals:{getattr(tenant, 'pk', tenant)}:{getattr(user, 'pk', user)}"


def personal_signals_cached(*, tenant, user) -> PersonalSignals:
    """``personal_signals_get`` through the cache (``SIGNALS_TTL_S``; without ``profile``)."""
    key = _signals_key(tenant, user)
    signals = cache.get(key)
    if signals is None:
        signals = personal_signals_get(tenant=tenant, user=user)
        signals.profile = None
        cache.set(key, signals, SIGNALS_TTL_S)
    return signals


def _profile_get(*, tenant, user) -> Profile | None:
    """``user``'s profile in ``tenant`` with its preferred and muted sources (one query plus two), or None."""
    return (
        Profile.objects.for_tenant(tenant)
        .filter(membership__user_id=user.pk)
        .prefetch_related("preferred_sources", "muted_sources")
        .first()
    )


def personal_signals_forget(*, tenant, user) -> None:
    """Drop ``user``'s cached signals in ``tenant`` (after their profile, feedback or opens change)."""
    cache.delete(_signals_key(tenant, user))


def _permissions_line(*, tenant, user, where) -> str:
    """What the asker may search: role and "N of M sources": M the sources their access rules let
    them see (``knowledge.access``; hidden ones are neither named nor counted), N those the
    request's source filter keeps."""
    role = Membership.objects.for_tenant(tenant).filter(user_id=user.pk).values_list("role", flat=True).first()
    readable = sources_visible(Source.objects.for_tenant(tenant), where.access)
    names = list(readable.order_by("name").values_list("pk", "name"))
    visible = [name for pk, name in names if not where.source_ids or pk in set(where.source_ids)]
    shown = ", ".join(visible[:12]) + (", …" if len(visible) > 12 else "")
    return f"Role: {role or 'none'}; searches {len(visible)} of {len(names)} sources ({shown})."


def user_layer_compose(*, tenant, user, where, question: str) -> tuple[str, dict] | None:
    """The prompt's user layer for ``user`` asking ``question``: (text, trace summary), or ``None``
    for an anonymous asker.

    Lines: role/title, team, expertise and preferred language (from the profile, when set), the
    preferred and muted sources, "about me" (first 500 characters), the permissions summary
    (role and how many of the tenant's sources the search covers) and the last five earlier
    questions. The caller switches it off with ``personalize: false``.
    """
    if user is None or not getattr(user, "pk", None):
        return None
    lines: list[str] = []
    used: list[str] = []
    profile = _profile_get(tenant=tenant, user=user)
    if profile is not None:
        facts = [
            ("Role or title", profile.title),
            ("Team", profile.team),
            ("Expertise", profile.get_expertise_display() if profile.expertise else ""),
            (
                "Preferred language",
                f"{profile.get_language_display()} ({profile.language}); answer in it" if profile.language else "",
            ),
            ("Prefers sources", ", ".join(sorted(s.name for s in profile.preferred_sources.all()))),
            ("Muted sources", ", ".join(sorted(s.name for s in profile.muted_sources.all()))),
            ("About them", " ".join(profile.about.split())[:ABOUT_CHARS]),
        ]
        for label, value in facts:
            if value:
                lines.append(f"{label}: {value}")
                used.append(label.lower())
    lines.append(_permissions_line(tenant=tenant, user=user, where=where))
    recent = history_questions(tenant=tenant, user=user, limit=RECENT_QUESTIONS, exclude=question)
    if recent:
        lines.append("Their recent questions: " + " | ".join(" ".join(q.split())[:200] for q in recent))
    text = "\n".join(lines)
    return text, {"profile": used, "recent_questions": len(recent), "chars": len(text), "text": text}
