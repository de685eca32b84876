import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from quality.models import EvaluationRun
from tests.factories import TenantFactory, UserFactory


def _run(tenant, ndcg, per_query):
    return EvaluationRun.objects.create(
        tenant=tenant,
        dataset="tiny",
        mode="hybrid",
        metrics={"ndcg@10": ndcg, "queries": len(per_query)},
        per_query=[
            {"query_id": q, "question": f"Question {q}?", "metrics": {"ndcg@10": v}, "top": ["d1"]}
            for q, v in per_query
        ],
    )


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
