"""REST API of retrieval: hybrid search over the caller's tenant only, and the serializer parts the ask API
(``people.ask_apis``) shares with it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, ErrorSerializer
from core.memberships import tenant_for_request
from retrieval.config import MAX_QUERY_CHARS, MODES
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search

COLLAPSE_HELP = "Collapse near-duplicate documents to the freshest (default: the tenant's setting, on)."
SUMMARIES_HELP = (
    "Let the documents' summary chunks compete with their text (default: the tenant's include_summaries, on); "
    "false keeps them out."
)
PERSONALIZE_HELP = (
    "Personalize for the caller (default): boost what their profile prefers and what they and their team "
    "found useful, and describe them in the answer prompt. false: the same ranking and prompt as for anyone."
)


class ComponentsField(serializers.DictField):
    """Per-retriever score and rank, e.g. ``{"dense": {"score": 0.71, "rank": 1}}``."""

    child = serializers.DictField()


class ChunkReferenceSerializer(serializers.Serializer):
    """A chunk as search results and citations point at it: document, version, chunk, score, text."""

    document = serializers.CharField()
    document_id = serializers.IntegerField()
    title = serializers.CharField()
    uri = serializers.CharField()
    version = serializers.IntegerField()
    version_date = serializers.CharField(allow_null=True, help_text="The version's date: published, else ingested.")
    version_current = serializers.BooleanField(help_text="False for an older version (as_of).")
    chunk = serializers.IntegerField()
    chunk_id = serializers.IntegerField()
    page = serializers.IntegerField(
        allow_null=True,
        default=None,
        help_text="The page (1-based) the chunk starts on in a paged document (a PDF; a presentation's slide); "
        "null for other documents and summaries.",
    )
    page_end = serializers.IntegerField(
        allow_null=True,
        default=None,
        help_text="The page the chunk ends on (equal to page on one page); null likewise.",
    )
    kind = serializers.ChoiceField(
        choices=("body", "summary"), help_text="'summary': the document's summary, not a span of its text."
    )
    score = serializers.FloatField()
    text = serializers.CharField()


class SearchApi(APIView):
    """Hybrid (lexical + dense), lexical or dense search over the tenant's chunks."""

    @extend_schema_serializer(component_name="SearchInput")
    class InputSerializer(serializers.Serializer):
        query = serializers.CharField(max_length=MAX_QUERY_CHARS)
        k = serializers.IntegerField(min_value=1, max_value=50, default=10)
        mode = serializers.ChoiceField(choices=MODES, default="hybrid")
        sources = serializers.ListField(child=serializers.CharField(max_length=200), required=False, default=list)
        as_of = serializers.DateField(
            required=False,
            allow_null=True,
            input_formats=["%Y-%m-%d"],
            help_text="YYYY-MM-DD: use the document versions current on that day (default: current versions).",
        )
        collapse = serializers.BooleanField(required=False, allow_null=True, default=None, help_text=COLLAPSE_HELP)
        summaries = serializers.BooleanField(required=False, allow_null=True, default=None, help_text=SUMMARIES_HELP)
        personalize = serializers.BooleanField(default=True, help_text=PERSONALIZE_HELP)

    @extend_schema_serializer(component_name="SearchOutput")
    class OutputSerializer(serializers.Serializer):
        class ResultSerializer(ChunkReferenceSerializer):
            rank = serializers.IntegerField()
            source = serializers.CharField()
            heading = serializers.CharField()
            components = ComponentsField()
            also_in = serializers.ListField(
                child=serializers.DictField(), help_text="Other places of this exact content."
            )
            near_duplicates = serializers.ListField(
                child=serializers.DictField(), help_text="Near-duplicate documents (kind, update), freshest first."
            )
            update = serializers.CharField(allow_null=True, help_text="What changed from the copy this one supersedes.")

        results = ResultSerializer(many=True)
        timings_ms = serializers.DictField(child=serializers.FloatField())

    @extend_schema(
        operation_id="search",
        request=InputSerializer,
        responses={200: OutputSerializer, 502: ErrorSerializer, **ERRORS},
    )
    def post(self, request):
        tenant = tenant_for_request(request)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        search = AnswerRequest.for_sources(
            tenant=tenant,
            user=request.user,
            sources=data["sources"],
            question=data["query"],
            k=data["k"],
            mode=data["mode"],
            as_of=data.get("as_of"),
            collapse=data["collapse"],
            personalize=data["personalize"],
            summaries=data["summaries"],
        )
        response = chunk_search(search, tenant=tenant, user=request.user)
        output = {
            "results": [r.as_dict() for r in response.results],
            "timings_ms": response.timings_ms,
        }
        return Response(self.OutputSerializer(output).data)
