"""Answers, LLM calls, requests and tasks exported as OpenTelemetry spans to a real OTLP receiver."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from django.db import connection
from rest_framework.test import APIClient

from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from tests.api.conftest import client_for
from tests.conftest import redis_url
from tests.telemetry.conftest import QUESTION

ROOT = Path(__file__).resolve().parents[2]
BROKER = redis_url(13)  # this module's own database (jobs tests use 14 and 15)


def _by_name(spans, name):
    found = [s for s in spans if s.name == name]
    assert found, f"no span {name!r} among {[s.name for s in spans]}"
    return found[0]


def _children(spans, parent):
    return [s for s in spans if s.parent_id == parent.span_id]


def test_an_answer_is_exported_as_one_span_per_stage_with_the_tenant_and_trace_id(
    corpus, member, telemetry_on, llm_endpoint
):
    response = client_for(member).post("/api/v1/ask/", {"question": QUESTION}, format="json")
    assert response.status_code == 200
    trace_id = response.json()["trace_id"]
    assert telemetry_on.flush()
    spans = telemetry_on.spans()

    request = next(s for s in spans if s.kind == "server")
    assert request.attributes["http.route"] == "api/v1/ask/"
    assert request.resource["service.name"] == "kb-tests"
    answer = _by_name(spans, "kb.answer")
    assert answer.parent_id == request.span_id and answer.trace_id == request.trace_id
    assert answer.attributes["kb.trace_id"] == trace_id
    assert answer.attributes["kb.tenant.slug"] == corpus.slug
    assert answer.attributes["kb.tenant.id"] == corpus.pk
    assert answer.attributes["kb.pipeline"] == "simple"
    assert answer.attributes["kb.llm.calls"] == 1 and answer.attributes["kb.degraded"] is False

    stages = {s.attributes["kb.stage"]: s for s in _children(spans, answer)}
    assert {"scope", "retrieve", "fuse", "pack", "generate"} <= set(stages)
    for stage in stages.values():
        assert stage.name == f"kb.stage {stage.attributes['kb.stage']}"
        assert stage.attributes["kb.tenant.slug"] == corpus.slug and stage.attributes["kb.step.ms"] >= 0
    retrieve = stages["retrieve"].attributes
    assert retrieve["kb.step.mode"] == "hybrid" and retrieve["kb.step.counts.lexical"] >= 1
    assert retrieve["kb.step.filter.tenant"] == corpus.pk
    assert stages["fuse"].attributes["kb.step.fusion"] == "weighted"
    assert stages["pack"].attributes["kb.step.strategy"] == "window"
    assert stages["generate"].attributes["kb.step.mode"] == "llm"
    assert stages["generate"].attributes["kb.step.citations"] == [1]

    llm = _by_name(spans, "chat scripted-model")
    assert llm.kind == "client" and llm.parent_id == stages["generate"].span_id
    assert llm.attributes["gen_ai.system"] == "openai"
    assert llm.attributes["gen_ai.operation.name"] == "chat"
    assert llm.attributes["gen_ai.request.model"] == "scripted-model"
    assert llm.attributes["gen_ai.response.model"] == "scripted-model"
    assert llm.attributes["gen_ai.usage.input_tokens"] == 12
    assert llm.attributes["gen_ai.usage.output_tokens"] == 4
    assert llm.attributes["server.address"] == "127.0.0.1"

    # The question, and the queries and reply made of it, are nowhere by default.
    for span in spans:
        assert not any("spaghetti" in value for value in span.values()), span


def test_the_question_and_its_queries_are_exported_only_when_the_operator_turns_it_on(
    corpus, telemetry_on, llm_endpoint, settings
):
    settings.KB_OTEL_CAPTURE_QUESTIONS = True
    run = pipeline_answer(AnswerRequest(question=QUESTION), tenant=corpus)
    assert telemetry_on.flush()
    spans = telemetry_on.spans()
    answer = _by_name(spans, "kb.answer")
    assert answer.attributes["kb.question"] == QUESTION
    assert answer.attributes["kb.trace_id"] == run.trace_id
    retrieve = _by_name(spans, "kb.stage retrieve").attributes
    assert retrieve["kb.step.queries.lexical"] == QUESTION and retrieve["kb.step.queries.dense"] == QUESTION
    assert _by_name(spans, "kb.stage generate").attributes["kb.step.short_answer"] == "Nine to eleven minutes"


def test_a_streamed_answer_reports_the_time_to_its_first_token(corpus, telemetry_on, llm_endpoint):
    events = []
    pipeline_answer(AnswerRequest(question=QUESTION), tenant=corpus, on_event=lambda event, data: events.append(event))
    assert "token" in events
    assert telemetry_on.flush()
    llm = _by_name(telemetry_on.spans(), "chat scripted-model")
    assert llm.attributes["kb.llm.operation"] == "stream"
    assert 0 < llm.attributes["gen_ai.response.time_to_first_chunk"] < 30
    assert llm.attributes["gen_ai.usage.input_tokens"] == 12


def test_a_failing_llm_marks_its_span_and_the_degraded_stage(corpus, telemetry_on, llm_endpoint):
    llm_endpoint.fail_status = 500
    run = pipeline_answer(AnswerRequest(question=QUESTION), tenant=corpus)
    assert run.degraded and run.answer.mode == "extractive"
    assert telemetry_on.flush()
    spans = telemetry_on.spans()
    llm = _by_name(spans, "chat scripted-model")
    assert llm.status == "error" and llm.attributes["error.type"] == "LLMHTTPError"
    assert llm.attributes["http.response.status_code"] == 500
    generate = _by_name(spans, "kb.stage generate")
    assert generate.status == "error" and generate.attributes["kb.step.degraded"] is True
    assert "kb.step.error" not in generate.attributes  # its text only with KB_OTEL_CAPTURE_QUESTIONS
    assert _by_name(spans, "kb.answer").attributes["kb.degraded_stages"] == ["generate"]


def test_a_search_request_is_a_retrieve_span_inside_the_django_request_span(corpus, member, telemetry_on):
    client = APIClient()
    client.force_authenticate(member)
    response = client.post("/api/v1/search/", {"query": "bicycle tyre puncture"}, format="json")
    assert response.status_code == 200
    assert telemetry_on.flush()
    spans = telemetry_on.spans()
    request = next(s for s in spans if s.kind == "server")
    assert request.attributes["http.route"] == "api/v1/search/"
    assert request.attributes.get("http.response.status_code", request.attributes.get("http.status_code")) == 200
    retrieve = _by_name(spans, "kb.retrieve")
    assert retrieve.parent_id == request.span_id and retrieve.attributes["kb.results"] >= 1
    assert {s.attributes["kb.stage"] for s in _children(spans, retrieve)} >= {"scope", "retrieve", "fuse"}


def test_a_request_spans_url_leaves_out_its_query_string_unless_capture_is_on(member, telemetry_on, settings):
    client = client_for(member)
    assert client.get("/api/v1/documents/?search=spaghetti+sauce").status_code == 200
    settings.KB_OTEL_CAPTURE_QUESTIONS = True
    assert client.get("/api/v1/documents/?search=pasta+water").status_code == 200
    assert telemetry_on.flush()
    urls = [
        s.attributes.get("http.url", s.attributes.get("url.full", ""))
        for s in telemetry_on.spans()
        if s.kind == "server"
    ]
    assert len(urls) == 2 and urls[0].endswith("/api/v1/documents/")
    assert "pasta" in urls[1]


def test_the_real_local_llm_answers_with_a_gen_ai_span(corpus, telemetry_on, local_llm_url):
    from llm import LLMClient
    from llm.local import MODEL_ALIAS

    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600)
    run = pipeline_answer(
        AnswerRequest(question=QUESTION, k=2, strategy="top_n"),
        tenant=corpus,
        llm=llm,
        on_event=lambda event, data: None,
    )
    assert run.answer.mode == "llm", run.degraded_reason
    assert telemetry_on.flush()
    spans = telemetry_on.spans()
    llm_span = _by_name(spans, f"chat {MODEL_ALIAS}")
    assert llm_span.parent_id == _by_name(spans, "kb.stage generate").span_id
    attributes = llm_span.attributes
    assert attributes["gen_ai.system"] == "openai" and attributes["gen_ai.request.model"] == MODEL_ALIAS
    assert attributes["gen_ai.usage.input_tokens"] == run.usage.tokens_in > 100  # the prompt holds two passages
    assert attributes["gen_ai.usage.output_tokens"] == run.usage.tokens_out > 0
    assert 0 < attributes["gen_ai.response.time_to_first_chunk"] < 600
    assert _by_name(spans, "kb.answer").attributes["kb.trace_id"] == run.trace_id


def _database_url() -> str:
    from urllib.parse import quote

    db = connection.settings_dict
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgresql://{db['USER']}:{quote(db['PASSWORD'] or '')}@{quote(db['HOST'], safe='')}{port}/{db['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_a_task_run_by_a_real_celery_worker_is_a_span_in_the_trace_that_queued_it(telemetry_on, tmp_path):
    from config.celery import app
    from core.queue import task_get

    client = redis.Redis.from_url(BROKER)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not running on 127.0.0.1:6379 ({exc}).")
    queue = f"kb-test-telemetry-{uuid.uuid4().hex[:12]}"
    task = "retrieval.tasks.traces_prune_task"
    previous = {key: app.conf[key] for key in ("broker_url", "task_always_eager", "result_backend", "task_routes")}
    app.conf.update(
        broker_url=BROKER, task_always_eager=False, result_backend=None, task_routes={task: {"queue": queue}}
    )
    _forget_connections(app)
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "CELERY_BROKER_URL": BROKER,
        "OTEL_EXPORTER_OTLP_ENDPOINT": telemetry_on.url,
        "OTEL_SERVICE_NAME": "kb-worker",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "HF_HUB_OFFLINE": "1",
    }
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "prefork", "-c", "1", "-Q", queue]
    command += ["-n", f"telemetry-{queue}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        task_get(task).delay()
        assert telemetry_on.flush()
        published = [s for s in telemetry_on.spans() if s.kind == "producer"]
        assert published and published[0].name == f"apply_async/{task}"
        run = telemetry_on.wait_for(
            lambda spans: [s for s in spans if s.kind == "consumer" and s.resource.get("service.name") == "kb-worker"],
            timeout_s=120,
        )[0]
    except AssertionError:
        raise AssertionError(log.read_text()[-3000:]) from None
    finally:
        worker.terminate()
        worker.wait(60)
        app.conf.update(previous)
        _forget_connections(app)
        client.delete(queue)
    assert run.name == f"run/{task}"
    assert run.attributes["celery.task_name"] == task and run.attributes["celery.state"] == "SUCCESS"
    assert run.trace_id == published[0].trace_id and run.parent_id == published[0].span_id


def _forget_connections(app) -> None:
    """Drop the app's cached connections, producers and router, which keep the settings of first use."""
    app._pool = None
    app.amqp._producer_pool = None
    app.amqp._rtable = None
    app.amqp.router = app.amqp.Router()


@pytest.mark.django_db(transaction=True)
def test_with_no_endpoint_a_search_and_an_answer_load_no_tracing_sdk_exporter_or_instrumentation(corpus):
    # redis-py imports OpenTelemetry's metrics SDK whenever it is installed (datasketch imports
    # redis.asyncio); the tracing SDK, the exporter and the instrumentations are this project's.
    tracing = ("opentelemetry.sdk.trace", "opentelemetry.exporter", "opentelemetry.instrumentation")
    script = (
        "import sys, django; django.setup()\n"
        "from core.models import Tenant\n"
        "from retrieval.pipeline import pipeline_answer\n"
        "from retrieval.request import AnswerRequest\n"
        "from retrieval.search import chunk_search\n"
        f"tenant = Tenant.objects.get(pk={corpus.pk})\n"
        "assert chunk_search(AnswerRequest(question='bicycle tyre'), tenant=tenant).results\n"
        "question = AnswerRequest(question='Who approves expense reports?')\n"
        "assert pipeline_answer(question, tenant=tenant).answer.citations\n"
        "from core.telemetry import telemetry_enabled\n"
        "assert not telemetry_enabled()\n"
        f"print(sorted(m for m in sys.modules if m.startswith({tracing!r})))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(DATABASE_URL=_database_url(), DJANGO_SETTINGS_MODULE="config.settings", HF_HUB_OFFLINE="1")
    env.pop("KB_LLM_MODEL", None)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_summarys_query_terms_and_text_become_counts_unless_capture_is_on():
    from retrieval.tracing import summary_attributes

    summary = {
        "mode": "hybrid",
        "queries": {"lexical": {"spaghetti": 1.0, "boil": 0.5}, "dense": "How long do I boil spaghetti?"},
        "terms": ["spaghetti", "boil"],
        "counts": {"lexical": 2, "dense": 3},
        "kept": [[21, 1.0], [19, 0.25]],
        "coverage": 0.5,
        "fallback": True,
    }
    hidden = summary_attributes(summary, capture=False)
    assert hidden == {
        "kb.step.mode": "hybrid",
        "kb.step.queries.count": 2,
        "kb.step.terms.count": 2,
        "kb.step.counts.lexical": 2,
        "kb.step.counts.dense": 3,
        "kb.step.kept.count": 2,
        "kb.step.coverage": 0.5,
        "kb.step.fallback": True,
    }
    shown = summary_attributes(summary, capture=True)
    assert shown["kb.step.queries.lexical.spaghetti"] == 1.0
    assert shown["kb.step.queries.dense"] == "How long do I boil spaghetti?"
    assert shown["kb.step.terms"] == '["spaghetti", "boil"]'
    assert shown["kb.step.kept"] == "[[21, 1.0], [19, 0.25]]"
