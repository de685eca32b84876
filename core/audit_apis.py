"""REST API of the audit log: ``GET /api/v1/audit/``, the caller's tenant's events (owners and
admins only), newest first, filtered and paginated. Another tenant's events never show: the
selector filters by the request's tenant (``core.memberships``) and row-level security backs it.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.views import APIView

from core.api import ERRORS, BoundedLimitOffsetPagination
from core.audit import audit_event_list
from core.errors import InvalidInput, PermissionDenied
from core.memberships import membership_for_request
from core.models import Membership

READING_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)


@extend_schema_serializer(component_name="AuditEvent")
class AuditEventOutputSerializer(serializers.Serializer):
    """One recorded action."""

    id = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField(
        source="actor_label", help_text="The username, or 'operator (CLI)', 'system (schedule)', 'anonymous'..."
    )
    action = serializers.CharField(help_text="<object>.<verb>, e.g. signin.failed, token.revoked, source.synced.")
    object_type = serializers.CharField()
    object_id = serializers.CharField()
    object_repr = serializers.CharField()
    changes = serializers.JSONField(help_text='{"field": [before, after]} or details.')
    client_ip = serializers.IPAddressField(allow_null=True)


class AuditEventListApi(APIView):
    """The tenant's audit log, newest first (owners and admins)."""

    @extend_schema_serializer(component_name="AuditFilter")
    class FilterSerializer(serializers.Serializer):
        actor = serializers.CharField(required=False, max_length=200, help_text="The actor's username (or label).")
        action = serializers.CharField(
            required=False, max_length=64, help_text="An action, or a prefix ending with '.', e.g. 'source.'."
        )
        object_type = serializers.CharField(required=False, max_length=64, help_text="e.g. source, membership.")
        object_id = serializers.CharField(required=False, max_length=64)
        since = serializers.DateTimeField(required=False, help_text="ISO 8601; events at or after it.")
        until = serializers.DateTimeField(required=False, help_text="ISO 8601; events before it.")

        def validate(self, attrs):
            if "since" in attrs and "until" in attrs and attrs["since"] >= attrs["until"]:
                raise InvalidInput("'since' must be before 'until'.")
            return attrs

    OutputSerializer = AuditEventOutputSerializer
    pagination_class = BoundedLimitOffsetPagination

    @extend_schema(
        operation_id="audit_list",
        parameters=[
            FilterSerializer,
            OpenApiParameter("limit", int, description="Events per page: 50 by default, at most 200."),
            OpenApiParameter("offset", int),
        ],
        responses={200: OutputSerializer(many=True), **ERRORS},
    )
    def get(self, request):
        membership = membership_for_request(request)
        if membership.role not in READING_ROLES:
            raise PermissionDenied("Only the tenant's owners and admins may read its audit log.")
        filters = self.FilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        events = audit_event_list(tenant=membership.tenant_id, **filters.validated_data)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(events, request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)
