"""Every LLM call made for a tenant counts against its daily LLM tokens, whatever started it.

The configured LLM is a scripted OpenAI-compatible endpoint on loopback (``FakeEndpoint``, which
counts the requests it gets and reports 12 prompt + 4 completion tokens per reply), reached
through the real ``LLMClient``: the client is where every call is checked and counted. Under a
0-token daily limit the quality gate behind ``POST /api/v1/settings/retrieval/``, an evaluation
with answers and judgment-list generation send no request at all (they degrade to their LLM-free
counterparts, or are refused with ``quota_exceeded``); under a limit they do call the LLM, and
every call's tokens count towards the tenant's usage: one ``LLMUsage`` row per call, an answer's
whether it is traced or not.
"""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from core.models import Membership
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import LLMUsage, TenantQuota
from knowledge.quotas import QuotaExceeded, llm_tokens_used, quota_usage
from knowledge.services import documents_ingest
from llm import LLMClient, LLMQuotaExceeded, circuit_reset, configured_llm, llm_metered
from quality.models import ConfigChange, EvaluationRun, JudgmentGeneration
from quality.services import judgment_list_import
from quality.services.generation import judgment_generation_start, judgment_list_generate
from quality.services.runs import judgment_list_evaluate
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from tests.factories import MembershipFactory, SourceFactory
from tests.llm.test_client import FakeEndpoint, Reply, completion

TOKENS_PER_CALL = 12 + 4  # FakeEndpoint's usage of every reply
DOCUMENTS = [
    ReadDocument(
        external_id="pets/cat-food",
        title="Feline nutrition",
        text="Feline nutrition\n\nAdult cats should eat two small meals a day of high-protein wet or dry food.",
    ),
    ReadDocument(
        external_id="recipes/pasta",
        title="Cooking pasta",
        text="Cooking pasta\n\nBoil the spaghetti in salted water for nine to eleven minutes until al dente.",
    ),
    ReadDocument(
        external_id="bikes/tyre",
        title="Fixing a flat tyre",
        text="Fixing a flat tyre\n\nPatch the punctured inner tube with glue and a rubber patch, then inflate it.",
    ),
]
JUDGMENTS = [
    ("cat", "How often should I feed my kitty?", [{"document": "pets/cat-food"}]),
    ("pasta", "How long do I boil spaghetti?", [{"document": "recipes/pasta"}]),
    ("tyre", "How do I repair a punctured bicycle tube?", [{"document": "bikes/tyre"}]),
    ("cat-food", "What food suits an adult cat?", [{"document": "pets/cat-food"}]),
    ("al-dente", "When is pasta al dente?", [{"document": "recipes/pasta"}]),
]
# What the scripted model answers, by the request's tool or JSON schema name.
JSON_REPLIES = {
    "search_our_database": {"query": "feeding schedule"},  # the rephrase stage's tool
    "question": {"question": "Which meal schedule suits a grown cat best?"},  # judgment generation
    "answer_judgement": {
        "question_reason": "It answers.",
        "question_score": 4,
        "context_reason": "Cited.",
        "context_score": 4,
    },
}
PROSE = "Boil it for nine to eleven minutes [1]."


def _scripted(_n: int, body: dict) -> Reply:
    names = [tool["function"]["name"] for tool in body.get("tools") or []]
    schema = (body.get("response_format") or {}).get("json_schema") or {}
    names.append(schema.get("name", ""))
    for name in names:
        if name in JSON_REPLIES:
            return Reply(body=completion(json.dumps(JSON_REPLIES[name])))
    return Reply(body=completion(PROSE))


@pytest.fixture
def endpoint(settings):
    """The configured LLM is a scripted endpoint that counts its requests."""
    server = FakeEndpoint()
    server.script = _scripted
    settings.KB_LLM_MODEL = "scripted-model"
    settings.OPENAI_BASE_URL = server.url
    settings.OPENAI_API_KEY = "test"
    settings.KB_LLM_RETRIES = 0
    settings.KB_QUOTA_LLM_TOKENS_PER_DAY = None
    circuit_reset()
    yield server
    circuit_reset()
    server.close()


@pytest.fixture
def judged(tenant):
    """The tenant with a tiny corpus and one judgment list of five questions on it."""
    documents_ingest(tenant=tenant, source=SourceFactory(tenant=tenant), documents=DOCUMENTS)
    judgment_list_import(tenant=tenant, name="five", origin="manual", judgments=JUDGMENTS)
    return tenant


def _limit(tenant, tokens: int) -> None:
    TenantQuota.objects.update_or_create(tenant=tenant, defaults={"max_llm_tokens_per_day": tokens})


def _propose(tenant, config: dict, capture) -> dict:
    """POST a retrieval-settings change as an admin; the gate runs at commit (no broker)."""
    client = APIClient()
    client.force_authenticate(user=MembershipFactory(tenant=tenant, role=Membership.Role.ADMIN).user)
    with capture(execute=True):
        response = client.post("/api/v1/settings/retrieval/", {"config": config}, format="json")
    assert response.status_code == 202, response.json()
    return client.get(f"/api/v1/settings/retrieval/changes/{response.json()['id']}/").json()


# --- The metering point -------------------------------------------------------------------------


def test_a_metered_call_over_the_limit_is_refused_before_any_request(tenant, endpoint):
    _limit(tenant, 0)
    with llm_metered(tenant=tenant, purpose="enrichment"), pytest.raises(LLMQuotaExceeded) as refused:
        configured_llm().chat([{"role": "user", "content": "Hello?"}])

    assert endpoint.requests == []
    assert refused.value.code == "quota_exceeded" and refused.value.status == 429
    assert "may use 0 LLM tokens a day" in refused.value.message


@pytest.mark.django_db(transaction=True)  # the map's worker thread writes on its own connection
def test_a_metered_call_under_the_limit_is_counted_for_its_tenant_also_from_a_map_thread(
    tenant, other_tenant_corpus, endpoint
):
    _limit(tenant, 1000)
    client = LLMClient("scripted-model", base_url=endpoint.url, api_key="test", retries=0)
    with llm_metered(tenant=tenant, purpose="summaries"):
        client.chat([{"role": "user", "content": "Hello?"}])
        client.map(lambda _: client.chat([{"role": "user", "content": "Again?"}]), [1])

    assert len(endpoint.requests) == 2
    assert llm_tokens_used(tenant=tenant) == 2 * TOKENS_PER_CALL
    assert llm_tokens_used(tenant=other_tenant_corpus) == 0
    assert set(LLMUsage.objects.for_tenant(tenant).values_list("purpose", flat=True)) == {"summaries"}


# --- Answers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tracing", [True, False])
def test_an_answers_llm_calls_are_recorded_once_as_answer_usage_traced_or_not(judged, endpoint, settings, tracing):
    settings.KB_TRACING = tracing
    _limit(judged, 100_000)

    run = pipeline_answer(AnswerRequest(question="How long do I boil spaghetti?", pipeline="simple"), tenant=judged)

    assert (run.trace_id is not None) is tracing
    assert endpoint.requests and not run.degraded
    assert llm_tokens_used(tenant=judged) == len(endpoint.requests) * TOKENS_PER_CALL
    assert set(LLMUsage.objects.for_tenant(judged).values_list("purpose", flat=True)) == {"answer"}


# --- The quality gate ---------------------------------------------------------------------------


def test_the_quality_gate_makes_no_llm_call_under_a_zero_token_limit(
    judged, endpoint, django_capture_on_commit_callbacks
):
    _limit(judged, 0)

    change = _propose(judged, {"pipeline": "rephrase"}, django_capture_on_commit_callbacks)

    assert endpoint.requests == []
    assert change["status"] in ("accepted", "refused")
    proposed = EvaluationRun.objects.get(pk=ConfigChange.objects.get(pk=change["id"]).runs["five"]["proposed"])
    assert proposed.metrics["degraded"] == 5 and proposed.metrics["llm_calls"] == 0
    assert all("This tenant may use 0 LLM tokens a day" in q["degraded_reason"] for q in proposed.per_query)


def test_the_quality_gates_llm_calls_count_against_the_tenants_tokens(
    judged, endpoint, django_capture_on_commit_callbacks
):
    _limit(judged, 100_000)

    change = _propose(judged, {"pipeline": "rephrase"}, django_capture_on_commit_callbacks)

    assert change["status"] in ("accepted", "refused")
    assert len(endpoint.requests) == 5  # one rephrase per judged question of the proposed run
    assert llm_tokens_used(tenant=judged) == 5 * TOKENS_PER_CALL
    assert quota_usage(tenant=judged)["llm_tokens_per_day"].used == 5 * TOKENS_PER_CALL
    assert set(LLMUsage.objects.for_tenant(judged).values_list("purpose", flat=True)) == {"quality_gate"}


def test_the_quality_gate_stops_calling_the_llm_once_the_tokens_run_out(
    judged, endpoint, django_capture_on_commit_callbacks
):
    _limit(judged, 2 * TOKENS_PER_CALL)

    _propose(judged, {"pipeline": "rephrase"}, django_capture_on_commit_callbacks)

    assert len(endpoint.requests) == 2
    assert llm_tokens_used(tenant=judged) == 2 * TOKENS_PER_CALL


# --- Evaluations with answers -------------------------------------------------------------------


def test_an_evaluation_with_answers_makes_no_llm_call_under_a_zero_token_limit(judged, endpoint):
    _limit(judged, 0)

    [run] = judgment_list_evaluate(tenant=judged, name="five", pipelines=["rephrase"], answers=True)

    assert endpoint.requests == []
    assert {q["answer"]["mode"] for q in run.per_query} == {"extractive"}
    assert run.metrics["answer_llm_calls"] == 0 and run.metrics["answers_judged"] == 0
    assert llm_tokens_used(tenant=judged) == 0


def test_an_evaluation_with_answers_counts_every_llm_call_it_makes(judged, endpoint):
    _limit(judged, 100_000)

    [run] = judgment_list_evaluate(tenant=judged, name="five", pipelines=["rephrase"], answers=True)

    # Five rephrases for the ranking; per answer a rephrase, the answer and the judge's grade.
    assert len(endpoint.requests) == 5 + 5 * 3
    assert run.metrics["answers_judged"] == 5
    assert llm_tokens_used(tenant=judged) == len(endpoint.requests) * TOKENS_PER_CALL
    assert set(LLMUsage.objects.for_tenant(judged).values_list("purpose", flat=True)) == {"evaluation"}


# --- Judgment-list generation -------------------------------------------------------------------


def test_generating_a_judgment_list_is_refused_under_a_zero_token_limit(judged, endpoint):
    _limit(judged, 0)

    with pytest.raises(QuotaExceeded) as refused:
        judgment_generation_start(tenant=judged, sample=2)

    assert refused.value.code == "quota_exceeded" and refused.value.status == 429
    assert not JudgmentGeneration.objects.for_tenant(judged).exists()
    assert endpoint.requests == []


def test_a_queued_generation_fails_without_calling_the_llm_once_the_tokens_are_used_up(judged, endpoint):
    generation = JudgmentGeneration.objects.create(tenant=judged, sample=2, seed=0)
    _limit(judged, 0)

    generation = judgment_list_generate(generation_id=generation.pk)

    assert endpoint.requests == []
    assert generation.status == JudgmentGeneration.Status.FAILED
    assert generation.error.startswith("quota_exceeded: This tenant may use 0 LLM tokens a day")
    assert generation.judgment_list is None


def test_generating_a_judgment_list_counts_its_llm_calls(judged, endpoint, django_capture_on_commit_callbacks):
    _limit(judged, 100_000)

    with django_capture_on_commit_callbacks(execute=True):
        generation = judgment_generation_start(tenant=judged, sample=2)
    generation.refresh_from_db()

    assert generation.status == JudgmentGeneration.Status.DONE, generation.error
    assert len(endpoint.requests) >= 2
    assert llm_tokens_used(tenant=judged) == len(endpoint.requests) * TOKENS_PER_CALL
    assert set(LLMUsage.objects.for_tenant(judged).values_list("purpose", flat=True)) == {"judgments"}
