"""REST API of answer traces: one trace of the caller's tenant, with its steps in run order."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS
from core.memberships import tenant_for_request
from retrieval.selectors import trace_get


class TraceDetailApi(APIView):
    """How one answer was made: the pipeline, its configuration, each stage's time and summary."""

    @extend_schema_serializer(component_name="TraceOutput")
    class OutputSerializer(serializers.Serializer):
        class TraceUsageSerializer(serializers.Serializer):
            llm_calls = serializers.IntegerField()
            tokens_in = serializers.IntegerField()
            tokens_out = serializers.IntegerField()
            cost_usd = serializers.FloatField()

        class TraceStepSerializer(serializers.Serializer):
            order = serializers.IntegerField()
            stage = serializers.CharField()
            ms = serializers.FloatField()
            summary = serializers.JSONField()
            error = serializers.CharField()
            tokens_in = serializers.IntegerField()
            tokens_out = serializers.IntegerField()

        id = serializers.IntegerField()
        pipeline = serializers.CharField()
        question = serializers.CharField()
        answer = serializers.CharField()
        degraded = serializers.BooleanField()
        error = serializers.CharField(help_text="Why the run degraded; empty if it did not.")
        total_ms = serializers.FloatField()
        usage = TraceUsageSerializer(source="*")
        config = serializers.JSONField()
        created_at = serializers.DateTimeField()
        user = serializers.CharField(source="user.get_username", allow_null=True, default=None)
        steps = TraceStepSerializer(many=True, source="steps.all")

    @extend_schema(operation_id="trace_retrieve", responses={200: OutputSerializer, **ERRORS})
    def get(self, request, trace_id: int):
        trace = trace_get(tenant=tenant_for_request(request), trace_id=trace_id, user=request.user)
        return Response(self.OutputSerializer(trace).data)
