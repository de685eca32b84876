"""REST API of asking: ``POST /api/v1/ask/`` answers a question with cited passages, and
``POST /api/v1/ask/stream/`` streams the same run as Server-Sent Events.

Both answer through ``people.asking`` (the one way every caller asks), so the caller's answer is
kept as the next turn of their conversation: the answer carries its ``conversation_id``, and
sending it back as ``conversation`` asks a follow-up.
"""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ERRORS, ErrorSerializer
from core.memberships import tenant_for_request
from people.asking import ask, ask_stream
from retrieval.apis import COLLAPSE_HELP, PERSONALIZE_HELP, SUMMARIES_HELP, ChunkReferenceSerializer
from retrieval.config import MAX_QUERY_CHARS
from retrieval.pipeline import PIPELINE_NAMES
from retrieval.request import AnswerRequest
from retrieval.streaming import CONTENT_TYPE, HEADERS


def ask_request(data: dict, *, tenant, user) -> AnswerRequest:
    """The ``AnswerRequest`` of ``AskApi.InputSerializer``'s validated data, its source names
    resolved for ``user`` (``InvalidInput``, code ``unknown_source``, for an unknown one)."""
    return AnswerRequest.for_sources(
        tenant=tenant,
        user=user,
        sources=data["sources"],
        question=data["question"],
        conversation_id=data.get("conversation"),
        pipeline=data.get("pipeline"),
        k=data["k"],
        strategy=data.get("strategy"),
        window_size=data.get("window"),
        reverse_pack=data["reverse_pack"],
        use_llm=not data["extractive"],
        as_of=data.get("as_of"),
        collapse=data["collapse"],
        personalize=data.get("personalize", True),
        summaries=data.get("summaries"),
    )


@extend_schema_serializer(component_name="CitationFigure")
class CitationFigureSerializer(serializers.Serializer):
    """A figure the cited passage holds (a PDF figure, or a picture of a .docx, .pptx or .odt)."""

    index = serializers.IntegerField(help_text="Its place in the document version's figure list.")
    caption = serializers.CharField(help_text="Its caption (else an office picture's alternative or OCR text).")
    page = serializers.IntegerField(
        allow_null=True, help_text="The page (1-based) it is on; a presentation's slide; null without one."
    )
    url = serializers.CharField(
        help_text="Its picture, a PNG (an absolute path: GET /api/v1/documents/<id>/versions/<n>/figures/"
        "<index>.png with the same token; 404 to a caller who may not see the document)."
    )


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
            figures = CitationFigureSerializer(
                many=True, help_text="The figures the cited passage holds, with their pictures' URLs; [] for none."
            )

        class SentenceSerializer(serializers.Serializer):
            text = serializers.CharField(help_text="The sentence, its [n] markers removed.")
            citations = serializers.ListField(child=serializers.IntegerField(), help_text="The n it cites.")
            supported = serializers.BooleanField(help_text="False when no passage supports it.")
            added = serializers.BooleanField(help_text="True when its citation was filled in by the citation check.")

        question = serializers.CharField()
        short_answer = serializers.CharField(
            allow_blank=True,
            help_text="The direct answer (a name, number, date, yes/no or one short sentence); "
            "empty when the passages do not hold the answer or, without an LLM, when the question "
            "has no one-sentence answer or no sentence answers it surely (then `lead` leads).",
        )

        class LeadSerializer(serializers.Serializer):
            n = serializers.IntegerField(help_text="The citation number of the passage.")
            document = serializers.CharField(allow_blank=True, help_text="The document's external id.")
            title = serializers.CharField(allow_blank=True, help_text="The document's title.")
            section = serializers.CharField(allow_blank=True, help_text="Its section path; empty at the top.")
            uri = serializers.CharField(allow_blank=True)
            text = serializers.CharField(help_text="The passage's most relevant paragraph.")

        lead = LeadSerializer(
            allow_null=True,
            required=False,
            help_text="Extractive answers without a short answer (how-to questions, unsure facts): "
            "the passage to show first; null otherwise.",
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
        syncing = serializers.ListField(
            child=serializers.CharField(),
            help_text="Sources still syncing when this was answered: their documents may be missing from it.",
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
        question = ask_request(serializer.validated_data, tenant=tenant, user=request.user)
        run = ask(question, tenant=tenant, user=request.user)
        return Response(self.OutputSerializer(run.as_dict()).data)


EVENTS_DESCRIPTION = """\
A stream of Server-Sent Events (`text/event-stream`), each `event: <name>` with one `data:` line of JSON:

* `step`, after each stage of the pipeline: `{"stage", "ms", "summary", "error"?}`; the summary
  is the stage's own, compacted (queries issued, candidates with scores, chunks kept, passages,
  expansion terms, the LLM's reply).
* `short_answer`, once, when the LLM has written its short answer: `{"text"}` (the direct
  answer; none for an extractive answer or when the passages do not hold the answer).
* `token`, while an LLM writes the explanation: `{"text"}`, a piece of its text as the LLM
  writes it (decoded from the LLM's JSON reply, never raw JSON; none for an extractive answer).
  The `answer` event's text is the one to keep: its citations are checked against the
  passages, uncited sentences are cited or marked unsupported, and markers a document forged
  are defanged.
* `answer`, once, last: the same JSON as `POST /api/v1/ask/` (`AskOutput`: short_answer,
  answer, citations, sentences, citation_coverage, unsupported, pipeline, trace_id, degraded,
  steps, usage).
* `error`, instead of `answer` when the run fails: `{"error": {"code", "message"}}`. The stream
  then ends normally.

Lines starting with `:` are keep-alive comments. Invalid input is a plain JSON 400 before any
event.
"""

EXAMPLE = (
    'event: step\ndata: {"stage":"retrieve","ms":41.2,"summary":{"mode":"hybrid","counts":{"lexical":3,"dense":3}}}\n\n'
    'event: step\ndata: {"stage":"fuse","ms":3.1,"summary":{"fusion":"weighted","kept":[[12,0.93]]}}\n\n'
    'event: step\ndata: {"stage":"pack","ms":2.0,"summary":{"strategy":"window","passages":[{"chunk_id":12}]}}\n\n'
    'event: short_answer\ndata: {"text":"Nine to eleven minutes"}\n\n'
    'event: token\ndata: {"text":"Cook it "}\n\n'
    'event: token\ndata: {"text":"nine to eleven minutes [1]."}\n\n'
    'event: step\ndata: {"stage":"generate","ms":812.5,"summary":{"mode":"llm","citations":[1]}}\n\n'
    'event: answer\ndata: {"question":"How long should spaghetti cook?","short_answer":"Nine to eleven minutes",'
    '"answer":"Cook it nine to eleven minutes [1].","citations":[...],"sentences":[{"text":"Cook it nine to '
    'eleven minutes.","citations":[1],"supported":true,"added":false}],"citation_coverage":1.0,"unsupported":[],'
    '"pipeline":"simple","trace_id":7,"degraded":false,"steps":[...],"usage":{...}}\n\n'
)


class JSONOnlyNegotiation(BaseContentNegotiation):
    """Errors before the stream starts are JSON whatever the ``Accept`` header asks for
    (a client of this endpoint sends ``Accept: text/event-stream``)."""

    def select_parser(self, request, parsers):
        return DefaultContentNegotiation().select_parser(request, parsers)

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class AskStreamApi(APIView):
    """Answer a question like ``POST /api/v1/ask/``, streaming the run as Server-Sent Events."""

    renderer_classes = [JSONRenderer]
    content_negotiation_class = JSONOnlyNegotiation

    @extend_schema(
        operation_id="ask_stream",
        request=AskApi.InputSerializer,
        responses={
            (200, CONTENT_TYPE): OpenApiResponse(
                response=OpenApiTypes.STR,
                description=EVENTS_DESCRIPTION,
                examples=[OpenApiExample("A streamed LLM answer", value=EXAMPLE, media_type=CONTENT_TYPE)],
            ),
            **ERRORS,
        },
    )
    def post(self, request):
        tenant = tenant_for_request(request)
        serializer = AskApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        question = ask_request(serializer.validated_data, tenant=tenant, user=request.user)
        events = ask_stream(
            question,
            tenant=tenant,
            user=request.user,
            present=lambda answer: AskApi.OutputSerializer(answer).data,
        )
        return StreamingHttpResponse(events, content_type=CONTENT_TYPE, headers=HEADERS)
