"""REST API of a tenant's sources: list, create, change and delete them, sync them, follow their runs.

Any member may read the sources they may see (``knowledge.access``: a restricted source not
granted to them is left out, and its id is a 404) and their sync runs; only the tenant's owners
and admins may create, change, delete or sync one (403 otherwise). Another tenant's source id is
a 404 for everyone: an id reveals nothing. Views are thin: checks live in
``knowledge.services.sources`` and ``knowledge.services.sync``, whose ``ApplicationError``s
``core.api.api_exception_handler`` turns into ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, BoundedLimitOffsetPagination
from core.errors import InvalidInput, PermissionDenied
from core.memberships import membership_for_request, tenant_for_request
from core.models import Membership
from knowledge.models import Source, SyncRun
from knowledge.selectors import source_get, source_list, source_sync_run_get, sync_run_list
from knowledge.services.sources import duration_parse, source_create, source_delete, source_update
from knowledge.services.sync import sync_run_request

MANAGING_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)

# Bounds of the database columns, so an oversized number is a 400 rather than a database error.
_MAX_POSITIVE_INT = 2_147_483_647
# sync_every as a string of (ASCII) digits: seconds, as a JSON number would be.
_SECONDS = re.compile(r"\d+(?:\.\d+)?", re.ASCII)


def _admin_membership(request) -> Membership:
    """The request's membership if it may manage sources (owners, admins); ``PermissionDenied`` otherwise."""
    membership = membership_for_request(request)
    if membership.role not in MANAGING_ROLES:
        raise PermissionDenied("Only the tenant's admins may create, change, delete or sync sources.")
    return membership


def _seconds(value: timedelta | None) -> int | float | None:
    """A schedule as seconds (a whole number when it is one), ``None`` without a schedule."""
    if value is None:
        return None
    seconds = value.total_seconds()
    return int(seconds) if seconds.is_integer() else seconds


@extend_schema_field(
    {
        "oneOf": [{"type": "number"}, {"type": "string"}],
        "nullable": True,
        "description": 'How often to sync: seconds (3600), or a duration such as "30m", "1h", "1d", "1w"; '
        'null, "", "off" or 0 = only by hand. At least a minute.',
        "example": "1h",
    }
)
class ScheduleField(serializers.Field):
    """``sync_every`` in: seconds (a number, or a string of digits) or a duration such as ``"1h"``
    (``knowledge.services.sources.duration_parse``, whose ``InvalidInput`` is the 400)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data) -> timedelta | None:
        if isinstance(data, str) and _SECONDS.fullmatch(data.strip()):
            data = float(data.strip())
        return duration_parse(data)

    def to_representation(self, value):
        return _seconds(value)


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
    status = serializers.ChoiceField(choices=SyncRun.Status.choices)
    counts = serializers.SerializerMethodField()
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField()

    @extend_schema_field(CountsSerializer)
    def get_counts(self, run: SyncRun) -> dict:
        return {key: getattr(run, key) for key in ("new", "updated", "unchanged", "deleted", "failed")}


@extend_schema_serializer(component_name="Source")
class SourceOutputSerializer(serializers.Serializer):
    """A source with its connector settings, its live document count and its newest sync run."""

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
    reliability = serializers.FloatField()
    half_life_days = serializers.FloatField(allow_null=True)
    versions_kept = serializers.IntegerField(allow_null=True)
    last_synced_at = serializers.DateTimeField(allow_null=True)
    document_count = serializers.IntegerField(help_text="Live documents (not deleted at the source) you may see.")
    last_run = serializers.SerializerMethodField()

    def get_sync_every(self, source: Source) -> float | None:
        return _seconds(source.sync_every)

    @extend_schema_field(LastRunSerializer(allow_null=True))
    def get_last_run(self, source: Source) -> dict | None:
        # ``last_runs`` is prefetched by the selectors (source_list, source_get): no extra query.
        runs = getattr(source, "last_runs", None)
        return LastRunSerializer(runs[0]).data if runs else None


@extend_schema_serializer(component_name="SyncRun")
class SyncRunOutputSerializer(serializers.Serializer):
    """One sync of a source: its counts, the documents that failed alone (``errors``), and why the
    whole run failed (``error``: then nothing of the source changed)."""

    id = serializers.IntegerField()
    trigger = serializers.ChoiceField(choices=SyncRun.Trigger.choices)
    status = serializers.ChoiceField(choices=SyncRun.Status.choices)
    new = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    deleted = serializers.IntegerField()
    failed = serializers.IntegerField()
    errors = serializers.JSONField(help_text='[{"document", "error"}] for each document that failed alone.')
    error = serializers.CharField()
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
    least a minute, ranges) are the service's, with their own messages."""

    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(
        choices=Source.Kind.choices,
        error_messages={"invalid_choice": f"kind must be one of {', '.join(Source.Kind.values)}, not {{input}}."},
        help_text="folder, web and git sources are synced from location; files, upload and dataset are filled by hand.",
    )
    location = serializers.CharField(
        required=False,
        max_length=2000,
        allow_blank=True,
        help_text="folder: an absolute path the workers can read; web: an http(s) start URL or sitemap.xml; "
        "git: a repository URL or path.",
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
    reliability = serializers.FloatField(required=False)
    half_life_days = serializers.FloatField(required=False, allow_null=True)
    versions_kept = serializers.IntegerField(required=False, allow_null=True, max_value=_MAX_POSITIVE_INT)


def _source_input(request, *, partial: bool) -> dict:
    """The request's source fields, checked for type; an unknown field is a 400 (a typo is never
    silently ignored)."""
    if isinstance(request.data, Mapping):
        unknown = sorted(set(request.data) - set(SourceInputSerializer().fields))
        if unknown:
            raise InvalidInput(
                f"Unknown source field(s): {', '.join(unknown)}. "
                f"Settable: {', '.join(SourceInputSerializer().fields)}.",
                code="unknown_field",
            )
    serializer = SourceInputSerializer(data=request.data, partial=partial)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _run_location(run: SyncRun) -> str:
    return reverse("api:source-run-detail", args=[run.source_id, run.pk])


class SourceListApi(APIView):
    """List the tenant's sources you may see, or create one (admins)."""

    OutputSerializer = SourceOutputSerializer
    InputSerializer = SourceInputSerializer
    pagination_class = BoundedLimitOffsetPagination

    @extend_schema(operation_id="sources_list", responses={200: OutputSerializer(many=True), **ERRORS})
    def get(self, request):
        tenant = tenant_for_request(request)
        sources = source_list(tenant=tenant, user=request.user)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(sources, request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)

    @extend_schema(operation_id="sources_create", request=InputSerializer, responses={201: OutputSerializer, **ERRORS})
    def post(self, request):
        membership = _admin_membership(request)
        fields = _source_input(request, partial=False)
        source = source_create(tenant=membership.tenant, **fields)
        source = source_get(tenant=membership.tenant, source_id=source.pk, user=request.user)
        return Response(self.OutputSerializer(source).data, status=status.HTTP_201_CREATED)


class SourceDetailApi(APIView):
    """One of the tenant's sources; PATCH changes it, DELETE deletes it with its documents (admins)."""

    OutputSerializer = SourceOutputSerializer
    InputSerializer = SourceInputSerializer

    @extend_schema(operation_id="sources_retrieve", responses={200: OutputSerializer, **ERRORS})
    def get(self, request, source_id: int):
        tenant = tenant_for_request(request)
        return Response(self.OutputSerializer(source_get(tenant=tenant, source_id=source_id, user=request.user)).data)

    @extend_schema(
        operation_id="sources_partial_update",
        request=InputSerializer(partial=True),
        responses={200: OutputSerializer, **ERRORS},
    )
    def patch(self, request, source_id: int):
        membership = _admin_membership(request)
        source = source_get(tenant=membership.tenant, source_id=source_id, user=request.user)
        fields = _source_input(request, partial=True)
        source = source_update(source=source, **fields)
        source = source_get(tenant=membership.tenant, source_id=source.pk, user=request.user)
        return Response(self.OutputSerializer(source).data)

    @extend_schema(operation_id="sources_destroy", responses={204: None, **ERRORS})
    def delete(self, request, source_id: int):
        membership = _admin_membership(request)
        source = source_get(tenant=membership.tenant, source_id=source_id, user=request.user)
        source_delete(source=source)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SourceSyncApi(APIView):
    """Sync a folder, web or git source now (admins): 202 with the run and its ``Location``.

    Without a broker the sync runs before the answer, so the run may already be done; with one,
    follow it at ``Location``. While a run of the source is pending or running, that run is
    returned instead of a new one."""

    OutputSerializer = SyncRunOutputSerializer

    @extend_schema(operation_id="sources_sync", request=None, responses={202: OutputSerializer, **ERRORS})
    def post(self, request, source_id: int):
        membership = _admin_membership(request)
        source = source_get(tenant=membership.tenant, source_id=source_id, user=request.user)
        run = sync_run_request(source=source)
        response = Response(self.OutputSerializer(run).data, status=status.HTTP_202_ACCEPTED)
        response["Location"] = _run_location(run)
        return response


class RunPagination(BoundedLimitOffsetPagination):
    """Sync runs: 20 per page unless ``limit`` says otherwise, at most 100."""

    default_limit = 20
    max_limit = 100


class SourceRunListApi(APIView):
    """The source's sync runs, newest first (``limit``: 20 by default, at most 100)."""

    OutputSerializer = SyncRunOutputSerializer
    pagination_class = RunPagination

    @extend_schema(
        operation_id="sources_runs_list",
        parameters=[OpenApiParameter("limit", int, description="Runs per page: 20 by default, at most 100.")],
        responses={200: OutputSerializer(many=True), **ERRORS},
    )
    def get(self, request, source_id: int):
        tenant = tenant_for_request(request)
        source = source_get(tenant=tenant, source_id=source_id, user=request.user)
        runs = sync_run_list(tenant=tenant, source_id=source.pk)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(runs, request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)


class SourceRunDetailApi(APIView):
    """One sync run of the source: status, counts, progress and errors."""

    OutputSerializer = SyncRunOutputSerializer

    @extend_schema(operation_id="sources_runs_retrieve", responses={200: OutputSerializer, **ERRORS})
    def get(self, request, source_id: int, run_id: int):
        tenant = tenant_for_request(request)
        source = source_get(tenant=tenant, source_id=source_id, user=request.user)
        run = source_sync_run_get(tenant=tenant, source_id=source.pk, run_id=run_id)
        return Response(self.OutputSerializer(run).data)
