"""Writes of the people app: a member's profile."""

from __future__ import annotations

from django.db import transaction

from core.errors import InvalidInput
from core.memberships import membership_get
from knowledge.access import access_scope_get, sources_visible
from knowledge.models import Source
from knowledge.selectors import membership_for_user
from people.models import Profile
from people.personalization import personal_signals_forget

TEXT_LIMITS = {"title": 200, "team": 200, "about": 2000}
FIELDS = ("title", "team", "expertise", "language", "preferred_sources", "muted_sources", "about")


def profile_get(*, user, tenant=None) -> Profile:
    """``user``'s profile in ``tenant`` (an empty one is made on first use); without ``tenant``, in
    their only tenant. ``PermissionDenied`` for a user who is not a member (of ``tenant``);
    ``InvalidInput`` without ``tenant`` for a user of several tenants."""
    membership = membership_for_user(user) if tenant is None else membership_get(user=user, tenant=tenant)
    profile, _ = Profile.objects.get_or_create(membership=membership)
    return profile


def _sources(tenant, names, field: str, *, user) -> list[Source]:
    """The tenant's sources called ``names`` that ``user`` may see (a restricted source they may
    not see reads as unknown: its name is never confirmed)."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise InvalidInput(f"{field} must be a list of source names.")
    readable = sources_visible(Source.objects.for_tenant(tenant), access_scope_get(tenant=tenant, user=user))
    found = {s.name: s for s in readable.filter(name__in=list(names))}
    unknown = sorted(set(names) - set(found))
    if unknown:
        raise InvalidInput(f"{field}: unknown source(s) {', '.join(map(repr, unknown))}.")
    return [found[name] for name in dict.fromkeys(names)]


def _text(field: str, value) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text.")
    if "\x00" in value:
        raise InvalidInput(f"{field} must not contain NUL characters.")
    value = value.strip()
    if len(value) > TEXT_LIMITS[field]:
        raise InvalidInput(f"{field} is {len(value)} characters long; the limit is {TEXT_LIMITS[field]}.")
    return value


def profile_update(*, user, tenant=None, **changes) -> Profile:
    """Change the given fields of ``user``'s profile; the others keep their values.

    Fields: ``title``, ``team`` (text, 200 characters), ``about`` (2,000), ``expertise``
    (beginner, intermediate, expert or ""), ``language`` (a language code Django knows, or ""),
    ``preferred_sources`` and ``muted_sources`` (lists of the tenant's source names; a source
    cannot be both). ``tenant`` as ``profile_get``. ``InvalidInput`` naming the bad field; then
    nothing changes.
    """
    unknown = sorted(set(changes) - set(FIELDS))
    if unknown:
        raise InvalidInput(f"Unknown profile field(s): {', '.join(unknown)}.")
    profile = profile_get(user=user, tenant=tenant)
    tenant = profile.membership.tenant
    values: dict = {}
    for field in ("title", "team", "about"):
        if field in changes:
            values[field] = _text(field, changes[field])
    if "expertise" in changes:
        if changes["expertise"] not in ("", *Profile.Expertise.values):
            raise InvalidInput(f"expertise must be one of {', '.join(Profile.Expertise.values)}, or empty.")
        values["expertise"] = changes["expertise"]
    if "language" in changes:
        codes = {code for code, _ in Profile._meta.get_field("language").choices}
        if changes["language"] not in codes | {""}:
            raise InvalidInput(f"language: unknown language code {changes['language']!r}.")
        values["language"] = changes["language"]
    preferred = (
        _sources(tenant, changes["preferred_sources"], "preferred_sources", user=user)
        if "preferred_sources" in changes
        else None
    )
    muted = (
        _sources(tenant, changes["muted_sources"], "muted_sources", user=user) if "muted_sources" in changes else None
    )
    final_preferred = (
        {s.pk for s in preferred}
        if preferred is not None
        else set(profile.preferred_sources.values_list("pk", flat=True))
    )
    final_muted = (
        {s.pk for s in muted} if muted is not None else set(profile.muted_sources.values_list("pk", flat=True))
    )
    both = final_preferred & final_muted
    if both:
        names = ", ".join(sorted(Source.objects.filter(pk__in=both).values_list("name", flat=True)))
        raise InvalidInput(f"A source cannot be both preferred and muted: {names}.")
    with transaction.atomic():
        for field, value in values.items():
            setattr(profile, field, value)
        profile.save()
        if preferred is not None:
            profile.preferred_sources.set(preferred)
        if muted is not None:
            profile.muted_sources.set(muted)
    personal_signals_forget(tenant=tenant, user=user)
    return profile
