"""The admin's part of the audit log: what a submitted form changes, and a mixin that records
additions, changes and deletions made in an admin page (``core.audit``)."""

from __future__ import annotations

from django import forms

from core.audit import audit_record, audit_shown


def audit_form_changes(form, *, add: bool = False) -> dict:
    """What a submitted model form changes, for the audit log: ``{"field": [before, after]}`` of
    each changed field (of every filled-in field when ``add``, with ``before`` = ``None``), rows
    shown by their ``str``. Password fields are left out."""
    changes = {}
    for name in list(form.cleaned_data) if add else form.changed_data:
        field = form.fields.get(name)
        if field is None or isinstance(field.widget, forms.PasswordInput) or name not in form.cleaned_data:
            continue
        after = audit_shown(form.cleaned_data[name])
        if add:
            if after not in (None, "", [], {}):
                changes[name] = [None, after]
            continue
        before = form.initial.get(name)
        single_row = isinstance(field, forms.ModelChoiceField) and not isinstance(field, forms.ModelMultipleChoiceField)
        if single_row and before is not None and not hasattr(before, "pk"):
            before = field.queryset.model._default_manager.filter(pk=before).first() or before
        before = audit_shown(before)
        if before != after:
            changes[name] = [before, after]
    return changes


class AuditedAdminMixin:
    """Records the admin's additions, changes and deletions of its model in the audit log
    (``core.audit.audit_record``), through Django's own hooks (``log_addition``, ``log_change``,
    ``log_deletions``), so the add and change pages, list editing and the delete page and action
    are all covered. Each event names the row's tenant, the row, and what changed
    (``audit_form_changes``).

    ``audit_actions`` maps ``"created"``, ``"changed"`` and ``"deleted"`` to the action recorded;
    a verb left out is not recorded here (a service this admin calls records it).
    """

    audit_actions: dict[str, str] = {}
    audit_object_type: str = ""  # default: the model's name

    def audit_tenants(self, obj) -> list[int | None]:
        """The tenants whose log gets the event (default: the row's ``tenant_id``)."""
        return [getattr(obj, "tenant_id", None)]

    def audit_repr(self, obj) -> str:
        """How the log names the row (default: its ``str``)."""
        return str(obj)

    def audit_action(self, verb: str, obj, changes: dict) -> str | None:
        """The action recorded for ``verb`` on ``obj`` (``None``: nothing is recorded)."""
        return self.audit_actions.get(verb)

    def audit_deleted(self, obj) -> dict:
        """What the log keeps of a deleted row (``changes`` of its deletion event)."""
        return {}

    def _audit(self, verb: str, obj, changes: dict) -> None:
        action = self.audit_action(verb, obj, changes)
        if not action:
            return
        for tenant_id in self.audit_tenants(obj):
            audit_record(
                action=action,
                tenant=tenant_id,
                obj=obj,
                object_type=self.audit_object_type,
                object_repr=self.audit_repr(obj),
                changes=changes,
            )

    def save_model(self, request, obj, form, change):
        obj._audit_changes = audit_form_changes(form, add=not change)
        super().save_model(request, obj, form, change)

    def log_addition(self, request, obj, message):
        entry = super().log_addition(request, obj, message)
        self._audit("created", obj, getattr(obj, "_audit_changes", {}))
        return entry

    def log_change(self, request, obj, message):
        entry = super().log_change(request, obj, message)
        changes = getattr(obj, "_audit_changes", None)
        if changes:  # "Save" without a change records nothing
            self._audit("changed", obj, changes)
        return entry

    def log_deletions(self, request, queryset):
        # Called before the rows are deleted, inside the delete page's transaction.
        for obj in queryset:
            self._audit("deleted", obj, self.audit_deleted(obj))
        return super().log_deletions(request, queryset)
