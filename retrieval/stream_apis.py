"""REST API of streamed answers: ``POST /api/v1/ask/stream/`` answers as Server-Sent Events."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from core.api import ERRORS
from core.memberships import tenant_for_request
from retrieval.apis import AskApi, ask_run
from retrieval.streaming import CONTENT_TYPE, HEADERS, answer_events

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
        data = serializer.validated_data
        events = answer_events(
            tenant=tenant,
            user=request.user,
            present=lambda answer: AskApi.OutputSerializer(answer).data,
            runner=ask_run,
            **AskApi.answer_options(tenant=tenant, data=data, user=request.user),
        )
        return StreamingHttpResponse(events, content_type=CONTENT_TYPE, headers=HEADERS)
