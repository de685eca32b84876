"""REST API of retrieval: hybrid search and cited answers (through a named pipeline) over the caller's tenant only."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, ErrorSerializer
from core.errors import NotFound
from core.memberships import tenant_for_request
from knowledge.selectors import source_ids_for_names
from retrieval import hooks
from retrieval.config import MAX_QUERY_CHARS, MODES
from retrieval.pipeline import PIPELINE_NAMES, AnswerRun, pipeline_answer
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


def ask_run(*, tenant, user, question: str, conversation_id: int | None = None, **options) -> AnswerRun:
    """Answer ``question`` for the ask APIs: through the ``ask`` hook (``people.conversations.conversation_ask``:
    the answer is kept as the next turn of ``user``'s conversation ``conversation_id``, or of a new
    one), else with ``pipeline_answer`` alone, where a ``conversation_id`` is ``NotFound``.
    ``options`` are ``pipeline_answer``'s other keyword arguments; its errors as there."""
    if hooks.person.ask is not None:
        return hooks.person.ask(tenant=tenant, user=user, question=question, conversation_id=conversation_id, **options)
    if conversation_id is not None:
        raise NotFound(f"Conversation {conversation_id} does not exist.")
    return pipeline_answer(tenant=tenant, user=user, question=question, **options)


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
        response = chunk_search(
            tenant=tenant,
            query=data["query"],
            k=data["k"],
            mode=data["mode"],
            source_ids=source_ids_for_names(tenant=tenant, names=data["sources"], user=request.user),
            as_of=data.get("as_of"),
            user=request.user,
            options={"collapse": data["collapse"], "personalize": data["personalize"], "summaries": data["summaries"]},
        )
        output = {
            "results": [r.as_dict() for r in response.results],
            "timings_ms": response.timings_ms,
        }
        return Response(self.OutputSerializer(output).data)


class AskApi(APIView):
    """Answer a question from the tenant's documents, citing passages as ``[n]``."""

    @extend_schema_serializer(component_name="AskInput")
    class InputSerializer(serializers.Serializer):
        question = serializers.CharField(max_length=MAX_QUERY_CHARS)
        k = serializers.IntegerField(min_value=1, max_value=20, default=5)
        strategy = serializers.ChoiceField(choices=("top_n", "window"), required=False)
        window = serializers.IntegerField(min_value=0, max_value=10, required=False)
        reverse_pack = serializers.BooleanField(default=True)
        extractive = serializers.BooleanField(default=False, help_text="Answer by quoting sentences, without the LLM.")
        sources = serializers.ListField(child=serializers.CharField(max_length=200), required=False, default=list)
        pipeline = serializers.ChoiceField(
            choices=PIPELINE_NAMES, required=False, help_text="Named pipeline; default: the tenant's (KB_PIPELINE)."
        )
        collapse = serializers.BooleanField(required=False, allow_null=True, default=None, help_text=COLLAPSE_HELP)
        summaries = serializers.BooleanField(required=False, allow_null=True, default=None, help_text=SUMMARIES_HELP)
        conversation = serializers.IntegerField(
            min_value=1,
            max_value=2**63 - 1,
            required=False,
            help_text="Continue this conversation (its id from an earlier answer); without it a new one starts.",
        )
        as_of = serializers.DateField(
            required=False,
            allow_null=True,
            input_formats=["%Y-%m-%d"],
            help_text="YYYY-MM-DD: use the document versions current on that day (default: current versions).",
        )
        personalize = serializers.BooleanField(default=True, help_text=PERSONALIZE_HELP)

    @extend_schema_serializer(component_name="AskOutput")
    class OutputSerializer(serializers.Serializer):
        class CitationSerializer(ChunkReferenceSerializer):
            n = serializers.IntegerField()
            also_in = serializers.ListField(child=serializers.DictField(), required=False)
            near_duplicates = serializers.ListField(child=serializers.DictField(), required=False)
            update = serializers.CharField(required=False)

        class SentenceSerializer(serializers.Serializer):
            text = serializers.CharField(help_text="The sentence, its [n] markers removed.")
            citations = serializers.ListField(child=serializers.IntegerField(), help_text="The n it cites.")
            supported = serializers.BooleanField(help_text="False when no passage supports it.")
            added = serializers.BooleanField(help_text="True when its citation was filled in by the citation check.")

        question = serializers.CharField()
        short_answer = serializers.CharField(
            allow_blank=True,
            help_text="The direct answer (a name, number, date, yes/no or one short sentence); "
            "empty when the passages do not hold the answer.",
        )
        answer = serializers.CharField(help_text="The explanation, with [n] markers.")
        mode = serializers.ChoiceField(choices=("llm", "extractive"))
        found = serializers.BooleanField()
        sentences = SentenceSerializer(many=True, help_text="The explanation's sentences and their citations.")
        citation_coverage = serializers.FloatField(help_text="Share of the explanation's sentences citing a passage.")
        unsupported = serializers.ListField(
            child=serializers.CharField(), help_text="Sentences of the explanation that no passage supports."
        )

        class StepSerializer(serializers.Serializer):
            stage = serializers.CharField()
            ms = serializers.FloatField()
            error = serializers.CharField(required=False)

        class UsageSerializer(serializers.Serializer):
            llm_calls = serializers.IntegerField()
            tokens_in = serializers.IntegerField()
            tokens_out = serializers.IntegerField()
            cost_usd = serializers.FloatField()

        citations = CitationSerializer(many=True)
        timings_ms = serializers.DictField(child=serializers.FloatField())
        pipeline = serializers.CharField()
        trace_id = serializers.IntegerField(allow_null=True, help_text="GET /api/v1/traces/<id>/ shows the run.")
        degraded = serializers.BooleanField(help_text="True when the LLM failed and a fallback answered.")
        degraded_reason = serializers.CharField(allow_blank=True)
        steps = StepSerializer(many=True)
        usage = UsageSerializer()
        scores = serializers.DictField(
            allow_null=True,
            help_text="Answer-quality scores (coverage, support, LLM judge) when KB_SCORE_ANSWERS is on, else null.",
        )
        escalation = serializers.DictField(
            required=False,
            help_text="Pipeline adaptive only: the level that answered, why, and each level's confidence.",
        )
        conversation_id = serializers.IntegerField(
            required=False, help_text="The conversation this answer belongs to: send it back to ask a follow-up."
        )
        turn = serializers.IntegerField(required=False, help_text="This question's number in the conversation.")

    @extend_schema(
        operation_id="ask",
        request=InputSerializer,
        responses={200: OutputSerializer, 502: ErrorSerializer, **ERRORS},
    )
    def post(self, request):
        tenant = tenant_for_request(request)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        options = self.answer_options(tenant=tenant, data=data, user=request.user)
        run = ask_run(tenant=tenant, user=request.user, **options)
        return Response(self.OutputSerializer(run.as_dict()).data)

    @staticmethod
    def answer_options(*, tenant, data: dict, user=None) -> dict:
        """``ask_run``'s keyword arguments (but tenant and user) from validated input."""
        return {
            "question": data["question"],
            "conversation_id": data.get("conversation"),
            "pipeline": data.get("pipeline"),
            "k": data["k"],
            "strategy": data.get("strategy"),
            "window_size": data.get("window"),
            "reverse_pack": data["reverse_pack"],
            "use_llm": not data["extractive"],
            "source_ids": source_ids_for_names(tenant=tenant, names=data["sources"], user=user),
            "as_of": data.get("as_of"),
            "options": {
                "collapse": data["collapse"],
                "personalize": data.get("personalize", True),
                "summaries": data.get("summaries"),
            },
        }
