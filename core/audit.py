"""The audit log: every security-relevant action, recorded append-only (``core.AuditEvent``).

Services call ``audit_record`` where the action happens, so every way in (API, portal, admin,
CLI, tasks) is recorded once; the Django admin's own additions, changes and deletions of the
audited models are recorded by ``core.admin.AuditedAdminMixin``, and sign-ins by the receivers
of django.contrib.auth's signals here (connected by ``core.apps``). What is recorded, and who
reads it: ``docs/audit.md``.

Who acted and from where come from the context, in this order: an explicit ``actor``; a label
set with ``audit_actor`` (``OPERATOR_CLI`` around every management command, see
``core.commands``; ``SYSTEM_SCHEDULE`` for Celery beat's work); the request's signed-in user and
client address (``AuditContextMiddleware`` keeps the request, and its user is read when the event
is written, after DRF has authenticated a token); else ``SYSTEM``.

The table refuses UPDATE and DELETE in the database itself (a trigger, whoever runs them; the
app role ``kb_app`` may only SELECT and INSERT it): migration ``core.0004``.
"""

from __future__ import annotations

import contextvars
import ipaddress
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import QuerySet

from core.models import AuditEvent, Membership, Tenant
from core.rls import rls_bypass

SYSTEM = "system"
SYSTEM_SCHEDULE = "system (schedule)"
SYSTEM_QUALITY_GATE = "system (quality gate)"
OPERATOR_CLI = "operator (CLI)"
ANONYMOUS = "anonymous"

# Sign-ins (the portal's and the admin's forms; django.contrib.auth's signals).
SIGNIN_SUCCEEDED = "signin.succeeded"
SIGNIN_FAILED = "signin.failed"
# A sign-in made another way than the password form (single sign-on: ``sso.views``) names how in
# this attribute of the user it passes to ``login()``, a dict the event keeps as its ``changes``.
SIGNIN_DETAILS = "audit_signin_details"

_request: contextvars.ContextVar = contextvars.ContextVar("kb_audit_request", default=None)
_actor_label: contextvars.ContextVar[str | None] = contextvars.ContextVar("kb_audit_actor", default=None)


class AuditContextMiddleware:
    """Keeps the current request for ``audit_record`` (its user and client address). Place it
    after ``AuthenticationMiddleware``; a request never inherits an ``audit_actor`` label (e.g.
    of the ``demo`` command that serves it)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _request.set(request)
        label = _actor_label.set(None)
        try:
            return self.get_response(request)
        finally:
            _actor_label.reset(label)
            _request.reset(token)


@contextmanager
def audit_actor(label: str) -> Iterator[None]:
    """Events recorded inside are by ``label`` (e.g. ``OPERATOR_CLI``), whatever the request."""
    token = _actor_label.set(label)
    try:
        yield
    finally:
        _actor_label.reset(token)


def client_ip(request) -> str | None:
    """The request's client address: ``REMOTE_ADDR`` (what django-axes counts too; a reverse proxy
    in front must pass the client's address on, ``docs/deployment.md``), ``None`` when it is
    missing or not an IP address."""
    address = ((getattr(request, "META", None) or {}).get("REMOTE_ADDR") or "").strip()
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def _actor(request, actor) -> tuple[object | None, str]:
    """(user or None, label) of whoever acts now."""
    label = _actor_label.get()
    if actor is not None:
        return actor, label or actor.get_username()
    if label:
        return None, label
    user = getattr(request, "user", None) if request is not None else None
    if user is not None and getattr(user, "is_authenticated", False):
        return user, user.get_username()
    return None, SYSTEM


class _ChangesEncoder(DjangoJSONEncoder):
    """Dates, decimals and durations as Django writes them; model rows and anything else as ``str``."""

    def default(self, o):
        try:
            return super().default(o)
        except TypeError:
            return str(o)


def _jsonable(changes: dict | None) -> dict:
    if not changes:
        return {}
    return json.loads(json.dumps(changes, cls=_ChangesEncoder))


def audit_record(
    *,
    action: str,
    tenant: Tenant | int | None = None,
    obj=None,
    changes: dict | None = None,
    actor=None,
    request=None,
    object_type: str = "",
    object_id: str = "",
    object_repr: str = "",
) -> AuditEvent:
    """Append one event: ``action`` (``<object>.<verb>``, e.g. ``source.created``) in ``tenant``
    (a ``Tenant``, its id, or ``None`` for an installation-wide action) on ``obj`` (a model
    instance: its type, id and ``str``; or give ``object_type``/``object_id``/``object_repr``),
    with ``changes`` (``{"field": [before, after]}`` or details; values that JSON cannot hold are
    written as text).

    ``actor`` (a user) and ``request`` default to the context (module docstring). Long values are
    cut to the columns' lengths. The row is written outside row-level security (an event may name
    no tenant, e.g. a failed sign-in), as the only write this bypass allows; inside a transaction
    it is rolled back with it, so an action that did not happen leaves no event. Returns the
    stored event.
    """
    request = request if request is not None else _request.get()
    user, label = _actor(request, actor)
    if obj is not None:
        object_type = object_type or obj._meta.model_name
        object_id = object_id or ("" if obj.pk is None else str(obj.pk))
        object_repr = object_repr or str(obj)
    tenant_id = tenant.pk if isinstance(tenant, Tenant) else tenant
    with rls_bypass():
        return AuditEvent.objects.create(
            tenant_id=tenant_id,
            actor_id=getattr(user, "pk", None),
            actor_label=label[:200],
            action=action[:64],
            object_type=object_type[:64],
            object_id=str(object_id)[:64],
            object_repr=object_repr[:300],
            changes=_jsonable(changes),
            client_ip=client_ip(request) if request is not None else None,
        )


def audit_record_user_tenants(*, action: str, user, **kwargs) -> list[AuditEvent]:
    """``audit_record`` once in each tenant ``user`` (a user, or ``None``) belongs to, so each
    tenant's admins see it; once with no tenant for a user of none (or ``None``). ``kwargs`` are
    ``audit_record``'s. Returns the events, one per tenant."""
    tenant_ids: list[int] = []
    if user is not None and getattr(user, "pk", None) is not None:
        with rls_bypass():  # a user's memberships span tenants
            tenant_ids = list(
                Membership.objects.filter(user_id=user.pk).order_by("tenant_id").values_list("tenant_id", flat=True)
            )
    return [audit_record(action=action, tenant=tenant_id, **kwargs) for tenant_id in tenant_ids or [None]]


# ---- sign-ins (receivers of django.contrib.auth's signals) -----------------------------------


def _signed_in(sender, request=None, user=None, **kwargs) -> None:
    """``user_logged_in``: a sign-in, in each of the user's tenants; ``changes`` are the user's
    ``SIGNIN_DETAILS`` (e.g. the single sign-on provider), if any."""
    if user is None:
        return
    changes = getattr(user, SIGNIN_DETAILS, None)
    audit_record_user_tenants(
        action=SIGNIN_SUCCEEDED, user=user, actor=user, request=request, obj=user, changes=changes
    )


def _sign_in_failed(sender, credentials=None, request=None, **kwargs) -> None:
    """``user_login_failed`` (also sent when django-axes refuses a locked-out attempt): in each
    tenant of the account the username names, or with no tenant for an unknown username. The
    actor is unknown (``ANONYMOUS``); the object is the account tried."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    username = str((credentials or {}).get(User.USERNAME_FIELD) or "").replace("\x00", "\ufffd")[:150]
    user = User._default_manager.filter(**{User.USERNAME_FIELD: username}).first() if username else None
    changes = {"username": username}
    if getattr(request, "axes_locked_out", False):
        changes["locked_out"] = True
    with audit_actor(ANONYMOUS):
        audit_record_user_tenants(
            action=SIGNIN_FAILED,
            user=user,
            request=request,
            object_type="user",
            object_id="" if user is None else str(user.pk),
            object_repr=username,
            changes=changes,
        )


def audit_connect() -> None:
    """Connect the sign-in receivers (``CoreConfig.ready``)."""
    from django.contrib.auth.signals import user_logged_in, user_login_failed

    user_logged_in.connect(_signed_in, dispatch_uid="kb_audit_signed_in")
    user_login_failed.connect(_sign_in_failed, dispatch_uid="kb_audit_sign_in_failed")


# ---- reading the log --------------------------------------------------------------------------


def audit_event_list(
    *,
    tenant: Tenant | int,
    actor: str = "",
    action: str = "",
    object_type: str = "",
    object_id: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditEvent]:
    """The tenant's events, newest first, filtered by what is given: ``actor`` (the actor's label:
    a username, ``operator (CLI)``, ``system``...), ``action`` (exact, or a prefix when it ends
    with ``.``, e.g. ``source.``), ``object_type`` and ``object_id`` (exact), ``since`` (at or
    after) and ``until`` (before), aware datetimes."""
    events = AuditEvent.objects.for_tenant(tenant)
    if actor:
        events = events.filter(actor_label=actor)
    if action:
        events = events.filter(action__startswith=action) if action.endswith(".") else events.filter(action=action)
    if object_type:
        events = events.filter(object_type=object_type)
    if object_id:
        events = events.filter(object_id=object_id)
    if since is not None:
        events = events.filter(created_at__gte=since)
    if until is not None:
        events = events.filter(created_at__lt=until)
    return events.order_by("-created_at", "-id")


# ---- what changed -----------------------------------------------------------------------------


def audit_shown(value):
    """``value`` as the log shows it: a row as its ``str``, several rows as a sorted list of
    those, anything else as it is."""
    if isinstance(value, models.Model):
        return str(value)
    if isinstance(value, (QuerySet, list, tuple, set, frozenset)):
        return sorted((str(v) if isinstance(v, models.Model) else v for v in value), key=str)
    return value


def audit_fields_diff(before: dict, after: dict, fields: Iterable[str]) -> dict:
    """``{"field": [before, after]}`` for each of ``fields`` whose value differs (``audit_shown``)."""
    changes = {}
    for name in fields:
        old, new = audit_shown(before.get(name)), audit_shown(after.get(name))
        if old != new:
            changes[name] = [old, new]
    return changes
