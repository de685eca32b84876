"""Which tenant a request acts in, for a user who may belong to several.

One place decides it, ``membership_for_request``, in this order:

1. a membership token (``core.tokens``): its membership, always (an ``X-Tenant`` naming
   another tenant is a 403);
2. the ``X-Tenant: <slug>`` header: the user's membership in that tenant, or a 403 that reads the
   same whether the tenant exists or not;
3. the portal's choice kept in the session (``membership_choose``), while it is still valid;
4. the user's only membership. With several and none named, ``InvalidInput`` (400) listing the
   user's tenants and how to choose, or, for the portal and admin (``pick_first=True``), the
   first by slug.

A user with no membership at all gets ``PermissionDenied`` (403).

A sign-in held to one tenant (``membership_bind``: a sign-in through a tenant's own identity
provider, which vouches for that tenant only) acts in that tenant and no other: an ``X-Tenant``
naming another, or a switch to another, is a 403, and the user's other memberships are not
offered, until the user signs in again another way (the password) or signs out. A request
authenticated by an API token is not held: the token's own rules apply.

Resolving reads the user's memberships across tenants, before any tenant is bound, so the reads
here run in ``core.rls.rls_bypass``; ``membership_for_request`` then binds the request's
row-level-security scope to the tenant it found (``core.rls.rls_request_bind``).
"""

from __future__ import annotations

from django.contrib.auth import BACKEND_SESSION_KEY
from django.db import transaction
from django.utils import timezone

from core.audit import audit_fields_diff, audit_record
from core.errors import InvalidInput, NotFound, PermissionDenied
from core.models import Membership, MembershipToken, Tenant
from core.rls import rls_bypass, rls_request_bind
from core.tokens import token_digest

TENANT_HEADER = "X-Tenant"
SESSION_KEY = "kb_tenant"
BOUND_KEY = "kb_tenant_bound"
_CACHE = "_kb_membership"
# Memberships are read from the primary even inside a replica read path (core.replicas): a
# membership made or revoked a moment ago takes effect at once, whatever a replica's lag.
PRIMARY = "default"


def membership_list(*, user, request=None) -> list[Membership]:
    """The user's memberships with their tenants, ordered by tenant slug (empty when signed out).
    With ``request`` (whose user ``user`` is), only those it may act in: a sign-in held to one
    tenant (``membership_bind``) has that tenant's alone."""
    if user is None or not getattr(user, "is_authenticated", False):
        return []
    with rls_bypass():  # a user's memberships span tenants
        memberships = list(
            Membership.objects.using(PRIMARY).select_related("tenant").filter(user_id=user.pk).order_by("tenant__slug")
        )
    bound = membership_bound_slug(request) if request is not None else None
    return memberships if bound is None else [m for m in memberships if m.tenant.slug == bound]


def membership_bound_slug(request) -> str | None:
    """The slug of the tenant ``request``'s sign-in is held to (``membership_bind``), or ``None``.
    A hold lasts while the sign-in that made it does: a sign-in another way (another
    authentication backend) lifts it; a request authenticated by an API token is never held."""
    if getattr(request, "auth", None) is not None:  # DRF's token (or membership token), not the browser's sign-in
        return None
    session = getattr(request, "session", None)
    bound = session.get(BOUND_KEY) if session is not None else None
    if not isinstance(bound, dict) or bound.get("backend") != session.get(BACKEND_SESSION_KEY):
        return None
    return bound.get("tenant") or None


def _held_elsewhere(bound: str, slug: str) -> PermissionDenied:
    return PermissionDenied(
        f"You signed in through the single sign-on of tenant {bound!r}, which acts in that tenant only, "
        f"not in {slug!r}. Sign out and sign in with your password to act in another tenant."
    )


def membership_get(*, user, tenant: Tenant | int) -> Membership:
    """``user``'s membership in ``tenant``; ``PermissionDenied`` if they are not a member."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    with rls_bypass():  # checking membership comes before the tenant is bound
        membership = (
            Membership.objects.using(PRIMARY)
            .select_related("tenant")
            .filter(user_id=getattr(user, "pk", None), tenant_id=tenant_id)
            .first()
        )
    if membership is None:
        raise PermissionDenied("Your account does not belong to this tenant.")
    return membership


def _named(memberships: list[Membership], slug: str) -> Membership:
    for membership in memberships:
        if membership.tenant.slug == slug:
            return membership
    # The same words whether the tenant exists or not: the answer never tells which slugs exist.
    raise PermissionDenied(f"You are not a member of a tenant {slug!r}.")


def _several(memberships: list[Membership]) -> InvalidInput:
    slugs = ", ".join(m.tenant.slug for m in memberships)
    return InvalidInput(
        f"Your account belongs to several tenants ({slugs}); name one with the {TENANT_HEADER} header "
        f"(e.g. '{TENANT_HEADER}: {memberships[0].tenant.slug}'), or use an API token of one membership.",
        code="tenant_required",
    )


def membership_for_request(request, *, pick_first: bool = False) -> Membership:
    """The membership ``request`` acts in (see the module's docstring for the order).

    ``request`` is a Django ``HttpRequest`` or a DRF ``Request``. ``PermissionDenied`` when the
    user has no membership, or names (by header) a tenant they do not belong to or one their
    token does not; ``InvalidInput`` (code ``tenant_required``) when they have several, named
    none, and ``pick_first`` is false. Cached on the request.
    """
    cached = getattr(request, _CACHE, None)
    if cached is not None and (cached[0], cached[1]) == (pick_first, request.user.pk):
        return cached[2]
    membership = _resolve(request, pick_first=pick_first)
    rls_request_bind(tenant_id=membership.tenant_id, user_id=membership.user_id)
    setattr(request, _CACHE, (pick_first, request.user.pk, membership))
    return membership


def _resolve(request, *, pick_first: bool) -> Membership:
    user = request.user
    named = (request.headers.get(TENANT_HEADER) or "").strip()
    auth = getattr(request, "auth", None)
    if isinstance(auth, MembershipToken):
        membership = auth.membership
        if named and named != membership.tenant.slug:
            raise PermissionDenied(f"This API token belongs to tenant {membership.tenant.slug!r}, not {named!r}.")
        return membership
    bound = membership_bound_slug(request)
    if bound is not None and named and named != bound:
        raise _held_elsewhere(bound, named)
    memberships = membership_list(user=user, request=request)
    if not memberships:
        raise PermissionDenied("Your account does not belong to any tenant.")
    if named:
        return _named(memberships, named)
    session = getattr(request, "session", None)
    chosen = session.get(SESSION_KEY) if session is not None else None
    if chosen:
        match = next((m for m in memberships if m.tenant.slug == chosen), None)
        if match is not None:
            return match
        session.pop(SESSION_KEY, None)  # the membership is gone: forget the choice
    if len(memberships) == 1 or pick_first:
        return memberships[0]
    raise _several(memberships)


def tenant_for_request(request, *, pick_first: bool = False) -> Tenant:
    """The tenant of ``membership_for_request(request)``; same errors."""
    return membership_for_request(request, pick_first=pick_first).tenant


def membership_choose(request, *, slug: str) -> Membership:
    """Remember ``slug`` as the tenant the portal (and admin) acts in from now on (kept with the
    signed-in user's login, until they choose another).
    ``PermissionDenied`` (nothing stored) when the user is not a member of it, or their sign-in
    is held to another tenant (``membership_bind``)."""
    bound = membership_bound_slug(request)
    if bound is not None and slug != bound:
        raise _held_elsewhere(bound, slug)
    membership = _named(membership_list(user=request.user, request=request), slug)
    request.session[SESSION_KEY] = membership.tenant.slug
    if hasattr(request, _CACHE):
        delattr(request, _CACHE)
    return membership


def membership_bind(request, *, slug: str) -> Membership:
    """Hold ``request``'s sign-in (just made with ``django.contrib.auth.login``) to the tenant
    ``slug``: from now on it acts in that tenant only (module docstring), until the user signs in
    again another way or signs out. For a sign-in that vouches for one tenant only (a tenant's own
    identity provider, ``sso.views``). Returns the membership; ``PermissionDenied`` (nothing
    stored) when the user is not a member of it."""
    request.session.pop(BOUND_KEY, None)
    membership = membership_choose(request, slug=slug)
    request.session[BOUND_KEY] = {"tenant": membership.tenant.slug, "backend": request.session.get(BACKEND_SESSION_KEY)}
    return membership


def membership_unbind(request) -> None:
    """Lift ``membership_bind``'s hold on ``request``'s sign-in (a sign-in that vouches for every
    tenant of the user, e.g. through the installation's provider)."""
    request.session.pop(BOUND_KEY, None)


def membership_save(*, tenant: Tenant, user, role: str) -> Membership:
    """Give ``user`` the ``role`` in ``tenant``: a new membership, or the existing one's role
    changed. Recorded in the audit log (``membership.created``, ``membership.role_changed``;
    nothing when the role is already that). ``InvalidInput`` for an unknown role."""
    if role not in Membership.Role.values:
        raise InvalidInput(f"Unknown role {role!r}; use one of {', '.join(Membership.Role.values)}.")
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
        if membership is None:
            membership = Membership.objects.create(tenant=tenant, user=user, role=role)
            audit_record(action="membership.created", tenant=tenant, obj=membership, changes={"role": [None, role]})
        elif membership.role != role:
            before = membership.role
            membership.role = role
            membership.save(update_fields=["role"])
            changes = audit_fields_diff({"role": before}, {"role": role}, ["role"])
            audit_record(action="membership.role_changed", tenant=tenant, obj=membership, changes=changes)
    return membership


def membership_remove(*, tenant: Tenant, membership_id: int) -> None:
    """Remove one of ``tenant``'s memberships, with its API tokens; recorded
    (``membership.removed``, with the role and the number of tokens revoked). ``NotFound`` if it
    is not the tenant's."""
    with transaction.atomic():
        membership = Membership.objects.for_tenant(tenant).select_related("user", "tenant").filter(pk=membership_id)
        membership = membership.first()
        if membership is None:
            raise NotFound(f"Membership {membership_id} not found.")
        audit_record(
            action="membership.removed",
            tenant=tenant,
            obj=membership,
            changes={"role": [membership.role, None], "tokens_revoked": membership.tokens.count()},
        )
        membership.delete()


def membership_token_create(*, membership: Membership, name: str = "") -> tuple[MembershipToken, str]:
    """A new API token of ``membership``; returns the row and its key (shown once: only the key's
    SHA-256 digest is stored, and the log names the token by its prefix). Recorded
    (``token.created``). ``InvalidInput`` for a name over 100 characters."""
    if len(name) > 100:
        raise InvalidInput("A token name has at most 100 characters.")
    key = MembershipToken.new_key()
    with transaction.atomic():
        token = MembershipToken.objects.create(
            membership=membership, name=name, digest=token_digest(key), prefix=key[:12]
        )
        audit_record(
            action="token.created",
            tenant=membership.tenant_id,
            obj=token,
            changes={"user": membership.user.get_username(), "name": name},
        )
    return token, key


def membership_token_revoke(*, tenant: Tenant, token_id: int) -> None:
    """Revoke (delete) one of ``tenant``'s membership tokens: requests with its key fail from now
    on. Recorded (``token.revoked``). ``NotFound`` if it is not the tenant's."""
    with transaction.atomic():
        token = MembershipToken.objects.for_tenant(tenant).select_related("membership__user", "membership__tenant")
        token = token.filter(pk=token_id).first()
        if token is None:
            raise NotFound(f"Token {token_id} not found.")
        audit_record(
            action="token.revoked",
            tenant=tenant,
            obj=token,
            changes={"user": token.membership.user.get_username(), "name": token.name},
        )
        token.delete()


def membership_token_authenticate(key: str) -> MembershipToken | None:
    """The token whose key is ``key`` with its membership, tenant and user, or ``None``. Records
    when it was last used (at most once a minute, so a busy script writes little)."""
    with rls_bypass():  # authentication comes before the request's tenant is known
        token = (
            MembershipToken.objects.select_related("membership__tenant", "membership__user")
            .filter(digest=token_digest(key))
            .first()
        )
        if token is not None:
            now = timezone.now()
            if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
                with transaction.atomic():
                    MembershipToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
