"""REST API of the caller as a person in their tenant: their profile (read it, change some of its
fields), their conversations, their feedback on answers and the citations they open.

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
from people.conversations import conversation_delete
from people.feedback import MAX_COMMENT_CHARS, feedback_give
from people.history import citation_open
from people.models import Profile
from people.selectors import conversation_get, conversation_list
from people.services import profile_get, profile_update


class ProfileApi(APIView):
    """The caller's profile: role/title, team, expertise, language, preferred and muted sources
    (by name) and "about me". ``PATCH`` changes the fields it sends."""

    @extend_schema_serializer(component_name="ProfileInput")
    class InputSerializer(serializers.Serializer):
        title = serializers.CharField(max_length=200, required=False, allow_blank=True)
        team = serializers.CharField(max_length=200, required=False, allow_blank=True)
        expertise = serializers.ChoiceField(choices=["", *Profile.Expertise.values], required=False)
        language = serializers.CharField(max_length=15, required=False, allow_blank=True)
        preferred_sources = serializers.ListField(
            child=serializers.CharField(max_length=200), max_length=200, required=False
        )
        muted_sources = serializers.ListField(
            child=serializers.CharField(max_length=200), max_length=200, required=False
        )
        about = serializers.CharField(max_length=2000, required=False, allow_blank=True)

    @extend_schema_serializer(component_name="ProfileOutput")
    class OutputSerializer(serializers.Serializer):
        title = serializers.CharField()
        team = serializers.CharField()
        expertise = serializers.CharField()
        language = serializers.CharField()
        preferred_sources = serializers.SerializerMethodField()
        muted_sources = serializers.SerializerMethodField()
        about = serializers.CharField()
        updated_at = serializers.DateTimeField()

        def get_preferred_sources(self, profile) -> list[str]:
            return sorted(profile.preferred_sources.values_list("name", flat=True))

        def get_muted_sources(self, profile) -> list[str]:
            return sorted(profile.muted_sources.values_list("name", flat=True))

    @extend_schema(operation_id="profile_retrieve", responses={200: OutputSerializer, **ERRORS})
    def get(self, request):
        return Response(self.OutputSerializer(profile_get(user=request.user, tenant=tenant_for_request(request))).data)

    @extend_schema(operation_id="profile_update", request=InputSerializer, responses={200: OutputSerializer, **ERRORS})
    def patch(self, request):
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        profile = profile_update(user=request.user, tenant=tenant_for_request(request), **serializer.validated_data)
        return Response(self.OutputSerializer(profile).data)


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
