"""REST API of the knowledge app: documents and ingestion jobs, always scoped to the caller's tenant.

Views are thin: they parse input, call one service or selector, and shape output. Errors are
``ApplicationError`` subclasses, which ``core.api.api_exception_handler`` turns into
``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, BoundedLimitOffsetPagination, ErrorSerializer
from core.errors import PermissionDenied
from core.memberships import membership_for_request, tenant_for_request
from core.models import Membership
from core.uploads import upload_refusal_raise
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS
from knowledge.models import IngestionJob
from knowledge.selectors import (
    document_get,
    document_list,
    ingestion_job_get,
)
from knowledge.services import document_delete, upload_ingest


def _editor_membership(request) -> Membership:
    """The request's membership if its role may change documents; ``PermissionDenied`` otherwise."""
    membership = membership_for_request(request)
    if not membership.can_edit:
        raise PermissionDenied("Only admins and editors may add or delete documents.")
    return membership


class JobUrlsSerializer(serializers.Serializer):
    self = serializers.CharField()
    documents = serializers.ListField(child=serializers.CharField())


class JobOutputSerializer(serializers.Serializer):
    """An ingestion job; ``urls.documents`` lists the documents it stored once it is done."""

    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=IngestionJob.Status.choices)
    file_name = serializers.CharField()
    source = serializers.CharField(source="source.name")
    result = serializers.JSONField()
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    urls = serializers.SerializerMethodField()

    @extend_schema_field(JobUrlsSerializer)
    def get_urls(self, job: IngestionJob) -> dict:
        documents = (job.result or {}).get("documents", [])
        return {
            "self": reverse("api:job-detail", args=[job.pk]),
            "documents": [
                reverse("api:document-detail", args=[d["document_id"]]) for d in documents if d.get("document_id")
            ],
        }


class DocumentListApi(APIView):
    """List the tenant's documents, or upload a file to ingest (admins and editors).

    An upload is refused while it streams in past ``KB_MAX_UPLOAD_MB`` (413), checked cheaply here
    (``upload_ingest``) and parsed by its job: a 202 with the job, which may end ``failed``.
    """

    pagination_class = BoundedLimitOffsetPagination
    parser_classes = [MultiPartParser, FormParser]

    @extend_schema_serializer(component_name="DocumentListFilter")
    class FilterSerializer(serializers.Serializer):
        source = serializers.CharField(required=False, max_length=200)

    @extend_schema_serializer(component_name="DocumentListInput")
    class InputSerializer(serializers.Serializer):
        file = serializers.FileField(
            allow_empty_file=True, help_text=f"The file to ingest: {' '.join(SUPPORTED_EXTENSIONS)}."
        )
        source = serializers.CharField(max_length=200, default="uploads")
        external_id = serializers.CharField(max_length=1000, required=False)
        title = serializers.CharField(max_length=500, required=False)
        format = serializers.CharField(max_length=20, required=False, help_text='A reader to use, e.g. "rst".')

    @extend_schema_serializer(component_name="DocumentListOutput")
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        external_id = serializers.CharField()
        title = serializers.CharField()
        uri = serializers.CharField()
        source = serializers.CharField(source="source.name")
        current_version = serializers.IntegerField(allow_null=True)
        updated_at = serializers.DateTimeField()

    @extend_schema(
        operation_id="documents_list",
        parameters=[OpenApiParameter("source", str, description="Only documents of this source.")],
        responses={200: OutputSerializer(many=True), **ERRORS},
    )
    def get(self, request):
        tenant = tenant_for_request(request)
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        documents = document_list(tenant=tenant, source_name=filters.validated_data.get("source"), user=request.user)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(documents, request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)

    @extend_schema(
        operation_id="documents_upload",
        request={"multipart/form-data": InputSerializer},
        responses={
            202: JobOutputSerializer,
            413: ErrorSerializer,
            415: ErrorSerializer,
            **ERRORS,
        },
    )
    def post(self, request):
        membership = _editor_membership(request)
        body = request.data  # the upload limits stop the body while it streams in (core.uploads)
        upload_refusal_raise(request)  # 413 over the limit, before any field is looked at
        serializer = self.InputSerializer(data=body)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        upload = data["file"]
        # Read one byte past the limit: enough for the service to reject an oversized file.
        content = upload.read(settings.KB_MAX_UPLOAD_BYTES + 1)
        job = upload_ingest(
            tenant=membership.tenant,
            source_name=data["source"],
            file_name=upload.name,
            data=content,
            options={k: data.get(k) for k in ("format", "external_id", "title")},
        )
        return Response(JobOutputSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class DocumentDetailApi(APIView):
    """One of the tenant's documents with its versions; DELETE removes it (admins and editors)."""

    @extend_schema_serializer(component_name="DocumentDetailOutput")
    class OutputSerializer(serializers.Serializer):
        class VersionSerializer(serializers.Serializer):
            number = serializers.IntegerField()
            content_hash = serializers.CharField()
            published_at = serializers.DateTimeField(allow_null=True)
            ingested_at = serializers.DateTimeField()
            is_current = serializers.BooleanField()
            duplicate_of = serializers.IntegerField(source="duplicate_of_id", allow_null=True)
            chunk_count = serializers.IntegerField()

        id = serializers.IntegerField()
        external_id = serializers.CharField()
        title = serializers.CharField()
        uri = serializers.CharField()
        source = serializers.CharField(source="source.name")
        metadata = serializers.JSONField()
        current_version = serializers.SerializerMethodField()
        created_at = serializers.DateTimeField()
        updated_at = serializers.DateTimeField()
        versions = VersionSerializer(many=True, source="versions.all")

        def get_current_version(self, document) -> int | None:
            # Uses the versions prefetched by ``document_get``: no extra query.
            return next((v.number for v in document.versions.all() if v.is_current), None)

    @extend_schema(operation_id="documents_retrieve", responses={200: OutputSerializer, **ERRORS})
    def get(self, request, document_id: int):
        tenant = tenant_for_request(request)
        document = document_get(tenant=tenant, document_id=document_id, user=request.user)
        return Response(self.OutputSerializer(document).data)

    @extend_schema(operation_id="documents_destroy", responses={204: None, **ERRORS})
    def delete(self, request, document_id: int):
        membership = _editor_membership(request)
        document_get(tenant=membership.tenant, document_id=document_id, user=request.user)  # 404 if hidden
        document_delete(tenant=membership.tenant, document_id=document_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobDetailApi(APIView):
    """The status and result of one of the tenant's ingestion jobs."""

    @extend_schema(operation_id="jobs_retrieve", responses={200: JobOutputSerializer, **ERRORS})
    def get(self, request, job_id: int):
        tenant = tenant_for_request(request)
        return Response(JobOutputSerializer(ingestion_job_get(tenant=tenant, job_id=job_id)).data)
