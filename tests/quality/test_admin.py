import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from tests.factories import EvaluationRunFactory, TenantFactory, UserFactory


def _run(tenant, ndcg, per_query, **fields):
    """A run in ``tenant`` of mean nDCG@10 ``ndcg`` over ``per_query``, ``[(query_id, nDCG@10)]``."""
    return EvaluationRunFactory(tenant=tenant, ndcg=ndcg, query_ndcg=per_query, **fields)


@pytest.fixture
def superuser_client(client, db):
    user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(user)
    return client


def test_comparing_two_runs_shows_deltas_and_changed_queries(superuser_client, tenant):
    run_a = _run(tenant, 0.5, [("q1", 1.0), ("q2", 0.0)])
    run_b = _run(tenant, 0.75, [("q1", 0.5), ("q2", 1.0)])

    response = superuser_client.post(
        reverse("admin:quality_evaluationrun_changelist"),
        {
            "action": "compare_runs",
            "_selected_action": [run_a.pk, run_b.pk],
        },
    )

    assert response.status_code == 200
    assert response.templates[0].name == "admin/quality/compare.html"
    assert response.context["comparison"]["metrics"]["ndcg@10"]["delta"] == 0.25
    content = response.content.decode()
    assert "Question q2?" in content and "Question q1?" in content


def test_comparing_two_runs_shows_their_gold_answer_metrics_and_dashes_where_one_has_none(superuser_client, tenant):
    run_a = _run(tenant, 0.5, [("q1", 0.5)], metrics__answer_token_f1=0.2, metrics__answer_exact_match=0.1)
    run_b = _run(tenant, 0.5, [("q1", 0.5)], metrics__answer_token_f1=0.35)

    response = superuser_client.post(
        reverse("admin:quality_evaluationrun_changelist"),
        {"action": "compare_runs", "_selected_action": [run_a.pk, run_b.pk]},
    )

    answers = {row["metric"]: row for row in response.context["comparison"]["answers"]}
    assert answers["answer_token_f1"] == {
        "metric": "answer_token_f1",
        "label": "Token F1 of the short answer",
        "a": 0.2,
        "b": 0.35,
        "delta": 0.15,
    }
    assert answers["answer_exact_match"]["b"] is None and answers["answer_exact_match"]["delta"] is None
    assert "answer_token_f1" not in response.context["comparison"]["metrics"]  # not listed twice
    content = response.content.decode()
    assert "Token F1 of the short answer" in content and "Exact match of the short answer" in content
    assert "&mdash;" in content


def test_comparing_runs_without_answers_shows_no_answer_table(superuser_client, tenant):
    runs = [_run(tenant, n, [("q1", n)]) for n in (0.5, 0.6)]

    response = superuser_client.post(
        reverse("admin:quality_evaluationrun_changelist"),
        {"action": "compare_runs", "_selected_action": [run.pk for run in runs]},
    )

    assert response.context["comparison"]["answers"] == []
    assert "Answers (B" not in response.content.decode()


def test_comparing_needs_exactly_two_runs(superuser_client, tenant):
    run = _run(tenant, 0.5, [("q1", 1.0)])
    response = superuser_client.post(
        reverse("admin:quality_evaluationrun_changelist"),
        {
            "action": "compare_runs",
            "_selected_action": [run.pk],
        },
        follow=True,
    )
    assert "Select exactly two runs" in response.content.decode()


def test_staff_see_only_their_own_tenants_runs(client, admin_member, tenant):
    admin_member.user_permissions.add(Permission.objects.get(codename="view_evaluationrun"))
    mine = _run(tenant, 0.5, [("q1", 1.0)])
    theirs = _run(TenantFactory(), 0.9, [("q1", 1.0)])
    client.force_login(admin_member)

    response = client.get(reverse("admin:quality_evaluationrun_changelist"))

    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == [mine]
    assert client.get(reverse("admin:quality_evaluationrun_change", args=[theirs.pk])).status_code == 302


def test_comparing_runs_of_two_pipelines_shows_each_pipeline_and_the_settings_that_differ(superuser_client, tenant):
    search = {"fusion": "weighted", "dense_weight": 0.7}
    run_a = _run(tenant, 0.5, [("q1", 1.0)], config={"name": "simple", "rewrites": [], "search": search})
    run_b = _run(
        tenant,
        0.6,
        [("q1", 1.0)],
        pipeline="expand",
        config={"name": "expand", "rewrites": ["expand"], "search": {**search, "fusion": "rrf"}},
    )

    response = superuser_client.post(
        reverse("admin:quality_evaluationrun_changelist"),
        {"action": "compare_runs", "_selected_action": [run_a.pk, run_b.pk]},
    )

    differences = response.context["comparison"]["config"]
    assert differences["pipeline"] == {"a": "simple", "b": "expand"}
    assert differences["search.fusion"] == {"a": "weighted", "b": "rrf"}
    assert "search.dense_weight" not in differences
    content = response.content.decode()
    assert "<th>Pipeline</th><td>simple</td><td>expand</td>" in content
    assert "search.fusion" in content


def test_the_runs_can_be_filtered_by_pipeline(superuser_client, tenant):
    _run(tenant, 0.5, [("q1", 1.0)])
    hyde = _run(tenant, 0.6, [("q1", 1.0)], pipeline="hyde")

    response = superuser_client.get(reverse("admin:quality_evaluationrun_changelist"), {"pipeline": "hyde"})

    assert list(response.context["cl"].queryset) == [hyde]


def test_the_quality_chart_draws_a_series_per_pipeline_of_the_admins_tenant_only(client, admin_member, tenant):
    admin_member.user_permissions.add(Permission.objects.get(codename="view_evaluationrun"))
    simple = [_run(tenant, n, [("q1", n)], metrics__p50_ms=12.5) for n in (0.5, 0.6)]
    expand = [_run(tenant, n, [("q1", n)], pipeline="expand", metrics__p50_ms=40.0) for n in (0.7, 0.8)]
    for run, recall in zip([*simple, *expand], (0.5, 0.6, 0.7, 0.8), strict=True):
        run.metrics["recall@10"] = recall
        run.save()
    escaped = _run(tenant, 0.4, [("q1", 0.4)], dataset="<script>alert(1)</script>", metrics__p50_ms=10.0)
    theirs = _run(TenantFactory(), 0.9, [("q1", 0.9)], pipeline="advanced", metrics__p50_ms=99.0)
    client.force_login(admin_member)

    response = client.get(reverse("admin:quality_evaluationrun_chart"))

    assert response.status_code == 200
    charts = {chart.metric: chart for chart in response.context["charts"]}
    assert set(charts) == {"ndcg@10", "recall@10", "p50_ms"}
    ndcg = {series.name: [m.run_id for m in series.markers] for series in charts["ndcg@10"].series}
    assert ndcg == {"expand": [r.pk for r in expand], "simple": [simple[0].pk, simple[1].pk, escaped.pk]}
    latency = {series.name: len(series.markers) for series in charts["p50_ms"].series}
    assert latency == {"expand": 2, "simple": 3}
    content = response.content.decode()
    assert content.count('<div class="quality-chart">') == 3
    assert 'data-series="simple"' in content and 'data-series="expand"' in content
    assert f'data-run="{theirs.pk}"' not in content and "advanced" not in content
    assert "<script>alert(1)</script>" not in content and "&lt;script&gt;alert(1)&lt;/script&gt;" in content


def test_the_chart_draws_the_gold_answer_metrics_of_runs_measured_with_answers(client, admin_member, tenant):
    admin_member.user_permissions.add(Permission.objects.get(codename="view_evaluationrun"))
    _run(tenant, 0.5, [("q1", 0.5)])
    measured = _run(tenant, 0.6, [("q1", 0.6)], metrics__answer_token_f1=0.31, metrics__answer_gold_in_answer=0.5)
    client.force_login(admin_member)

    response = client.get(reverse("admin:quality_evaluationrun_chart"))

    charts = {chart.metric: chart for chart in response.context["charts"]}
    assert set(charts) == {"ndcg@10", "recall@10", "p50_ms", "answer_token_f1", "answer_gold_in_answer"}
    [series] = charts["answer_token_f1"].series
    assert [marker.run_id for marker in series.markers] == [measured.pk]
    assert response.context["columns"][-2:] == ["Answer token F1 (gold answers)", "Gold answer in the answer"]
    assert "0.31" in response.content.decode()


def test_the_chart_can_be_narrowed_to_one_dataset(client, admin_member, tenant):
    admin_member.user_permissions.add(Permission.objects.get(codename="view_evaluationrun"))
    _run(tenant, 0.5, [("q1", 0.5)], dataset="bioasq")
    kept = _run(tenant, 0.6, [("q1", 0.6)], dataset="handbook", pipeline="hyde")
    client.force_login(admin_member)

    response = client.get(reverse("admin:quality_evaluationrun_chart"), {"dataset": "handbook"})

    [series] = response.context["charts"][0].series
    assert series.name == "hyde" and [m.run_id for m in series.markers] == [kept.pk]


def test_a_superuser_picks_a_tenant_for_the_chart(superuser_client, tenant):
    run = _run(tenant, 0.5, [("q1", 0.5)])
    url = reverse("admin:quality_evaluationrun_chart")

    assert f"?tenant={tenant.slug}" in superuser_client.get(url).content.decode()
    response = superuser_client.get(url, {"tenant": tenant.slug})
    assert f'data-run="{run.pk}"' in response.content.decode()


def test_the_changelist_links_to_the_chart(superuser_client):
    response = superuser_client.get(reverse("admin:quality_evaluationrun_changelist"))
    assert reverse("admin:quality_evaluationrun_chart") in response.content.decode()
