"""Serializers of the sources API (``knowledge.source_apis``): a source in and out, its sync runs,
the sync request and the "test connection" answer.

A service source's ``secret`` is write-only: it is read from a request and never written into a
response; ``has_secret`` says whether one is stored.
"""

from __future__ import annotations

import re
from datetime import timedelta

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from core.errors import InvalidInput
from knowledge.models import Source, SyncRun
from knowledge.services.sources import duration_parse

# Bounds of the database columns, so an oversized number is a 400 rather than a database error.
_MAX_POSITIVE_INT = 2_147_483_647
# A schedule as a string of (ASCII) digits: seconds, as a JSON number would be.
_SECONDS = re.compile(r"\d+(?:\.\d+)?", re.ASCII)

_FILE_KINDS = ", ".join(Source.FILE_KINDS)
_SERVICE_KINDS = ", ".join(Source.SERVICE_KINDS)
_MANUAL_KINDS = ", ".join(kind for kind in Source.Kind.values if kind not in Source.SYNCED_KINDS)


def seconds(value: timedelta | None) -> int | float | None:
    """A schedule as seconds (a whole number when it is one), ``None`` without a schedule."""
    if value is None:
        return None
    total = value.total_seconds()
    return int(total) if total.is_integer() else total


@extend_schema_field(
    {
        "oneOf": [{"type": "number"}, {"type": "string"}],
        "nullable": True,
        "description": 'How often: seconds (3600), or a duration such as "30m", "1h", "1d", "1w"; '
        'null, "", "off" or 0 = none. At least a minute.',
        "example": "1h",
    }
)
class ScheduleField(serializers.Field):
    """A schedule in: seconds (a number, or a string of digits) or a duration such as ``"1h"``
    (``knowledge.services.sources.duration_parse``, whose ``InvalidInput`` is the 400, naming the
    field it was given for)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data) -> timedelta | None:
        if isinstance(data, str) and _SECONDS.fullmatch(data.strip()):
            data = float(data.strip())
        try:
            return duration_parse(data)
        except InvalidInput as exc:
            if self.field_name in (None, "sync_every"):
                raise
            raise InvalidInput(
                exc.message.replace("sync_every", self.field_name), code=f"invalid_{self.field_name}"
            ) from None

    def to_representation(self, value):
        return seconds(value)


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": True,
        "description": 'The kind\'s options, e.g. {"channels": ["general"]} for Slack; see docs/connectors.md.',
        "example": {"channels": ["general"]},
    }
)
class OptionsField(serializers.JSONField):
    """A service source's options: any JSON here; ``source_check`` says when it is not an object."""


@extend_schema_serializer(component_name="SyncRunSummary")
class LastRunSerializer(serializers.Serializer):
    """A source's newest sync run, in short."""

    @extend_schema_serializer(component_name="SyncRunCounts")
    class CountsSerializer(serializers.Serializer):
        new = serializers.IntegerField()
        updated = serializers.IntegerField()
        unchanged = serializers.IntegerField()
        deleted = serializers.IntegerField()
        failed = serializers.IntegerField()

    id = serializers.IntegerField()
    scope = serializers.ChoiceField(choices=SyncRun.Scope.choices)
    status = serializers.ChoiceField(choices=SyncRun.Status.choices)
    counts = serializers.SerializerMethodField()
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField()

    @extend_schema_field(CountsSerializer)
    def get_counts(self, run: SyncRun) -> dict:
        return run.counts()


@extend_schema_serializer(component_name="Source")
class SourceOutputSerializer(serializers.Serializer):
    """A source with its connector settings, its live document count and its newest sync run.
    A service source's secret is never shown: ``has_secret`` says whether one is stored."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Source.Kind.choices)
    location = serializers.CharField()
    branch = serializers.CharField()
    include = serializers.ListField(child=serializers.CharField())
    exclude = serializers.ListField(child=serializers.CharField())
    text_format = serializers.CharField()
    uri_prefix = serializers.CharField()
    page_limit = serializers.IntegerField()
    crawl_delay_s = serializers.FloatField()
    sync_every = serializers.SerializerMethodField(help_text="Seconds between scheduled syncs; null = only by hand.")
    options = serializers.JSONField(help_text="A service source's options; {} for the other kinds.")
    perm_every = serializers.SerializerMethodField(
        help_text="A service source: seconds between permission syncs; null = the server's default."
    )
    has_secret = serializers.SerializerMethodField(
        help_text="Whether a token or key is stored (service sources); the secret itself is never returned."
    )
    reliability = serializers.FloatField()
    half_life_days = serializers.FloatField(allow_null=True)
    versions_kept = serializers.IntegerField(allow_null=True)
    last_synced_at = serializers.DateTimeField(allow_null=True)
    last_perm_synced_at = serializers.DateTimeField(
        allow_null=True, help_text="A service source: when its last successful permission sync finished."
    )
    document_count = serializers.IntegerField(help_text="Live documents (not deleted at the source) you may see.")
    last_run = serializers.SerializerMethodField()

    def get_sync_every(self, source: Source) -> float | None:
        return seconds(source.sync_every)

    def get_perm_every(self, source: Source) -> float | None:
        return seconds(source.perm_every)

    def get_has_secret(self, source: Source) -> bool:
        return bool(source.secret)

    @extend_schema_field(LastRunSerializer(allow_null=True))
    def get_last_run(self, source: Source) -> dict | None:
        # ``last_runs`` is prefetched by the selectors (source_list, source_get): no extra query.
        runs = getattr(source, "last_runs", None)
        return LastRunSerializer(runs[0]).data if runs else None


@extend_schema_serializer(component_name="SyncRun")
class SyncRunOutputSerializer(serializers.Serializer):
    """One sync of a source: its counts, the documents that failed alone (``errors``), and why the
    whole run failed (``error``: then nothing of the source changed). A service source's run says
    what it synced (``scope``) and, when it synced permissions, their counts (``permissions``)."""

    id = serializers.IntegerField()
    trigger = serializers.ChoiceField(choices=SyncRun.Trigger.choices)
    scope = serializers.ChoiceField(
        choices=SyncRun.Scope.choices,
        help_text="all (content and permissions), content or permissions; always all for folder, web and git.",
    )
    status = serializers.ChoiceField(choices=SyncRun.Status.choices)
    new = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    deleted = serializers.IntegerField()
    failed = serializers.IntegerField()
    errors = serializers.JSONField(
        help_text='[{"document", "error"}] for each document that failed alone, and for each whose '
        "scanned pages went over the OCR page budget (the pages not read).",
    )
    error = serializers.CharField()
    permissions = serializers.JSONField(
        help_text='A service source\'s permission sync: {"groups", "public", "restricted", "unreadable" '
        '(documents whose readers could not be read: admins only), "rules_added", "rules_removed", '
        '"source_users_not_members"}; {} when the run synced no permissions.'
    )
    progress = serializers.JSONField(
        help_text='While it runs: {"stage": "listing"}, then {"stage": "ingesting", "items": files to read, '
        '"done": files read, "chunks": chunks stored, "chunks_per_s", "eta_s": seconds left (null before '
        'the first file is in)}, then {"stage": "deleting"}; {} once it ended.'
    )
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


@extend_schema_serializer(component_name="SourceInput")
class SourceInputSerializer(serializers.Serializer):
    """The settable fields of a source (POST: ``name`` and ``kind`` required; PATCH: any subset).

    Types are checked here; the rules (a location of the right shape per kind, a schedule of at
    least a minute, a service's secret, ranges) are the service's, with their own messages."""

    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(
        choices=Source.Kind.choices,
        error_messages={"invalid_choice": f"kind must be one of {', '.join(Source.Kind.values)}, not {{input}}."},
        help_text=f"{_FILE_KINDS} sources are synced from location; {_SERVICE_KINDS} are read from the "
        f"service's API with secret (and its permissions); {_MANUAL_KINDS} are filled by hand.",
    )
    location = serializers.CharField(
        required=False,
        max_length=2000,
        allow_blank=True,
        help_text="folder: an absolute path the workers can read; web: an http(s) start URL or sitemap.xml; "
        "git: a repository URL or path; a service: its API's base URL (empty = the public API, e.g. "
        "https://slack.com/api/; confluence and jira: your site, e.g. https://example.atlassian.net).",
    )
    branch = serializers.CharField(
        required=False, max_length=200, allow_blank=True, help_text="git: empty = the default branch."
    )
    include = serializers.ListField(required=False, child=serializers.CharField(max_length=500), max_length=100)
    exclude = serializers.ListField(required=False, child=serializers.CharField(max_length=500), max_length=100)
    text_format = serializers.ChoiceField(choices=["", "rst", "md", "txt"], required=False, allow_blank=True)
    uri_prefix = serializers.CharField(max_length=1000, required=False, allow_blank=True)
    page_limit = serializers.IntegerField(required=False, max_value=_MAX_POSITIVE_INT)
    crawl_delay_s = serializers.FloatField(required=False, max_value=86_400)
    sync_every = ScheduleField(required=False)
    secret = serializers.CharField(
        required=False,
        write_only=True,
        allow_blank=True,
        max_length=20_000,
        style={"input_type": "password"},
        help_text="A service: the token or key it is read with. Write-only: stored encrypted, never returned "
        "(has_secret says whether one is stored); left out of a PATCH, the stored one is kept.",
    )
    options = OptionsField(required=False)
    perm_every = ScheduleField(
        required=False,
        help_text="A service: how often its permissions (readers, groups, deletions) are synced, as sync_every; "
        "null = the server's default.",
    )
    reliability = serializers.FloatField(required=False)
    half_life_days = serializers.FloatField(required=False, allow_null=True)
    versions_kept = serializers.IntegerField(required=False, allow_null=True, max_value=_MAX_POSITIVE_INT)


@extend_schema_serializer(component_name="SyncRequest")
class SyncInputSerializer(serializers.Serializer):
    """What a sync reads (service sources); the other kinds always sync everything."""

    scope = serializers.ChoiceField(
        choices=SyncRun.Scope.choices,
        default=SyncRun.Scope.ALL,
        error_messages={"invalid_choice": f"scope is one of {', '.join(SyncRun.Scope.values)}, not {{input}}."},
        help_text="all (default): content and permissions; content: what changed since the last sync; "
        "permissions: readers, groups and deletions only.",
    )


@extend_schema_serializer(component_name="SourceTestResult")
class SourceTestOutputSerializer(serializers.Serializer):
    """The answer of "test connection": what the credential can see, or why the service refused."""

    ok = serializers.BooleanField(help_text="Whether the service accepted the credential.")
    code = serializers.CharField(
        required=False, help_text="When not ok: credential_rejected, source_unreachable, secret_missing, ..."
    )
    message = serializers.CharField(help_text="What the credential can see, or why it cannot read.")
