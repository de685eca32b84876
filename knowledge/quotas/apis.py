"""REST API of the tenant's usage against its quotas (``GET /api/v1/usage/``), for its owners and admins."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS
from core.errors import PermissionDenied
from core.memberships import membership_for_request
from knowledge.quotas.usage import USAGE_ROLES, quota_usage


class UsageApi(APIView):
    """The caller's tenant's usage against each of its quotas (owners and admins)."""

    @extend_schema_serializer(component_name="UsageOutput")
    class OutputSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="QuotaUsage")
        class QuotaSerializer(serializers.Serializer):
            limit = serializers.IntegerField(allow_null=True, help_text="The limit; null = unlimited.")
            used = serializers.IntegerField()
            remaining = serializers.IntegerField(
                allow_null=True, help_text="limit - used, at least 0; null = unlimited."
            )

        tenant = serializers.CharField(help_text="The tenant's slug.")
        documents = QuotaSerializer(help_text="Live documents (not deleted at their source).")
        stored_bytes = QuotaSerializer(
            help_text="Bytes (UTF-8) of the text of every stored document version, plus their kept original files."
        )
        chunks = QuotaSerializer(help_text="Body chunks of every stored version (summaries not counted).")
        sources = QuotaSerializer(help_text="Sources of any kind.")
        syncs_per_day = QuotaSerializer(help_text="Sync runs started in the last 24 hours.")
        llm_tokens_per_day = QuotaSerializer(
            help_text="LLM tokens (prompt + completion) of the tenant's LLM calls in the last 24 hours."
        )

    @extend_schema(operation_id="usage", responses={200: OutputSerializer, **ERRORS})
    def get(self, request):
        membership = membership_for_request(request)
        if membership.role not in USAGE_ROLES:
            raise PermissionDenied("Only the tenant's owners and admins may read its usage.")
        usage = quota_usage(tenant=membership.tenant)
        output = {"tenant": membership.tenant.slug, **{name: quota.as_dict() for name, quota in usage.items()}}
        return Response(self.OutputSerializer(output).data)
