"""The quality gate: a change of a tenant's retrieval settings is measured before it applies.

When a tenant has judgment lists, ``config_change_propose`` records the change and queues its
evaluation; ``config_change_evaluate`` runs every list with the settings in force and with the
proposed ones, and applies the change only if no list's mean nDCG@10 falls by more than the
tenant's tolerance (``QualityPolicy``, default 0.005). A refused change keeps the old settings
until an admin overrides it (``config_change_override``), which is recorded. Without judgment
lists there is nothing to measure and the change applies at once.

Evaluating is slow I/O (embeddings, maybe LLM calls), so it runs outside any transaction; the
verdict is applied under ``select_for_update`` of the tenant, and only if the settings the change
was measured against are still the ones in force. Its LLM calls count against the tenant's daily
LLM tokens (recorded as ``quality_gate``): over the limit the queries run without the LLM.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import SYSTEM_QUALITY_GATE, audit_actor, audit_record
from core.errors import ApplicationError, InvalidInput, PermissionDenied
from core.models import Membership, Tenant
from core.queue import task_enqueue
from llm import llm_metered
from quality import task_names
from quality.models import ConfigChange
from quality.selectors import judgment_lists_to_gate, quality_tolerance
from quality.services.compare import metrics_delta
from quality.services.runs import evaluation_run
from retrieval.pipeline import pipeline_spec

logger = logging.getLogger(__name__)

GATE_METRIC = "ndcg@10"
CONFIGURING_ROLES = ("admin", "owner")


class ChangeInProgress(ApplicationError):
    code = "change_in_progress"
    status = 409


def config_admin_check(*, user, tenant: Tenant) -> None:
    """``PermissionDenied`` unless ``user`` is a superuser or an admin (or owner) of ``tenant``."""
    if getattr(user, "is_superuser", False):
        return
    allowed = Membership.objects.for_tenant(tenant).filter(user_id=user.pk, role__in=CONFIGURING_ROLES).exists()
    if not allowed:
        raise PermissionDenied("Only the tenant's admins may change its retrieval settings.")


def _proposed_clean(*, tenant: Tenant, proposed) -> dict:
    """``proposed`` checked: a non-empty JSON object of settings that ``pipeline_spec`` accepts."""
    if not isinstance(proposed, dict) or not proposed:
        raise InvalidInput('Propose the settings to change as a non-empty JSON object, e.g. {"fusion": "rrf"}.')
    if any(not isinstance(key, str) or not key for key in proposed):
        raise InvalidInput("Setting names must be non-empty strings.")
    empty = sorted(key for key, value in proposed.items() if value is None)
    if empty:
        raise InvalidInput(f"Give a value for {', '.join(empty)} (null does not reset a setting).")
    pipeline_spec(tenant=tenant, overrides=proposed)  # InvalidInput for an unknown key or a bad value
    return dict(proposed)


def _stale_changes_fail(*, tenant: Tenant) -> None:
    """Mark open changes failed whose evaluation cannot still be running (its task's time limit passed)."""
    cutoff = timezone.now() - timedelta(seconds=2 * settings.CELERY_TASK_TIME_LIMIT)
    ConfigChange.objects.for_tenant(tenant).filter(status__in=ConfigChange.OPEN, created_at__lt=cutoff).update(
        status=ConfigChange.Status.FAILED,
        error="The evaluation did not finish in time.",
        finished_at=timezone.now(),
    )


def config_change_propose(*, tenant: Tenant, user, proposed: dict) -> ConfigChange:
    """Propose new values for keys of ``tenant.retrieval_config`` (``"pipeline"`` included).

    Only admins (see ``config_admin_check``) may propose; ``InvalidInput`` for an unknown key or a
    bad value, ``ChangeInProgress`` while another change of the tenant is being evaluated. Without
    judgment lists the change applies at once (status *applied*); otherwise it is *pending* and
    its evaluation is queued once the change is committed (eagerly, without a broker, in which
    case the returned change already carries the verdict).
    """
    config_admin_check(user=user, tenant=tenant)
    proposed = _proposed_clean(tenant=tenant, proposed=proposed)
    gated = bool(judgment_lists_to_gate(tenant=tenant))
    _stale_changes_fail(tenant=tenant)
    try:
        with transaction.atomic():
            locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
            if ConfigChange.objects.for_tenant(locked).filter(status__in=ConfigChange.OPEN).exists():
                raise ChangeInProgress("Another change of the retrieval settings is being evaluated; wait for it.")
            change = ConfigChange.objects.create(
                tenant=locked,
                requested_by=user if getattr(user, "pk", None) else None,
                current_config=locked.retrieval_config or {},
                proposed_config=proposed,
                tolerance=quality_tolerance(tenant=locked),
                status=ConfigChange.Status.PENDING if gated else ConfigChange.Status.APPLIED,
                finished_at=None if gated else timezone.now(),
            )
            if gated:
                task_enqueue(task_names.CONFIG_CHANGE, change.pk)
            else:
                locked.retrieval_config = change.new_config
                locked.save(update_fields=["retrieval_config"])
            _audit_change("retrieval_settings.proposed" if gated else "retrieval_settings.changed", change, user=user)
    except IntegrityError as exc:  # a concurrent proposal won the one-open-change constraint
        raise ChangeInProgress("Another change of the retrieval settings is being evaluated; wait for it.") from exc
    tenant.refresh_from_db(fields=["retrieval_config"])
    change.refresh_from_db()
    return change


def _audit_change(action: str, change: ConfigChange, *, user=None) -> None:
    """Record ``action`` on ``change`` in the audit log, by ``user`` (default: the context's):
    ``{"settings": {key: [before, after]}, "status": ...}``."""
    settings_changed = {key: [change.current_config.get(key), value] for key, value in change.proposed_config.items()}
    audit_record(
        action=action,
        tenant=change.tenant_id,
        obj=change,
        actor=user if getattr(user, "pk", None) else None,
        changes={"settings": settings_changed, "status": change.status},
    )


def _progress(change_id: int, done: int) -> None:
    ConfigChange.objects.filter(pk=change_id).update(progress_done=done)


def _fail(change_id: int, message: str) -> None:
    ConfigChange.objects.filter(pk=change_id).update(
        status=ConfigChange.Status.FAILED, error=message[:2000], finished_at=timezone.now()
    )


def config_change_evaluate(*, change_id: int) -> ConfigChange:
    """Evaluate a pending change on every judgment list of its tenant and apply or refuse it.

    Each list runs twice through ``evaluation_run``: with the current settings (a) and with the
    proposed ones (b). ``progress_done`` counts the queries run out of ``progress_total``.
    The change is refused when a list's mean nDCG@10 drops by more than ``tolerance``; else it
    is accepted and applied. It fails (settings untouched) when evaluating fails or the tenant's
    settings changed meanwhile. A change that is not pending is returned as it is. The LLM calls
    of both runs count against the tenant's daily LLM tokens (``quality_gate``); over the limit
    they are not made and the queries run without the LLM (``degraded`` in the runs).
    """
    claimed = ConfigChange.objects.filter(pk=change_id, status=ConfigChange.Status.PENDING).update(
        status=ConfigChange.Status.EVALUATING
    )
    change = ConfigChange.objects.select_related("tenant").get(pk=change_id)
    if not claimed:
        return change
    tenant = change.tenant
    try:
        lists = judgment_lists_to_gate(tenant=tenant)
        sizes = {jl.pk: jl.judgments.count() for jl in lists}
        total = 2 * sum(sizes.values())
        ConfigChange.objects.filter(pk=change_id).update(progress_total=total)
        done = 0
        deltas: dict[str, dict] = {}
        runs: dict[str, dict] = {}
        for judgment_list in lists:
            measured = {}
            for side, overrides in (("current", change.current_config), ("proposed", change.new_config)):
                offset = done
                with llm_metered(tenant=tenant, purpose="quality_gate"):
                    measured[side] = evaluation_run(
                        judgment_list=judgment_list,
                        overrides=overrides,
                        on_query=lambda n, _total, offset=offset: _progress(change_id, offset + n),
                    )
                done += sizes[judgment_list.pk]
            deltas[judgment_list.name] = metrics_delta(measured["current"].metrics, measured["proposed"].metrics)
            runs[judgment_list.name] = {side: run.pk for side, run in measured.items()}
    except Exception as exc:  # recorded on the change: an evaluation never leaves it "evaluating"
        logger.exception("Evaluating settings change %s failed", change_id)
        _fail(change_id, exc.message if isinstance(exc, ApplicationError) else f"{type(exc).__name__}: {exc}")
        return ConfigChange.objects.get(pk=change_id)

    refused = any(d[GATE_METRIC]["delta"] < -change.tolerance for d in deltas.values() if GATE_METRIC in d)
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        change = ConfigChange.objects.select_for_update().get(pk=change_id)
        change.deltas, change.runs, change.progress_done = deltas, runs, total
        change.finished_at = timezone.now()
        if (locked.retrieval_config or {}) != change.current_config:
            change.status = ConfigChange.Status.FAILED
            change.error = "The retrieval settings changed while this change was evaluated; propose it again."
        elif refused:
            change.status = ConfigChange.Status.REFUSED
        else:
            change.status = ConfigChange.Status.ACCEPTED
            locked.retrieval_config = change.new_config
            locked.save(update_fields=["retrieval_config"])
        change.save(update_fields=["deltas", "runs", "progress_done", "finished_at", "status", "error"])
        if change.status in (ConfigChange.Status.ACCEPTED, ConfigChange.Status.REFUSED):
            with audit_actor(SYSTEM_QUALITY_GATE):
                accepted = change.status == ConfigChange.Status.ACCEPTED
                _audit_change("retrieval_settings.changed" if accepted else "retrieval_settings.refused", change)
    return change


def config_change_override(*, change_id: int, user) -> ConfigChange:
    """Apply a refused change anyway, recording who decided it and when.

    Only admins (see ``config_admin_check``); ``InvalidInput`` unless the change is refused and
    the settings it was measured against are still the ones in force.
    """
    change = ConfigChange.objects.select_related("tenant").get(pk=change_id)
    config_admin_check(user=user, tenant=change.tenant)
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=change.tenant_id)
        change = ConfigChange.objects.select_for_update().get(pk=change_id)
        if change.status != ConfigChange.Status.REFUSED:
            raise InvalidInput(
                f"Only a refused change can be overridden; this one is {change.status}.", code="not_refused"
            )
        if (locked.retrieval_config or {}) != change.current_config:
            raise InvalidInput(
                "The retrieval settings changed since this change was evaluated; propose it again.", code="stale_change"
            )
        locked.retrieval_config = change.new_config
        locked.save(update_fields=["retrieval_config"])
        change.status = ConfigChange.Status.OVERRIDDEN
        change.override_by = user
        change.override_at = timezone.now()
        change.save(update_fields=["status", "override_by", "override_at"])
        _audit_change("retrieval_settings.overridden", change, user=user)
    return change
