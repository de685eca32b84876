"""The LLM tokens quota at the answer pipeline: the day's tokens are the recorded LLM calls' (an
answer's calls are recorded whether it is traced or not: ``tests/security/test_llm_quota.py``), and
a tenant that used its tokens of the last 24 hours is answered without the LLM."""

from datetime import timedelta

import pytest
from django.utils import timezone

from knowledge.models import LLMUsage, TenantQuota
from knowledge.quotas import MB, QuotaUsage, llm_tokens_used
from retrieval.models import Trace
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from tests.factories import TraceFactory
from tests.retrieval.doubles import ScriptedLLM

QUESTION = "How long do I boil spaghetti?"


@pytest.fixture(autouse=True)
def no_installation_limits(settings):
    for name in ("DOCUMENTS", "STORED_MB", "CHUNKS", "SOURCES", "SYNCS_PER_DAY", "LLM_TOKENS_PER_DAY"):
        setattr(settings, f"KB_QUOTA_{name}", None)


def used(tenant, *, tokens_in: int, tokens_out: int = 0, hours_ago: float = 1) -> LLMUsage:
    """One recorded LLM call of ``tenant``, made ``hours_ago`` hours ago."""
    usage = LLMUsage.objects.create(tenant=tenant, purpose="answer", tokens_in=tokens_in, tokens_out=tokens_out)
    LLMUsage.objects.filter(pk=usage.pk).update(created_at=timezone.now() - timedelta(hours=hours_ago))
    return usage


def answer(tenant, llm, **kwargs):
    return pipeline_answer(AnswerRequest(question=QUESTION), tenant=tenant, llm=llm, **kwargs)


def test_the_tokens_of_the_last_24_hours_calls_are_counted_and_older_ones_are_not(corpus, other_tenant_corpus):
    used(corpus, tokens_in=700, tokens_out=50)
    used(corpus, tokens_in=200, tokens_out=50, hours_ago=23)
    used(corpus, tokens_in=10_000, hours_ago=25)
    used(other_tenant_corpus, tokens_in=10_000)

    assert llm_tokens_used(tenant=corpus) == 1000


def test_traces_tokens_are_not_counted_twice(corpus):
    TraceFactory(tenant=corpus, tokens_in=5_000, tokens_out=5_000)
    used(corpus, tokens_in=300)

    assert llm_tokens_used(tenant=corpus) == 300


def test_an_answer_over_the_token_limit_is_extractive_degraded_and_gives_the_figures(corpus):
    TenantQuota.objects.create(tenant=corpus, max_llm_tokens_per_day=1000)
    used(corpus, tokens_in=900, tokens_out=150)
    llm = ScriptedLLM(chat_reply="Boil it for nine to eleven minutes [1].")

    run = answer(corpus, llm, trace=True)

    assert llm.calls == []
    assert run.answer.mode == "extractive" and run.answer.citations
    assert run.degraded
    assert run.degraded_reason == (
        "quota_exceeded: This tenant may use 1,000 LLM tokens a day and has used 1,050 in the last 24 hours; "
        "try again later or ask the operator to raise the limit."
    )
    assert Trace.objects.get(pk=run.trace_id).error == run.degraded_reason


def test_a_tenant_with_a_token_limit_is_not_traced_when_tracing_is_off(corpus, settings):
    settings.KB_TRACING = False
    TenantQuota.objects.create(tenant=corpus, max_llm_tokens_per_day=100_000)
    llm = ScriptedLLM(chat_reply="Nine minutes [1].")

    run = answer(corpus, llm)

    assert llm.calls and not run.degraded
    assert run.trace_id is None and not Trace.objects.for_tenant(corpus).exists()


def test_runs_without_a_trace_such_as_evaluations_are_limited_too_and_stay_untraced(corpus):
    TenantQuota.objects.create(tenant=corpus, max_llm_tokens_per_day=0)
    llm = ScriptedLLM(chat_reply="Boil it for nine to eleven minutes [1].")

    run = answer(corpus, llm, trace=False)

    assert llm.calls == [] and run.answer.mode == "extractive" and run.trace_id is None
    assert run.degraded and run.degraded_reason.startswith("quota_exceeded: ")


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "unlimited"), (677, "677 bytes"), (12_800, "12.5 KB"), (5 * MB, "5.0 MB"), (1536 * MB, "1,536.0 MB")],
)
def test_stored_bytes_are_shown_in_binary_units_for_people(value, shown):
    assert QuotaUsage(name="stored_bytes", limit=None, used=0).text(value) == shown
