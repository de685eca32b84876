"""REST API of a user's history: record that they opened a citation of one of their answers."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS
from core.memberships import tenant_for_request
from retrieval.history import citation_open


class CitationOpenApi(APIView):
    """Record that the caller opened citation ``[n]`` of their answer ``trace_id`` (personalization
    reads it); the reply says where the citation points. 404 for another user's answer or a
    citation it does not have. A viewer's opening is answered but not recorded."""

    @extend_schema_serializer(component_name="CitationOpenOutput")
    class OutputSerializer(serializers.Serializer):
        document_id = serializers.IntegerField()
        version = serializers.IntegerField(allow_null=True)
        chunk = serializers.IntegerField(allow_null=True)
        recorded = serializers.BooleanField()

    @extend_schema(operation_id="citation_open", request=None, responses={200: OutputSerializer, **ERRORS})
    def post(self, request, trace_id: int, n: int):
        opened = citation_open(tenant=tenant_for_request(request), user=request.user, trace_id=trace_id, citation=n)
        return Response(self.OutputSerializer(opened).data)
