"""Single sign-on: from a provider's verified claims to a signed-in user with memberships, and the
operator's writes to a tenant's single sign-on.

Who a sign-in is (``signin_complete``):

1. the account linked to the claims' issuer and subject by this same provider (``sso.Identity``:
   a link made through a tenant's provider serves that tenant's provider only), else
2. an existing account with the same **verified** email (``email_verified`` true), linked now,
3. else, where a tenant allows it (``TenantSso.create_memberships``), a new account (no
   password: it signs in through the provider only).

A tenant's own provider is run by, or for, that tenant, so it vouches for that tenant alone
(``_tenant_provider_may_sign_in``): it never signs in or links a staff account or a superuser,
nor an account that is a member of another tenant too unless the operator allowed it for this
provider (``TenantSso.allow_other_tenants_members``); and the sign-in it makes acts in its tenant
only (``core.memberships.membership_bind``, in ``sso.views``).

Which memberships: a tenant's own provider maps into that tenant; the installation's into every
tenant whose single sign-on uses it (``TenantSso`` with no issuer). In each such tenant an
existing membership takes the role the claims map to (only when a role claim is set) and the
access groups the groups claim names (only when a groups claim is set); a missing one is created
only where ``create_memberships`` is on. A sign-in that would leave the user without a
membership (in the tenant, for a tenant's provider; anywhere, for the installation's) is refused
with nothing created: ``SigninRefused`` (``no_membership``). Staff status and admin permissions
are never given by a provider: the operator gives them.

The changes a sign-in makes are recorded in the audit log as by ``SSO_ACTOR``; the sign-in itself
by ``core.audit`` (``signin.succeeded``, with the provider in ``changes``), and a refused one by
``signin_failure_record`` (``signin.failed``, with the provider and the reason), once per
provider, client address and reason in each ``KB_SSO_REFUSAL_WINDOW_S``; past
``KB_SSO_REFUSAL_LIMIT`` refusals in a window that address's sign-ins at that provider are
throttled (``signin_throttle_check``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.db import transaction
from django.utils import timezone

from core.audit import (
    ANONYMOUS,
    SIGNIN_FAILED,
    audit_actor,
    audit_fields_diff,
    audit_record,
    audit_record_user_tenants,
    client_ip,
)
from core.errors import ApplicationError, InvalidInput, NotFound
from core.memberships import membership_save
from core.models import Membership, Tenant
from core.rls import rls_bypass, tenant_context
from knowledge.access import access_group_member_set
from knowledge.models import AccessGroup
from sso.models import Identity, TenantSso
from sso.providers import Provider, issuer_normalize, issuer_problem, scopes_problem

SSO_ACTOR = "system (single sign-on)"
# Highest first: of several roles the claims map to, the first of these wins.
ROLE_ORDER = [r.value for r in Membership.Role]
USERNAME_MAX = 150


class SigninRefused(ApplicationError):
    """A sign-in through a provider that cannot go on; ``code`` is the reason recorded in the audit
    log (``bad_state``, ``provider_error``, ``provider_unavailable``, ``invalid_token``,
    ``no_membership``, ``account_not_linkable``, ``member_elsewhere``, ``staff_account``,
    ``inactive``, ``throttled``), ``message`` is for the person."""

    code = "signin_refused"
    status = 403

    def __init__(self, message: str, *, code: str, status: int = 403, user=None):
        super().__init__(message, code=code)
        self.status = status
        self.user = user


# ---- claims -----------------------------------------------------------------------------------


def claim_values(claims: dict, path: str) -> list[str]:
    """The strings a claim holds: ``path`` is a claim name or a dotted path into nested objects
    (``realm_access.roles``); a string is one value, a list its string and number items; anything
    else (or a missing claim) none."""
    value: object = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return []
        value = value[part]
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value if isinstance(v, (str, int)) and not isinstance(v, bool)]
    return []


def role_from_claims(*, sso: TenantSso, claims: dict) -> str:
    """The role ``claims`` map to under ``sso``'s ``role_claim`` and ``role_values``: the highest
    matched (owner > admin > editor > member > viewer), else ``default_role``."""
    values = set(claim_values(claims, sso.role_claim)) if sso.role_claim else set()
    matched = {role for value, role in (sso.role_values or {}).items() if value in values and role in ROLE_ORDER}
    return min(matched, key=ROLE_ORDER.index) if matched else sso.default_role


def _email_verified(claims: dict) -> str:
    """The claims' email when the provider says it verified it (``email_verified`` true), else ``""``."""
    email = claims.get("email")
    verified = claims.get("email_verified")
    if isinstance(email, str) and "@" in email and (verified is True or str(verified).lower() == "true"):
        return email.strip()
    return ""


def _username_new(claims: dict) -> str:
    """A free username from ``preferred_username`` (or the email's local part), with ``-2``,
    ``-3``... when taken."""
    User = get_user_model()
    raw = claims.get("preferred_username") or str(claims.get("email") or "").split("@")[0] or "user"
    base = re.sub(r"[^\w.@+-]", "", str(raw))[: USERNAME_MAX - 10] or "user"
    name, n = base, 1
    while User._default_manager.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _tenant_ids_of(user) -> set[int]:
    with rls_bypass():  # a user's memberships span tenants
        return set(Membership.objects.filter(user_id=user.pk).values_list("tenant_id", flat=True))


# ---- who signs in -----------------------------------------------------------------------------


def _provider_scope(provider: Provider):
    """The row-level-security scope of ``provider``'s links (``sso.Identity``): its tenant's, or
    for the installation's provider (links with no tenant) the owner's."""
    return tenant_context(provider.tenant) if provider.tenant is not None else rls_bypass()


def _identity_find(provider: Provider, subject: str) -> Identity | None:
    """The link ``provider`` made for ``subject`` (its issuer's, its tenant's), or ``None``: a link
    made through another tenant's provider, even one with the same issuer, is never used."""
    with _provider_scope(provider):
        return (
            Identity.objects.select_related("user")
            .filter(issuer=provider.issuer, subject=subject, tenant=provider.tenant)
            .first()
        )


def _tenant_provider_may_sign_in(provider: Provider, account, *, email: str = "") -> None:
    """``SigninRefused`` when ``provider``, a tenant's own, may not sign in (or, with ``email``,
    link by that email) ``account``: a staff account or superuser (``staff_account``), or a member
    of another tenant too while the operator has not allowed that for this provider
    (``account_not_linkable`` when linking, ``member_elsewhere`` when already linked). The
    installation's provider may sign in any account."""
    if provider.tenant is None:
        return
    if account.is_staff or account.is_superuser:
        raise SigninRefused(
            f"This is a staff account here: it never signs in through {provider.name}, a team's own provider. "
            "Sign in with its password.",
            code="staff_account",
            user=account,
        )
    if provider.allow_other_tenants_members or not (_tenant_ids_of(account) - {provider.tenant.pk}):
        return
    if email:
        raise SigninRefused(
            f"An account with the email {email} already exists here and cannot be linked through {provider.name}. "
            "Sign in with its password, or ask the operator.",
            code="account_not_linkable",
            user=account,
        )
    raise SigninRefused(
        f"Your account here belongs to other teams besides {provider.tenant.name}, so {provider.name} cannot "
        "sign it in. Sign in with your password, or ask the operator.",
        code="member_elsewhere",
        user=account,
    )


def _account_for(provider: Provider, claims: dict):
    """The account to sign in as: linked, or matched by verified email (module docstring); ``None``
    for a new one. ``SigninRefused`` for an account this provider may not sign in or link
    (``_tenant_provider_may_sign_in``), or several with the email."""
    User = get_user_model()
    identity = _identity_find(provider, claims["sub"])
    if identity is not None:
        _tenant_provider_may_sign_in(provider, identity.user)
        return identity.user
    email = _email_verified(claims)
    if not email:
        return None
    accounts = list(User._default_manager.filter(email__iexact=email)[:2])
    if not accounts:
        return None
    if len(accounts) > 1:
        raise SigninRefused(
            f"Several accounts here have the email {email}; ask the operator to link yours.",
            code="account_not_linkable",
        )
    account = accounts[0]
    _tenant_provider_may_sign_in(provider, account, email=email)
    return account


@dataclass
class _Target:
    """One tenant a sign-in maps into: its single sign-on and the role to give (``None``: keep)."""

    tenant: Tenant
    sso: TenantSso
    role: str | None
    existing: bool


def _targets(provider: Provider) -> list[TenantSso]:
    if provider.tenant is not None:
        with tenant_context(provider.tenant):
            return list(TenantSso.objects.for_tenant(provider.tenant).select_related("tenant").filter(enabled=True))
    with rls_bypass():  # the installation's provider maps into every tenant that uses it
        return list(TenantSso.objects.select_related("tenant").filter(enabled=True, issuer="").order_by("tenant__slug"))


def _plan(provider: Provider, user, claims: dict) -> list[_Target]:
    """Per tenant the sign-in maps into: whether the user is a member, and the role to give."""
    member_of = _tenant_ids_of(user) if user is not None else set()
    plan = []
    for sso in _targets(provider):
        existing = sso.tenant_id in member_of
        if existing:
            role = role_from_claims(sso=sso, claims=claims) if sso.role_claim else None
        elif sso.create_memberships:
            role = role_from_claims(sso=sso, claims=claims)
        else:
            continue
        plan.append(_Target(tenant=sso.tenant, sso=sso, role=role, existing=existing))
    return plan


def _groups_sync(target: _Target, user, claims: dict) -> None:
    names = set(claim_values(claims, target.sso.groups_claim))
    for group in AccessGroup.objects.for_tenant(target.tenant).order_by("name"):
        access_group_member_set(tenant=target.tenant, group=group, user=user, member=group.name in names)


def signin_complete(*, provider: Provider, claims: dict):
    """The user that ``claims`` (a verified ID token's, with the userinfo's) sign in as, after
    giving them the memberships, roles and access groups the claims map to (module docstring).
    Returns ``(user, tenant)``: ``tenant`` is the provider's tenant (``None`` for the
    installation's), the one the portal then acts in.

    ``SigninRefused`` (nothing created or changed) for an account that may not be linked, an
    inactive account, or a sign-in that leaves the user without a membership.
    """
    User = get_user_model()
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise SigninRefused("The provider's answer names no subject.", code="invalid_token", status=400)
    user = _account_for(provider, claims)
    if user is not None and not user.is_active:
        raise SigninRefused("This account is deactivated here.", code="inactive", user=user)
    plan = _plan(provider, user, claims)
    if provider.tenant is not None:
        member = any(t.tenant.pk == provider.tenant.pk for t in plan)
    else:
        member = bool(plan) or (user is not None and bool(_tenant_ids_of(user)))
    if not member:
        where = provider.tenant.name if provider.tenant is not None else "any team here"
        raise SigninRefused(
            f"You signed in at {provider.name}, but your account is not a member of {where}. "
            "Ask the team's admin to add you.",
            code="no_membership",
            user=user,
        )
    with audit_actor(SSO_ACTOR), transaction.atomic():
        if user is None:
            email = _email_verified(claims)
            user = User._default_manager.create(
                username=_username_new(claims),
                email=email,
                first_name=str(claims.get("given_name") or "")[:150],
                last_name=str(claims.get("family_name") or "")[:150],
            )
            user.set_unusable_password()
            user.save(update_fields=["password"])
        with _provider_scope(provider):
            identity, _ = Identity.objects.get_or_create(
                issuer=provider.issuer, subject=claims["sub"], tenant=provider.tenant, defaults={"user": user}
            )
            identity.last_signed_in_at = timezone.now()
            identity.save(update_fields=["last_signed_in_at"])
        for target in plan:
            with tenant_context(target.tenant):
                if target.role is not None:
                    membership_save(tenant=target.tenant, user=user, role=target.role)
                if target.sso.groups_claim:
                    _groups_sync(target, user, claims)
    return user, provider.tenant


# ---- refusals: throttled, and recorded once per window ------------------------------------------

THROTTLES = "throttles"  # the cache alias (config/settings.py): Redis when REDIS_URL is set


def _throttle_key(provider: Provider, request, *parts: str) -> str:
    where = f"tenant-{provider.tenant.pk}" if provider.tenant is not None else "installation"
    address = (client_ip(request) if request is not None else None) or "unknown"
    return ":".join(("kb-sso-refused", where, address, *parts))


def _window_count_up(key: str) -> int:
    """Count one more in ``key``'s window (``KB_SSO_REFUSAL_WINDOW_S`` from its first); the count."""
    cache, window = caches[THROTTLES], settings.KB_SSO_REFUSAL_WINDOW_S
    if cache.add(key, 1, timeout=window):
        return 1
    try:
        return cache.incr(key)
    except ValueError:  # the window ended meanwhile
        cache.add(key, 1, timeout=window)
        return 1


def signin_throttle_check(*, provider: Provider, request) -> None:
    """``SigninRefused`` (``throttled``, 429) when ``request``'s client address has had
    ``KB_SSO_REFUSAL_LIMIT`` sign-ins at ``provider`` refused in the current window
    (``KB_SSO_REFUSAL_WINDOW_S`` from the first): its sign-ins there wait for the window's end.
    Called before any work (no fetch, no code exchange)."""
    count = caches[THROTTLES].get(_throttle_key(provider, request, "count")) or 0
    if count >= settings.KB_SSO_REFUSAL_LIMIT:
        minutes = max(1, round(settings.KB_SSO_REFUSAL_WINDOW_S / 60))
        raise SigninRefused(
            f"Too many sign-ins through {provider.name} from your address were refused just now. "
            f"Wait up to {minutes} minute{'s' if minutes != 1 else ''}, then try again, or sign in with your password.",
            code="throttled",
            status=429,
        )


def signin_failure_record(
    *, provider: Provider, reason: str, request=None, user=None, claims: dict | None = None
) -> bool:
    """Count a refused sign-in through ``provider`` against ``request``'s client address
    (``signin_throttle_check``; a ``throttled`` refusal is not counted again) and record it
    (``signin.failed``, by ``anonymous``) unless the same provider, address and reason was already
    recorded in the current window (``KB_SSO_REFUSAL_WINDOW_S``): in the provider's tenant, or for
    the installation's, in each tenant of ``user`` (none for no user). ``changes``: the provider,
    its issuer, ``reason`` and, when known, the account's subject and name at the provider.
    Returns whether it was recorded."""
    if reason != "throttled":
        _window_count_up(_throttle_key(provider, request, "count"))
    if _window_count_up(_throttle_key(provider, request, "recorded", reason)) > 1:
        return False
    changes = {**provider.audit_details(), "reason": reason}
    claims = claims or {}
    if claims.get("sub"):
        changes["subject"] = str(claims["sub"])[:255]
    username = claims.get("preferred_username") or claims.get("email")
    if username:
        changes["username"] = str(username)[:150]
    shown = str(changes.get("username") or changes.get("subject") or "")
    details = {"object_type": "user", "object_id": "" if user is None else str(user.pk), "object_repr": shown}
    with audit_actor(ANONYMOUS):
        if provider.tenant is not None:
            audit_record(action=SIGNIN_FAILED, tenant=provider.tenant, request=request, changes=changes, **details)
        else:
            audit_record_user_tenants(action=SIGNIN_FAILED, user=user, request=request, changes=changes, **details)
    return True


# ---- the operator's settings --------------------------------------------------------------------

EDITABLE = [
    "enabled",
    "name",
    "issuer",
    "client_id",
    "scopes",
    "role_claim",
    "role_values",
    "default_role",
    "groups_claim",
    "create_memberships",
    "allow_other_tenants_members",
]


def tenant_sso_check(sso: TenantSso) -> None:
    """``InvalidInput`` naming the field when ``sso`` cannot work: a bad issuer URL, an issuer
    without client id or secret, scopes without openid, a role map that is not an object of
    claim values to roles, an unknown default role."""
    if sso.issuer:
        problem = issuer_problem(sso.issuer)
        if problem:
            raise InvalidInput(f"issuer: {problem}", code="invalid_issuer")
        if not sso.client_id or not sso.client_secret:
            raise InvalidInput(
                "A provider of the tenant's own needs a client id and a client secret.", code="invalid_sso"
            )
    problem = scopes_problem(sso.scopes or "")
    if problem:
        raise InvalidInput(f"scopes: {problem}", code="invalid_sso")
    values = sso.role_values
    if not isinstance(values, dict) or not all(isinstance(k, str) and v in ROLE_ORDER for k, v in values.items()):
        raise InvalidInput(
            'role_values must map claim values to roles, e.g. {"kb-admins": "admin"}; roles: ' + ", ".join(ROLE_ORDER),
            code="invalid_sso",
        )
    if sso.default_role not in ROLE_ORDER:
        raise InvalidInput(f"default_role must be one of {', '.join(ROLE_ORDER)}.", code="invalid_sso")


def _shown(sso: TenantSso) -> dict:
    return {name: getattr(sso, name) for name in EDITABLE}


def tenant_sso_save(*, tenant: Tenant, values: dict, client_secret: str | None = None) -> TenantSso:
    """Create or change ``tenant``'s single sign-on: ``values`` holds any of ``EDITABLE``;
    ``client_secret`` replaces the secret when given (``""`` clears it). The issuer is stored
    normalized. Recorded in the audit log (``tenant_sso.created``, ``tenant_sso.changed``: each
    field before and after, the secret only as ``"changed"``). ``InvalidInput`` as
    ``tenant_sso_check``, or for an unknown field; nothing is stored then.
    """
    unknown = set(values) - set(EDITABLE)
    if unknown:
        raise InvalidInput(f"Unknown settings: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        sso = TenantSso.objects.for_tenant(tenant).select_for_update().first()
        created = sso is None
        sso = sso or TenantSso(tenant=tenant)
        before = _shown(sso) if not created else dict.fromkeys(EDITABLE)
        for name, value in values.items():
            setattr(sso, name, value)
        sso.issuer = issuer_normalize(sso.issuer)
        if sso.uses_installation_provider:  # the installation's provider signs in any account
            sso.client_id, client_secret = "", ""
            sso.allow_other_tenants_members = False
        secret_changed = client_secret is not None and client_secret != sso.client_secret
        if client_secret is not None:
            sso.client_secret = client_secret
        tenant_sso_check(sso)
        sso.save()
        changes = audit_fields_diff(before, _shown(sso), EDITABLE)
        if secret_changed:
            changes["client_secret"] = "changed"
        if created or changes:
            action = "tenant_sso.created" if created else "tenant_sso.changed"
            audit_record(action=action, tenant=tenant, obj=sso, changes=changes)
    return sso


def tenant_sso_remove(*, tenant: Tenant) -> None:
    """Remove ``tenant``'s single sign-on: its provider's button and URLs are gone, and the
    installation's provider no longer maps into it. Recorded (``tenant_sso.deleted``).
    ``NotFound`` when it has none. Memberships, and links of accounts to provider accounts, stay."""
    with transaction.atomic():
        sso = TenantSso.objects.for_tenant(tenant).first()
        if sso is None:
            raise NotFound(f"{tenant.slug} has no single sign-on.")
        audit_record(action="tenant_sso.deleted", tenant=tenant, obj=sso, changes={"issuer": [sso.issuer, None]})
        sso.delete()
