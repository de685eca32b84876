"""REST API of the caller's profile in their tenant: read it, change some of its fields."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS
from core.memberships import tenant_for_request
from people.models import Profile
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
