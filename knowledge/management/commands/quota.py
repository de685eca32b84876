import json
import math

from django.core.management.base import CommandError

from core.audit import OPERATOR_CLI, audit_actor
from core.commands import TenantCommand
from knowledge.quotas.limits import MB, QUOTA_BY_NAME, quota_set
from knowledge.quotas.usage import quota_usage

# Option -> (quota name, how many of the quota's unit one of the option's is).
OPTIONS = {
    "documents": ("documents", 1),
    "stored_mb": ("stored_bytes", MB),
    "chunks": ("chunks", 1),
    "sources": ("sources", 1),
    "syncs_per_day": ("syncs_per_day", 1),
    "llm_tokens_per_day": ("llm_tokens_per_day", 1),
}


class Command(TenantCommand):
    help = (
        "Show a tenant's usage against its quotas, and set its limits: manage.py quota SLUG "
        "[--documents N] [--stored-mb N] [--chunks N] [--sources N] [--syncs-per-day N] "
        "[--llm-tokens-per-day N] [--json]. A value is a number (0 allows none), 'default' (the "
        "installation's KB_QUOTA_* applies) or 'unlimited'. Every change is recorded in the audit log."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="the tenant's slug")
        value = "N|default|unlimited"
        parser.add_argument("--documents", metavar=value, help="live documents")
        parser.add_argument(
            "--stored-mb", metavar=value, help="megabytes (MiB) of stored text (every version) and original files"
        )
        parser.add_argument("--chunks", metavar=value, help="body chunks of every stored version")
        parser.add_argument("--sources", metavar=value, help="sources of any kind")
        parser.add_argument("--syncs-per-day", metavar=value, help="sync runs started in 24 hours")
        parser.add_argument("--llm-tokens-per-day", metavar=value, help="LLM tokens of every LLM call in 24 hours")
        parser.add_argument("--json", action="store_true", help="print the changes and the usage as JSON")

    def handle(self, *args, **o):
        tenant = self.tenant(o["tenant"])
        limits = {OPTIONS[option][0]: self._value(option, o[option]) for option in OPTIONS if o.get(option) is not None}
        with audit_actor(OPERATOR_CLI):
            changes = quota_set(tenant=tenant, limits=limits) if limits else {}
        usage = quota_usage(tenant=tenant)
        if o["json"]:
            quotas = {name: {**quota.as_dict(), "own": quota.own} for name, quota in usage.items()}
            self.stdout.write(json.dumps({"tenant": tenant.slug, "changed": changes, "quotas": quotas}))
            return
        for field, (before, after) in changes.items():
            self.stdout.write(
                f"Changed {field}: {_shown(before, default='default')} -> {_shown(after, default='default')}"
            )
        self.stdout.write(f"Quotas of {tenant.slug} (a limit marked * is the installation default):")
        self.stdout.write(f"  {'quota':<28} {'used':>16} {'limit':>18} {'remaining':>16}")
        for quota in usage.values():
            limit = quota.limit_text + ("" if quota.own else "*")
            remaining = "-" if quota.remaining is None else quota.remaining_text
            self.stdout.write(f"  {quota.label:<28} {quota.used_text:>16} {limit:>18} {remaining:>16}")

    @staticmethod
    def _value(option: str, text: str) -> int | str | None:
        """The option's value in the quota's unit: a number, ``None`` (the default) or an error."""
        name, scale = OPTIONS[option]
        flag = "--" + option.replace("_", "-")
        word = text.strip().lower()
        if word == "default":
            return None
        if word == "unlimited":
            default = QUOTA_BY_NAME[name].default()
            if default is not None:
                quota = QUOTA_BY_NAME[name]
                raise CommandError(
                    f"{flag} unlimited: this installation limits every tenant to {default // scale:,} by default "
                    f"({quota.setting}), and a tenant's own limit is a number; give a larger one."
                )
            return None
        try:
            number = float(word.replace(",", "").replace("_", ""))
        except ValueError:
            raise CommandError(f"{flag}: {text!r} is not a number, 'default' or 'unlimited'.") from None
        if not math.isfinite(number) or number < 0 or (scale == 1 and not number.is_integer()):
            raise CommandError(f"{flag}: {text!r} is not a whole number of at least 0.")
        return round(number * scale)


def _shown(value, *, default: str = "unlimited") -> str:
    return default if value is None else f"{value:,}"
