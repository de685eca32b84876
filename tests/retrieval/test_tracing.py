"""Traces of answer-pipeline runs: storage, compaction, API, admin, retention and the portal panel."""

import datetime as dt
import json
import math
from decimal import Decimal

import pytest
from celery.schedules import crontab
from django.contrib.auth.models import Permission
from django.db import IntegrityError, connection, transaction
from django.template.loader import render_to_string
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from config.celery import app as celery_app
from core.errors import NotFound
from llm import Usage
from portal.views import AskForm
from retrieval.models import Trace, TraceStep
from retrieval.selectors import trace_get
from retrieval.tasks import traces_prune_task
from retrieval.traces import trace_save, traces_prune
from retrieval.tracing import MAX_SUMMARY_CHARS, MAX_SUMMARY_ITEMS, summary_compact
from retrieval.types import Step
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, TenantFactory, UserFactory

STEP_ERROR = "LLM timed out; answered extractively"


def _steps(*, error: str = "") -> list[Step]:
    """Five steps of a run; the last one reports ``error`` when given."""
    return [
        Step(
            stage="rewrite.rephrase", ms=12.5, summary={"query": "boil spaghetti time"}, usage=Usage(1, 40, 8, 0.0001)
        ),
        Step(stage="retrieve.lexical", ms=3.0, summary={"candidates": 20}),
        Step(stage="retrieve.dense", ms=40.0, summary={"candidates": 20}),
        Step(stage="fuse.weighted", ms=0.4, summary={"top": [11, 12, 13]}),
        Step(
            stage="generate.cited",
            ms=300.0,
            summary={"passages": 3},
            error=error,
            usage=Usage(1, 900, 0, 0.0009),
        ),
    ]


def _trace(tenant, *, user=None, pipeline="default", question="How long do I boil spaghetti?", **kwargs) -> Trace:
    fields = {
        "answer": "Nine to eleven minutes [1].",
        "steps": _steps(),
        "usage": Usage(llm_calls=2, tokens_in=940, tokens_out=8, cost_usd=0.001),
        "degraded": False,
        "total_ms": 356.0,
        "config": {"k": 5, "strategy": "window"},
        **kwargs,
    }
    return trace_save(tenant=tenant, user=user, pipeline=pipeline, question=question, **fields)


# --- trace_save and summary_compact -----------------------------------------------------------


def test_saving_a_trace_stores_the_run_and_its_steps_in_order_in_a_few_queries(
    tenant, member, django_assert_max_num_queries
):
    # SAVEPOINT, INSERT trace, one bulk INSERT of the steps, RELEASE SAVEPOINT.
    with django_assert_max_num_queries(4):
        trace = _trace(tenant, user=member, steps=_steps(error=STEP_ERROR), degraded=True, error="generate.cited")

    stored = Trace.objects.for_tenant(tenant).get()
    assert stored.pk == trace.pk
    assert (stored.user, stored.pipeline, stored.degraded, stored.error) == (
        member,
        "default",
        True,
        "generate.cited",
    )
    assert (stored.llm_calls, stored.tokens_in, stored.tokens_out) == (2, 940, 8)
    assert stored.cost_usd == Decimal("0.001")
    assert stored.config == {"k": 5, "strategy": "window"}
    steps = list(stored.steps.order_by("order"))
    assert [(s.order, s.stage) for s in steps] == [
        (1, "rewrite.rephrase"),
        (2, "retrieve.lexical"),
        (3, "retrieve.dense"),
        (4, "fuse.weighted"),
        (5, "generate.cited"),
    ]
    assert (steps[0].tokens_in, steps[0].tokens_out, steps[0].summary) == (40, 8, {"query": "boil spaghetti time"})
    assert (steps[3].error, steps[4].error) == ("", STEP_ERROR)


def test_a_saved_traces_steps_carry_its_tenant(tenant):
    trace = _trace(tenant)
    assert set(TraceStep.objects.filter(trace=trace).values_list("tenant_id", flat=True)) == {tenant.pk}


def test_a_step_in_another_tenant_than_its_trace_is_refused(tenant):
    trace = _trace(tenant)
    other = TenantFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        with connection.cursor() as cursor:  # the key is deferred: check it at the INSERT
            cursor.execute("SET CONSTRAINTS tracestep_trace_same_tenant_fk IMMEDIATE")
        TraceStep.objects.create(tenant=other, trace=trace, order=99, stage="retrieve")


def test_a_trace_of_an_anonymous_run_has_no_user(tenant):
    trace = _trace(tenant, user=None)
    assert Trace.objects.get(pk=trace.pk).user is None


def test_summary_compaction_caps_lists_at_50_items_and_strings_at_2000_characters():
    compact = summary_compact({"ids": list(range(500)), "text": "x" * 10_000, "nested": [{"words": ["w"] * 80}]})

    assert compact["ids"] == list(range(MAX_SUMMARY_ITEMS))
    assert len(compact["text"]) == MAX_SUMMARY_CHARS
    assert compact["text"].endswith("…")
    assert len(compact["nested"][0]["words"]) == MAX_SUMMARY_ITEMS


def test_summary_compaction_makes_any_value_json_safe():
    compact = summary_compact(
        {
            1: (0.5, math.nan, math.inf),
            "when": dt.date(2025, 1, 2),
            "cost": Decimal("0.25"),
            "terms": {"pasta"},
            "raw": b"bytes",
            "null\x00char": "a\x00b",
            "other": object,
        }
    )

    assert json.loads(json.dumps(compact, allow_nan=False)) == compact
    assert compact["1"] == [0.5, None, None]
    assert compact["when"] == "2025-01-02"
    assert compact["cost"] == 0.25
    assert compact["terms"] == ["pasta"]
    assert compact["raw"] == "bytes"
    assert compact["nullchar"] == "ab"
    assert compact["other"] == "<class 'object'>"


def test_a_compact_summary_is_kept_as_it_is():
    summary = {"candidates": 20, "top": [[11, 0.93], [12, 0.5]], "note": "ok", "fallback": None, "llm": True}
    assert summary_compact(summary) == summary


def test_saved_step_summaries_are_compacted(tenant):
    trace = _trace(tenant, steps=[Step(stage="retrieve.dense", ms=1.0, summary={"ids": list(range(300))})])
    assert TraceStep.objects.get(trace=trace).summary == {"ids": list(range(MAX_SUMMARY_ITEMS))}


# --- trace_get and the API --------------------------------------------------------------------


def test_getting_another_tenants_trace_raises_not_found(tenant):
    theirs = _trace(TenantFactory())
    with pytest.raises(NotFound):
        trace_get(tenant=tenant, trace_id=theirs.pk)


def test_the_trace_api_returns_the_callers_trace_with_its_steps_in_order(tenant, member):
    trace = _trace(tenant, user=member, degraded=True, error="generate.cited: LLM timed out")

    response = client_for(member).get(reverse("api:trace-detail", args=[trace.pk]))

    assert response.status_code == 200
    data = response.json()
    assert {k: data[k] for k in ("id", "pipeline", "question", "degraded", "error", "user")} == {
        "id": trace.pk,
        "pipeline": "default",
        "question": "How long do I boil spaghetti?",
        "degraded": True,
        "error": "generate.cited: LLM timed out",
        "user": member.username,
    }
    assert data["answer"] == "Nine to eleven minutes [1]."
    assert data["total_ms"] == 356.0
    assert data["usage"] == {"llm_calls": 2, "tokens_in": 940, "tokens_out": 8, "cost_usd": 0.001}
    assert data["config"] == {"k": 5, "strategy": "window"}
    assert data["created_at"]
    assert [s["order"] for s in data["steps"]] == [1, 2, 3, 4, 5]
    assert data["steps"][0] == {
        "order": 1,
        "stage": "rewrite.rephrase",
        "ms": 12.5,
        "summary": {"query": "boil spaghetti time"},
        "error": "",
        "tokens_in": 40,
        "tokens_out": 8,
    }


def test_the_trace_api_shows_no_user_when_the_user_was_deleted(tenant, member):
    trace = _trace(tenant, user=UserFactory())
    trace.user.delete()
    response = client_for(member).get(reverse("api:trace-detail", args=[trace.pk]))
    assert response.status_code == 200
    assert response.json()["user"] is None


def test_the_trace_api_gives_404_for_another_tenants_trace(tenant, member):
    other = TenantFactory()
    theirs = _trace(other, user=MembershipFactory(tenant=other).user, question="Secret question?")

    response = client_for(member).get(reverse("api:trace-detail", args=[theirs.pk]))

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "Secret question" not in response.content.decode()


def test_the_trace_api_gives_404_for_a_missing_trace(member):
    response = client_for(member).get(reverse("api:trace-detail", args=[999_999]))
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Trace 999999 does not exist."}}


# --- admin ------------------------------------------------------------------------------------


@pytest.fixture
def tenant_admin_client(client, admin_member):
    """A tenant admin (staff, not superuser) holding the permission to view traces."""
    admin_member.user_permissions.add(Permission.objects.get(codename="view_trace"))
    client.force_login(admin_member)
    return client


@pytest.fixture
def traces(tenant, member):
    """Two traces of ``tenant`` (one degraded) and one of another tenant."""
    ok = _trace(tenant, user=member, pipeline="default", question="How long do I boil spaghetti?")
    # The degraded run: the reranker failed and the last step fell back.
    degraded = _trace(
        tenant,
        user=member,
        pipeline="superrag",
        question="How do I patch a tyre?",
        steps=_steps(error=STEP_ERROR),
        degraded=True,
        error="rerank.llm_scoring: circuit open",
    )
    theirs = _trace(TenantFactory(), pipeline="default", question="Secret bicycle question?")
    return ok, degraded, theirs


CHANGELIST = reverse("admin:retrieval_trace_changelist")


def test_a_tenant_admin_sees_only_their_tenants_traces(tenant_admin_client, traces):
    ok, degraded, _ = traces
    response = tenant_admin_client.get(CHANGELIST)
    assert response.status_code == 200
    assert set(response.context["cl"].queryset) == {ok, degraded}
    assert "Secret bicycle question" not in response.content.decode()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"pipeline": "superrag"}, "degraded"),
        ({"degraded__exact": "1"}, "degraded"),
        ({"has_error": "yes"}, "degraded"),
        ({"has_error": "no"}, "ok"),
        ({"q": "spaghetti"}, "ok"),
    ],
)
def test_the_trace_changelist_filters_by_pipeline_degradation_error_and_question(
    tenant_admin_client, traces, query, expected
):
    ok, degraded, _ = traces
    response = tenant_admin_client.get(CHANGELIST, query)
    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == [{"ok": ok, "degraded": degraded}[expected]]


def test_the_trace_changelist_filters_by_user_without_listing_other_tenants_users(tenant_admin_client, traces, member):
    _, _, theirs = traces
    stranger = MembershipFactory(tenant=theirs.tenant).user
    Trace.objects.filter(pk=theirs.pk).update(user=stranger)

    response = tenant_admin_client.get(CHANGELIST, {"user__id__exact": member.pk})

    assert response.status_code == 200
    assert len(response.context["cl"].queryset) == 2
    assert stranger.username not in response.content.decode()


def test_a_step_error_counts_as_an_error_in_the_changelist_filter(tenant_admin_client, tenant):
    failing = _trace(tenant, steps=[Step(stage="rewrite.hyde", ms=5.0, error="LLM refused")])
    _trace(tenant, steps=[Step(stage="retrieve.lexical", ms=5.0)], question="Fine?")
    response = tenant_admin_client.get(CHANGELIST, {"has_error": "yes"})
    assert list(response.context["cl"].queryset) == [failing]


def test_the_trace_change_page_shows_the_steps_in_order_with_their_summaries(tenant_admin_client, traces):
    _, degraded, _ = traces
    response = tenant_admin_client.get(reverse("admin:retrieval_trace_change", args=[degraded.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    positions = [
        html.index(stage) for stage in ("rewrite.rephrase", "retrieve.lexical", "fuse.weighted", "generate.cited")
    ]
    assert positions == sorted(positions)
    assert "&quot;query&quot;: &quot;boil spaghetti time&quot;" in html  # pretty JSON, escaped
    assert STEP_ERROR in html
    assert "rerank.llm_scoring: circuit open" in html
    assert 'name="_save"' not in html  # read-only


def test_a_tenant_admin_cannot_open_another_tenants_trace(tenant_admin_client, traces):
    _, _, theirs = traces
    response = tenant_admin_client.get(reverse("admin:retrieval_trace_change", args=[theirs.pk]))
    assert response.status_code in (302, 404)
    assert "Secret bicycle question" not in response.content.decode()


def test_traces_cannot_be_added_in_the_admin(client, db):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    assert client.get(reverse("admin:retrieval_trace_add")).status_code == 403


# --- retention --------------------------------------------------------------------------------


def _age(trace: Trace, days: float) -> None:
    Trace.objects.filter(pk=trace.pk).update(created_at=timezone.now() - dt.timedelta(days=days))


def test_pruning_deletes_only_traces_older_than_the_retention_period(tenant):
    old, older, recent = _trace(tenant), _trace(TenantFactory()), _trace(tenant)
    _age(old, 31)
    _age(older, 400)
    _age(recent, 29)

    assert traces_prune(older_than_days=30) == 2

    assert list(Trace.objects.all()) == [recent]
    assert set(TraceStep.objects.values_list("trace_id", flat=True)) == {recent.pk}


def test_pruning_deletes_in_batches(tenant, monkeypatch):
    monkeypatch.setattr("retrieval.traces.PRUNE_BATCH_SIZE", 2)
    for _ in range(5):
        _age(_trace(tenant), 60)
    assert traces_prune(older_than_days=30) == 5
    assert not Trace.objects.exists()


def test_the_prune_task_uses_the_retention_setting(tenant, settings):
    settings.KB_TRACE_RETENTION_DAYS = 7
    old, recent = _trace(tenant), _trace(tenant)
    _age(old, 8)
    _age(recent, 6)

    assert traces_prune_task.apply().get() == 1
    assert list(Trace.objects.all()) == [recent]


def test_the_beat_schedule_runs_the_prune_task_daily():
    entries = [e for e in celery_app.conf.beat_schedule.values() if e["task"] == "retrieval.tasks.traces_prune_task"]
    assert len(entries) == 1
    assert traces_prune_task.name == "retrieval.tasks.traces_prune_task"
    schedule = entries[0]["schedule"]
    assert isinstance(schedule, crontab)
    assert len(schedule.hour) == 1 and len(schedule.minute) == 1 and len(schedule.day_of_week) == 7  # daily


# --- portal -----------------------------------------------------------------------------------


def _render_ask(user, tenant, **answer) -> str:
    request = RequestFactory().post(reverse("portal:ask"))
    request.user = user
    context = {
        "form": AskForm(),
        "tenant": tenant,
        "answer": {
            "answer": "Nine to eleven minutes [1].",
            "mode": "llm",
            "citations": [],
            "timings_ms": {"total_ms": 356.4},
            "pipeline": "default",
            "trace_id": 42,
            "degraded": False,
            "degraded_reason": "",
            "steps": [s.as_dict() for s in _steps(error=STEP_ERROR)],
            "usage": {"llm_calls": 2, "tokens_in": 940, "tokens_out": 8, "cost_usd": 0.001},
            **answer,
        },
        "answer_html": "Nine to eleven minutes [1].",
        "citations": [],
    }
    return render_to_string("portal/ask.html", context, request=request)


def test_the_ask_page_shows_how_the_answer_was_made(tenant, member):
    html = _render_ask(member, tenant)

    assert "<details" in html
    assert "How this answer was made: 5 steps, 356 ms" in html
    positions = [html.index(f"<code>{s.stage}</code>") for s in _steps()]
    assert positions == sorted(positions)
    assert "300.0 ms" in html
    assert STEP_ERROR in html
    assert "<code>default</code>" in html
    assert "#42" in html
    assert reverse("admin:retrieval_trace_change", args=[42]) not in html  # members get no admin link
    assert "made with a fallback" not in html


def test_staff_get_a_link_to_the_trace_in_the_admin(tenant, admin_member):
    html = _render_ask(admin_member, tenant)
    assert f'href="{reverse("admin:retrieval_trace_change", args=[42])}"' in html


def test_a_degraded_answer_shows_a_notice_with_the_escaped_reason(tenant, member):
    html = _render_ask(
        member,
        tenant,
        degraded=True,
        degraded_reason="The reranker is unavailable <script>alert(1)</script>",
        steps=[{"stage": "rerank.<b>llm</b>", "ms": 2.0, "error": "circuit <open>"}],
    )

    assert "made with a fallback: The reranker is unavailable &lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in html
    assert "rerank.&lt;b&gt;llm&lt;/b&gt;" in html
    assert "circuit &lt;open&gt;" in html
    assert "1 step," in html


def test_an_answer_without_steps_shows_no_trace_panel(tenant, member):
    html = _render_ask(member, tenant, steps=[], trace_id=None)
    assert "How this answer was made" not in html
