"""REST API of the quality gate: propose retrieval settings, follow the change, override a refusal.

Every change is looked up within the caller's tenant (another tenant's id is a 404). Proposing
and overriding are for the tenant's admins (403 otherwise); any member may read a change.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, ErrorSerializer
from core.memberships import tenant_for_request
from quality.models import ConfigChange
from quality.selectors import config_change_get
from quality.services import config_change_override, config_change_propose


@extend_schema_serializer(component_name="RetrievalSettingsChange")
class ConfigChangeOutputSerializer(serializers.Serializer):
    """A retrieval-settings change and the quality gate's verdict (deltas: b = proposed - a = current)."""

    @extend_schema_serializer(component_name="RetrievalSettingsChangeProgress")
    class ProgressSerializer(serializers.Serializer):
        done = serializers.IntegerField()
        total = serializers.IntegerField()

    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=ConfigChange.Status.choices)
    progress = ProgressSerializer()
    current_config = serializers.JSONField()
    proposed_config = serializers.JSONField()
    deltas = serializers.JSONField(help_text='{judgment list: {metric: {"a", "b", "delta"}}}')
    tolerance = serializers.FloatField()
    error = serializers.CharField()
    requested_by = serializers.CharField(allow_null=True)
    override_by = serializers.CharField(allow_null=True)
    override_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


def _change_data(change: ConfigChange) -> dict:
    return {
        "id": change.pk,
        "status": change.status,
        "progress": {"done": change.progress_done, "total": change.progress_total},
        "current_config": change.current_config,
        "proposed_config": change.proposed_config,
        "deltas": change.deltas,
        "tolerance": change.tolerance,
        "error": change.error,
        "requested_by": change.requested_by.get_username() if change.requested_by_id else None,
        "override_by": change.override_by.get_username() if change.override_by_id else None,
        "override_at": change.override_at,
        "created_at": change.created_at,
        "finished_at": change.finished_at,
    }


class RetrievalSettingsProposeApi(APIView):
    """Propose new retrieval settings; with judgment lists they apply only if quality holds."""

    @extend_schema_serializer(component_name="RetrievalSettingsInput")
    class InputSerializer(serializers.Serializer):
        config = serializers.DictField(
            child=serializers.JSONField(),
            allow_empty=False,
            help_text='Settings to change, e.g. {"pipeline": "expand"} or {"fusion": "rrf"}; others keep their value.',
        )

    OutputSerializer = ConfigChangeOutputSerializer

    @extend_schema(
        operation_id="retrieval_settings_propose",
        request=InputSerializer,
        responses={202: OutputSerializer, 409: ErrorSerializer, **ERRORS},
    )
    def post(self, request):
        tenant = tenant_for_request(request)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        change = config_change_propose(tenant=tenant, user=request.user, proposed=serializer.validated_data["config"])
        return Response(self.OutputSerializer(_change_data(change)).data, status=status.HTTP_202_ACCEPTED)


class RetrievalSettingsChangeDetailApi(APIView):
    """One retrieval-settings change of the caller's tenant: status, progress and deltas."""

    OutputSerializer = ConfigChangeOutputSerializer

    @extend_schema(operation_id="retrieval_settings_change", responses={200: OutputSerializer, **ERRORS})
    def get(self, request, change_id: int):
        change = config_change_get(tenant=tenant_for_request(request), change_id=change_id)
        return Response(self.OutputSerializer(_change_data(change)).data)


class RetrievalSettingsChangeOverrideApi(APIView):
    """Apply a refused change anyway (admins only); who and when are recorded."""

    OutputSerializer = ConfigChangeOutputSerializer

    @extend_schema(
        operation_id="retrieval_settings_change_override",
        request=None,
        responses={200: OutputSerializer, **ERRORS},
    )
    def post(self, request, change_id: int):
        change = config_change_get(tenant=tenant_for_request(request), change_id=change_id)
        change = config_change_override(change_id=change.pk, user=request.user)
        return Response(self.OutputSerializer(_change_data(change)).data)
