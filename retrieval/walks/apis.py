"""REST API of walks and their facts.

``GET /api/v1/facts/?q=`` lists the facts the caller may see (memory, with provenance);
``POST /api/v1/walks/`` starts a steered walk; ``GET /api/v1/walks/<id>/`` shows its state;
``PATCH`` edits it while it is paused; ``POST .../pause/``, ``.../resume/`` and ``.../stop/`` steer
it (``retrieval.walks.steering``). A walk is visible to its asker only.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, ErrorSerializer
from core.memberships import tenant_for_request
from retrieval.config import MAX_QUERY_CHARS
from retrieval.filters import retrieval_filter
from retrieval.walks import steering
from retrieval.walks.selectors import fact_dict, facts_visible, walk_state


class FactSerializer(serializers.Serializer):
    """A fact a walk kept, with where it came from."""

    id = serializers.IntegerField()
    fact = serializers.CharField()
    relevance = serializers.CharField(allow_blank=True)
    entities = serializers.ListField(child=serializers.CharField())
    round = serializers.IntegerField()
    corrected = serializers.BooleanField(help_text="A person corrected the text.")
    retired = serializers.CharField(allow_null=True, help_text="'superseded' when its version is no longer current.")
    created_at = serializers.CharField()
    chunk_id = serializers.IntegerField()
    chunk = serializers.IntegerField(help_text="The chunk's position in its version.")
    document_id = serializers.IntegerField()
    document = serializers.CharField()
    title = serializers.CharField()
    version = serializers.IntegerField()
    version_current = serializers.BooleanField()
    walk_id = serializers.IntegerField(allow_null=True)
    trace_id = serializers.IntegerField(allow_null=True)
    asked_by_you = serializers.BooleanField(help_text="The fact came from a walk of your question.")
    question = serializers.CharField(allow_null=True, help_text="Your question that found it; null for others'.")


class FactListApi(APIView):
    """The facts walks kept that the caller may read (their documents' current versions)."""

    class InputSerializer(serializers.Serializer):
        q = serializers.CharField(max_length=MAX_QUERY_CHARS, required=False, default="", allow_blank=True)
        limit = serializers.IntegerField(min_value=1, max_value=100, default=20)
        as_of = serializers.DateField(required=False, allow_null=True, input_formats=["%Y-%m-%d"])

    @extend_schema(
        operation_id="facts_list",
        parameters=[InputSerializer],
        responses={200: FactSerializer(many=True), **ERRORS},
    )
    def get(self, request):
        tenant = tenant_for_request(request)
        serializer = self.InputSerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        where = retrieval_filter(tenant=tenant, user=request.user, as_of=data.get("as_of"))
        facts = facts_visible(where=where, q=data["q"], embedder=tenant.embedder, limit=data["limit"])
        return Response({"results": [fact_dict(f, user=request.user) for f in facts]})


class WalkStateSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    question = serializers.CharField()
    status = serializers.ChoiceField(choices=("running", "paused", "done", "failed", "stopped"))
    round = serializers.IntegerField()
    pause_after = serializers.IntegerField(allow_null=True)
    pause_requested = serializers.BooleanField()
    stop_requested = serializers.BooleanField()
    stop_reason = serializers.CharField(allow_null=True)
    next_queries = serializers.ListField(child=serializers.CharField())
    facts = serializers.ListField(child=serializers.DictField())
    path = serializers.ListField(child=serializers.DictField(), help_text="One entry per query of each round.")
    answer = serializers.DictField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    trace_id = serializers.IntegerField(allow_null=True)
    created_at = serializers.CharField()
    finished_at = serializers.CharField(allow_null=True)


class WalkListApi(APIView):
    """Start a walk a person can steer: 202 with its state; it runs in the background."""

    @extend_schema_serializer(component_name="WalkInput")
    class InputSerializer(serializers.Serializer):
        question = serializers.CharField(max_length=MAX_QUERY_CHARS)
        pause_after = serializers.IntegerField(
            min_value=1,
            max_value=steering.MAX_PAUSE_AFTER,
            required=False,
            allow_null=True,
            help_text="Pause after this round, for a person to edit the walk.",
        )
        k = serializers.IntegerField(min_value=1, max_value=20, default=5, help_text="Chunks read per query per round.")

    @extend_schema(operation_id="walk_start", request=InputSerializer, responses={202: WalkStateSerializer, **ERRORS})
    def post(self, request):
        tenant = tenant_for_request(request)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        walk = steering.walk_start(
            tenant=tenant,
            user=request.user,
            question=data["question"],
            pause_after=data.get("pause_after"),
            k=data["k"],
        )
        return Response(walk_state(walk), status=202)


class WalkDetailApi(APIView):
    """A walk's state; ``PATCH`` edits it while it is paused."""

    @extend_schema_serializer(component_name="WalkEdit")
    class EditSerializer(serializers.Serializer):
        question = serializers.CharField(max_length=MAX_QUERY_CHARS, required=False)
        remove_facts = serializers.ListField(child=serializers.IntegerField(), required=False)
        edit_facts = serializers.DictField(
            child=serializers.CharField(max_length=400), required=False, help_text='{"<fact id>": "corrected text"}'
        )
        next_queries = serializers.ListField(
            child=serializers.CharField(max_length=MAX_QUERY_CHARS), required=False, help_text="Replaces them."
        )
        add_queries = serializers.ListField(child=serializers.CharField(max_length=MAX_QUERY_CHARS), required=False)
        remove_queries = serializers.ListField(child=serializers.CharField(max_length=MAX_QUERY_CHARS), required=False)

        def validate_edit_facts(self, value):
            try:
                return {int(key): text for key, text in value.items()}
            except ValueError as exc:
                raise serializers.ValidationError("Keys must be fact ids.") from exc

    @extend_schema(operation_id="walk_get", responses={200: WalkStateSerializer, **ERRORS})
    def get(self, request, walk_id: int):
        walk = steering.walk_get(tenant=tenant_for_request(request), user=request.user, walk_id=walk_id)
        return Response(walk_state(walk))

    @extend_schema(
        operation_id="walk_edit",
        request=EditSerializer,
        responses={200: WalkStateSerializer, 409: ErrorSerializer, **ERRORS},
    )
    def patch(self, request, walk_id: int):
        walk = steering.walk_get(tenant=tenant_for_request(request), user=request.user, walk_id=walk_id)
        serializer = self.EditSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        walk = steering.walk_edit(walk=walk, **serializer.validated_data)
        return Response(walk_state(walk))


def _action_view(action, operation: str, doc: str):
    class WalkActionApi(APIView):
        __doc__ = doc

        @extend_schema(
            operation_id=operation, request=None, responses={200: WalkStateSerializer, 409: ErrorSerializer, **ERRORS}
        )
        def post(self, request, walk_id: int):
            walk = steering.walk_get(tenant=tenant_for_request(request), user=request.user, walk_id=walk_id)
            return Response(walk_state(action(walk=walk)))

    WalkActionApi.__name__ = WalkActionApi.__qualname__ = f"Walk{operation.split('_')[1].title()}Api"
    return WalkActionApi


WalkPauseApi = _action_view(steering.walk_pause, "walk_pause", "Pause a running walk after its current round.")
WalkResumeApi = _action_view(steering.walk_resume, "walk_resume", "Resume a paused walk from its edited state.")
WalkStopApi = _action_view(steering.walk_stop, "walk_stop", "Stop a walk: it answers from the facts it has.")
