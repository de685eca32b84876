"""REST API of conversations: the caller's own threads of questions and answers.

A conversation starts with any ``POST /api/v1/ask/`` (the answer carries its
``conversation_id``); sending that id back as ``conversation`` asks a follow-up.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, BoundedLimitOffsetPagination
from core.memberships import tenant_for_request
from retrieval.conversations import conversation_delete
from retrieval.selectors import conversation_get, conversation_list


class ConversationListApi(APIView):
    """The caller's conversations in their tenant, most recent first."""

    pagination_class = BoundedLimitOffsetPagination

    @extend_schema_serializer(component_name="ConversationListOutput")
    class OutputSerializer(serializers.Serializer):
        id = serializers.IntegerField()
        title = serializers.CharField()
        turns = serializers.IntegerField(source="turn_count")
        created_at = serializers.DateTimeField()
        updated_at = serializers.DateTimeField()

    @extend_schema(operation_id="conversations_list", responses={200: OutputSerializer(many=True), **ERRORS})
    def get(self, request):
        conversations = conversation_list(tenant=tenant_for_request(request), user=request.user)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(conversations, request, view=self)
        return paginator.get_paginated_response(self.OutputSerializer(page, many=True).data)


class ConversationDetailApi(APIView):
    """One of the caller's conversations with every turn (question, standalone query, answer,
    citations, trace id); or delete it."""

    @extend_schema_serializer(component_name="ConversationOutput")
    class OutputSerializer(serializers.Serializer):
        class TurnSerializer(serializers.Serializer):
            order = serializers.IntegerField()
            question = serializers.CharField()
            query = serializers.CharField(help_text="The standalone search query the question was condensed into.")
            answer = serializers.CharField()
            citations = serializers.JSONField()
            pipeline = serializers.CharField()
            trace_id = serializers.IntegerField(allow_null=True)
            created_at = serializers.DateTimeField()

        id = serializers.IntegerField()
        title = serializers.CharField()
        created_at = serializers.DateTimeField()
        updated_at = serializers.DateTimeField()
        turns = TurnSerializer(many=True, source="turns.all")

    @extend_schema(operation_id="conversation_retrieve", responses={200: OutputSerializer, **ERRORS})
    def get(self, request, conversation_id: int):
        conversation = conversation_get(
            tenant=tenant_for_request(request), user=request.user, conversation_id=conversation_id
        )
        return Response(self.OutputSerializer(conversation).data)

    @extend_schema(operation_id="conversation_delete", responses={204: None, **ERRORS})
    def delete(self, request, conversation_id: int):
        conversation_delete(tenant=tenant_for_request(request), user=request.user, conversation_id=conversation_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
