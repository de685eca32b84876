"""REST API of the knowledge app: documents and ingestion jobs, always scoped to the caller's tenant."""

from __future__ import annotations

from django.conf import settings
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from knowledge.errors import NotFound, PermissionDenied
from knowledge.models import DocumentVersion, IngestionJob, Membership
from knowledge.selectors import (
    document_get,
    document_list,
    membership_for_user,
    tenant_for_user,
)
from knowledge.services import document_delete, upload_ingest


class ErrorSerializer(serializers.Serializer):
    """The one error shape: ``{"error": {"code", "message"}}``."""

    class ErrorBody(serializers.Serializer):
        code = serializers.CharField()
        message = serializers.JSONField()

    error = ErrorBody()


def _editor_membership(user) -> Membership:
    """The user's membership if their role may change documents; ``PermissionDenied`` otherwise."""
    membership = membership_for_user(user)
    if not membership.can_edit:
        raise PermissionDenied(
            "Only admins and editors may add or delete documents."
        )
    return membership


def _job_get(*, tenant, job_id: int) -> IngestionJob:
    # Scoped through the manager's ``for_tenant``, like every selector.
    job = IngestionJob.objects.for_tenant(tenant).select_related("source").filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"Job {job_id} not found.")
    return job


class JobOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    file_name = serializers.CharField()
    source = serializers.CharField(source="source.name")
    result = serializers.JSONField()
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    urls = serializers.SerializerMethodField()

    @extend_schema_field_urls := None  # placeholder removed below


