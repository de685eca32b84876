"""REST API of a tenant's sources: list, create, change and delete them, sync them, follow their
runs, and test a service source's connection.

Any member may read the sources they may see (``knowledge.access``: a restricted source not
granted to them is left out, and its id is a 404) and their sync runs; only the tenant's owners
and admins may create, change, delete, sync or test one (403 otherwise). Another tenant's source
id is a 404 for everyone: an id reveals nothing. A service source's ``secret`` is write-only: no
response holds it (``has_secret`` says whether one is stored). Views are thin: checks live in
``knowledge.services.sources`` and ``knowledge.services.sync``, whose ``ApplicationError``s
``core.api.api_exception_handler`` turns into ``{"error": {"code", "message"}}``; the serializers
are in ``knowledge.source_serializers``.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, BoundedLimitOffsetPagination
from core.errors import InvalidInput, PermissionDenied
from core.memberships import membership_for_request, tenant_for_request
from core.models import Membership
from knowledge.connectors import SourceUnreachable
from knowledge.models import SyncRun
from knowledge.selectors import source_get, source_list, source_sync_run_get, sync_run_list
from knowledge.services.sources import source_create, source_delete, source_test, source_update
from knowledge.services.sync import sync_run_request
from knowledge.source_serializers import (
    SourceInputSerializer,
    SourceOutputSerializer,
    SourceTestOutputSerializer,
    SyncInputSerializer,
    SyncRunOutputSerializer,
)

MANAGING_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)


def _admin_membership(request) -> Membership:
    """The request's membership if it may manage sources (owners, admins); ``PermissionDenied`` otherwise."""
    membership = membership_for_request(request)
    if membership.role not in MANAGING_ROLES:
        raise PermissionDenied("Only the tenant's admins may create, change, delete, sync or test sources.")
    return membership


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
    """Sync a connector source now (admins): 202 with the run and its ``Location``.

    A service source syncs what ``scope`` says (optional body ``{"scope": "all" | "content" |
    "permissions"}``, all by default); folder, web and git sources always sync everything. Without
    a broker the sync runs before the answer, so the run may already be done; with one, follow it
    at ``Location``. While a run of the source is pending or running, that run is returned instead
    of a new one."""

    InputSerializer = SyncInputSerializer
    OutputSerializer = SyncRunOutputSerializer

    @extend_schema(operation_id="sources_sync", request=InputSerializer, responses={202: OutputSerializer, **ERRORS})
    def post(self, request, source_id: int):
        membership = _admin_membership(request)
        source = source_get(tenant=membership.tenant, source_id=source_id, user=request.user)
        data = request.data if isinstance(request.data, Mapping) else {}
        serializer = self.InputSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        # A file source always syncs everything (and counts against the syncs-per-day quota).
        scope = serializer.validated_data["scope"] if source.is_service else SyncRun.Scope.ALL
        run = sync_run_request(source=source, scope=scope)
        response = Response(self.OutputSerializer(run).data, status=status.HTTP_202_ACCEPTED)
        response["Location"] = _run_location(run)
        return response


class SourceTestApi(APIView):
    """Test a service source's connection (admins): ask the service what its stored credential
    can see, without syncing anything.

    The answer to the test is always a 200: ``{"ok": true, "message": "<what the credential
    sees>"}``, or, when the service refuses the credential or cannot be reached, ``{"ok": false,
    "code": "credential_rejected" | "source_unreachable" | "secret_missing" | ..., "message":
    "<why>"}``. A refused credential is what the test found out, not a failed request; errors of
    the request itself keep the API's error shape: 400 ``not_a_service`` for a folder, web, git or
    hand-filled source, 403 for a non-admin, 404 for a source you may not see."""

    OutputSerializer = SourceTestOutputSerializer

    @extend_schema(operation_id="sources_test", request=None, responses={200: OutputSerializer, **ERRORS})
    def post(self, request, source_id: int):
        membership = _admin_membership(request)
        source = source_get(tenant=membership.tenant, source_id=source_id, user=request.user)
        try:
            answer = {"ok": True, "message": source_test(source=source)}
        except SourceUnreachable as exc:  # CredentialRejected included
            answer = {"ok": False, "code": exc.code, "message": exc.message}
        return Response(self.OutputSerializer(answer).data)


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
