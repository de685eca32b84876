"""REST API of feedback: thumbs up or down (and a comment) on an answer or one of its citations."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS
from core.memberships import tenant_for_request
from retrieval.feedback import MAX_COMMENT_CHARS, feedback_give


class FeedbackApi(APIView):
    """Give feedback on the answer of trace ``trace_id`` (``trace_id`` comes with every answer).

    ``citation`` names the answer's ``[n]`` the feedback is about; without it the feedback is on
    the whole answer. Giving feedback again on the same answer or citation replaces it.
    """

    @extend_schema_serializer(component_name="FeedbackInput")
    class InputSerializer(serializers.Serializer):
        rating = serializers.ChoiceField(choices=("up", "down"))
        citation = serializers.IntegerField(min_value=1, max_value=1000, required=False, allow_null=True, default=None)
        comment = serializers.CharField(max_length=MAX_COMMENT_CHARS, required=False, allow_blank=True, default="")

    @extend_schema_serializer(component_name="FeedbackOutput")
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        trace = serializers.IntegerField(source="trace_id")
        rating = serializers.SerializerMethodField()
        citation = serializers.IntegerField(allow_null=True)
        document_id = serializers.IntegerField(allow_null=True)
        comment = serializers.CharField()
        updated_at = serializers.DateTimeField()

        def get_rating(self, obj) -> str:
            return "up" if obj.rating > 0 else "down"

    @extend_schema(operation_id="feedback_give", request=InputSerializer, responses={201: OutputSerializer, **ERRORS})
    def post(self, request, trace_id: int):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        feedback = feedback_give(
            tenant=tenant_for_request(request), user=request.user, trace_id=trace_id, **serializer.validated_data
        )
        return Response(self.OutputSerializer(feedback).data, status=status.HTTP_201_CREATED)
