"""The quality gate: retrieval-settings changes are measured on the tenant's judgment lists first."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from rest_framework.test import APIClient

from core.errors import InvalidInput, PermissionDenied
from core.models import Membership
from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from quality.models import ConfigChange, EvaluationRun, QualityPolicy
from quality.services import (
    ChangeInProgress,
    config_change_evaluate,
    config_change_override,
    config_change_propose,
    judgment_list_import,
)
from tests.factories import ConfigChangeFactory, MembershipFactory, SourceFactory, TenantFactory, UserFactory

# Two questions that hybrid search answers well. The first shares no word with its document
# but several with a distractor, so lexical-only retrieval cannot find its document at all.
KITTENS = ReadDocument(
    external_id="pets/cat-food",
    title="Feline nutrition",
    text="Feline nutrition\n\nAdult cats should eat two small meals a day of high-protein wet or dry food.",
)
PRINTER = ReadDocument(
    external_id="office/printer",
    title="Printer paper tray",
    text=(
        "Printer paper tray\n\nFeed the paper often so the tray never runs empty; the office kitty "
        "pays for new reams of paper."
    ),
)
PASTA = ReadDocument(
    external_id="recipes/pasta",
    title="Cooking pasta",
    text="Cooking pasta\n\nBoil the spaghetti in salted water for nine to eleven minutes until al dente.",
)
JUDGMENTS = [
    ("cat", "How often should I feed my kitty?", [{"document": "pets/cat-food"}]),
    ("pasta", "How long do I boil spaghetti?", [{"document": "recipes/pasta"}]),
]
WORSE = {"mode": "lexical"}  # loses the paraphrased question entirely


@pytest.fixture
def judged(tenant):
    """The tenant with a tiny corpus and one judgment list on it."""
    documents_ingest(tenant=tenant, source=SourceFactory(tenant=tenant), documents=[KITTENS, PRINTER, PASTA])
    judgment_list_import(tenant=tenant, name="pets-and-pasta", origin="manual", judgments=JUDGMENTS)
    return tenant


@pytest.fixture
def admin_user(tenant):
    return MembershipFactory(tenant=tenant, role=Membership.Role.ADMIN).user


def _propose(tenant, user, proposed, capture):
    with capture(execute=True):
        return config_change_propose(tenant=tenant, user=user, proposed=proposed)


def test_a_change_that_keeps_quality_is_accepted_and_applied(judged, admin_user, django_capture_on_commit_callbacks):
    change = _propose(judged, admin_user, {"ef_search": 200}, django_capture_on_commit_callbacks)

    change.refresh_from_db()
    judged.refresh_from_db()
    assert change.status == ConfigChange.Status.ACCEPTED
    assert judged.retrieval_config == {"ef_search": 200}
    assert change.deltas["pets-and-pasta"]["ndcg@10"] == {"a": 1.0, "b": 1.0, "delta": 0.0}
    assert change.requested_by == admin_user and change.finished_at is not None


def test_a_clearly_worse_change_is_refused_and_the_settings_stay(
    judged, admin_user, django_capture_on_commit_callbacks
):
    judged.retrieval_config = {"pipeline": "simple"}
    judged.save()

    change = _propose(judged, admin_user, WORSE, django_capture_on_commit_callbacks)

    change.refresh_from_db()
    judged.refresh_from_db()
    assert change.status == ConfigChange.Status.REFUSED
    assert judged.retrieval_config == {"pipeline": "simple"}
    ndcg = change.deltas["pets-and-pasta"]["ndcg@10"]
    assert ndcg["a"] == 1.0 and ndcg["delta"] <= -0.4
    runs = change.runs["pets-and-pasta"]
    assert EvaluationRun.objects.get(pk=runs["proposed"]).mode == "lexical"
    assert EvaluationRun.objects.get(pk=runs["current"]).mode == "hybrid"


def test_progress_counts_every_query_of_both_runs(judged, admin_user, django_capture_on_commit_callbacks):
    change = _propose(judged, admin_user, WORSE, django_capture_on_commit_callbacks)

    change.refresh_from_db()
    assert (change.progress_done, change.progress_total) == (4, 4)


def test_a_tenant_tolerance_lets_a_small_drop_through(judged, admin_user, django_capture_on_commit_callbacks):
    QualityPolicy.objects.create(tenant=judged, tolerance=1.0)

    change = _propose(judged, admin_user, WORSE, django_capture_on_commit_callbacks)

    change.refresh_from_db()
    assert change.tolerance == 1.0 and change.status == ConfigChange.Status.ACCEPTED
    judged.refresh_from_db()
    assert judged.retrieval_config == WORSE


def test_overriding_a_refused_change_applies_it_and_records_who(judged, admin_user, django_capture_on_commit_callbacks):
    change = _propose(judged, admin_user, WORSE, django_capture_on_commit_callbacks)
    deciding_admin = MembershipFactory(tenant=judged, role=Membership.Role.ADMIN).user

    change = config_change_override(change_id=change.pk, user=deciding_admin)

    judged.refresh_from_db()
    assert judged.retrieval_config == WORSE
    change.refresh_from_db()
    assert change.status == ConfigChange.Status.OVERRIDDEN
    assert change.override_by == deciding_admin and change.override_at is not None
    with pytest.raises(InvalidInput, match="Only a refused change"):
        config_change_override(change_id=change.pk, user=deciding_admin)


def test_only_admins_may_propose_or_override(judged, admin_user, django_capture_on_commit_callbacks):
    editor = MembershipFactory(tenant=judged, role=Membership.Role.EDITOR).user
    with pytest.raises(PermissionDenied):
        config_change_propose(tenant=judged, user=editor, proposed={"ef_search": 200})
    assert not ConfigChange.objects.exists()

    change = _propose(judged, admin_user, WORSE, django_capture_on_commit_callbacks)
    other_admin = MembershipFactory(tenant=TenantFactory(), role=Membership.Role.ADMIN).user
    for user in (editor, other_admin):
        with pytest.raises(PermissionDenied):
            config_change_override(change_id=change.pk, user=user)
    change.refresh_from_db()
    assert change.status == ConfigChange.Status.REFUSED


def test_without_judgment_lists_a_change_applies_at_once(tenant, admin_user):
    change = config_change_propose(tenant=tenant, user=admin_user, proposed={"pipeline": "expand"})

    tenant.refresh_from_db()
    assert change.status == ConfigChange.Status.APPLIED
    assert tenant.retrieval_config == {"pipeline": "expand"}


@pytest.mark.parametrize(
    "proposed",
    [{"pipeline": "magic"}, {"fusion": "best"}, {"rrf_k": 0}, {"unknown_key": 1}, {}, {"fusion": None}],
)
def test_bad_settings_are_rejected_before_anything_is_stored(tenant, admin_user, proposed):
    with pytest.raises(InvalidInput):
        config_change_propose(tenant=tenant, user=admin_user, proposed=proposed)
    tenant.refresh_from_db()
    assert tenant.retrieval_config == {} and not ConfigChange.objects.exists()


def test_a_second_change_waits_for_the_one_being_evaluated(judged, admin_user):
    ConfigChangeFactory(tenant=judged, status=ConfigChange.Status.EVALUATING)
    with pytest.raises(ChangeInProgress):
        config_change_propose(tenant=judged, user=admin_user, proposed={"ef_search": 200})


def test_a_change_measured_against_outdated_settings_fails_and_applies_nothing(judged, admin_user):
    change = ConfigChangeFactory(tenant=judged, current_config={"fusion": "rrf"}, requested_by=admin_user)

    change = config_change_evaluate(change_id=change.pk)

    judged.refresh_from_db()
    assert change.status == ConfigChange.Status.FAILED and "changed while" in change.error
    assert judged.retrieval_config == {}


# --- API ---------------------------------------------------------------------------------------


def _client(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def test_the_api_refuses_a_worse_change_with_its_deltas_and_an_admin_overrides_it(
    judged, admin_user, django_capture_on_commit_callbacks
):
    client = _client(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/settings/retrieval/", {"config": WORSE}, format="json")
    assert response.status_code == 202
    change_id = response.json()["id"]

    detail = client.get(f"/api/v1/settings/retrieval/changes/{change_id}/").json()
    assert detail["status"] == "refused"
    assert detail["progress"] == {"done": 4, "total": 4}
    assert detail["deltas"]["pets-and-pasta"]["ndcg@10"]["delta"] < 0

    response = client.post(f"/api/v1/settings/retrieval/changes/{change_id}/override/")
    assert response.status_code == 200
    assert response.json()["status"] == "overridden"
    assert response.json()["override_by"] == admin_user.username
    judged.refresh_from_db()
    assert judged.retrieval_config == WORSE


def test_a_member_may_not_propose_settings(judged, member):
    response = _client(member).post("/api/v1/settings/retrieval/", {"config": {"ef_search": 200}}, format="json")

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert not ConfigChange.objects.exists()


def test_another_tenants_change_is_not_found(judged, admin_user, django_capture_on_commit_callbacks):
    change = _propose(judged, admin_user, WORSE, django_capture_on_commit_callbacks)
    stranger = _client(MembershipFactory(tenant=TenantFactory(), role=Membership.Role.ADMIN).user)

    assert stranger.get(f"/api/v1/settings/retrieval/changes/{change.pk}/").status_code == 404
    assert stranger.post(f"/api/v1/settings/retrieval/changes/{change.pk}/override/").status_code == 404
    change.refresh_from_db()
    assert change.status == ConfigChange.Status.REFUSED


def test_the_api_rejects_bad_settings_with_a_400(judged, admin_user):
    response = _client(admin_user).post("/api/v1/settings/retrieval/", {"config": {"fusion": "best"}}, format="json")

    assert response.status_code == 400
    assert "fusion" in response.json()["error"]["message"]


# --- Admin -------------------------------------------------------------------------------------


@pytest.fixture
def staff_admin(admin_user):
    admin_user.is_staff = True
    admin_user.save()
    admin_user.user_permissions.add(*Permission.objects.filter(codename__in=["view_configchange"]))
    return admin_user


def test_proposing_in_the_admin_shows_the_refusal_with_its_deltas(
    client, judged, staff_admin, django_capture_on_commit_callbacks
):
    client.force_login(staff_admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("admin:quality_configchange_propose"), {"config": '{"mode": "lexical"}'})
    change = ConfigChange.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:quality_configchange_change", args=[change.pk])

    page = client.get(response["Location"]).content.decode()
    assert "Refused" in page and "pets-and-pasta" in page and "ndcg@10" in page


def test_the_admin_form_reports_bad_json_and_bad_settings(client, judged, staff_admin):
    client.force_login(staff_admin)
    url = reverse("admin:quality_configchange_propose")

    assert "Not valid JSON" in client.post(url, {"config": "{nope"}).content.decode()
    assert "Unknown fusion" in client.post(url, {"config": '{"fusion": "best"}'}).content.decode()
    assert not ConfigChange.objects.exists()


def test_the_override_action_applies_a_refused_change_as_the_signed_in_admin(
    client, judged, staff_admin, django_capture_on_commit_callbacks
):
    change = _propose(judged, staff_admin, WORSE, django_capture_on_commit_callbacks)
    client.force_login(staff_admin)

    client.post(
        reverse("admin:quality_configchange_changelist"),
        {"action": "override_and_apply", "_selected_action": [change.pk]},
    )

    change.refresh_from_db()
    assert change.status == ConfigChange.Status.OVERRIDDEN and change.override_by == staff_admin


def test_a_superuser_picks_the_tenant_to_propose_for(client, judged):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    url = reverse("admin:quality_configchange_propose")

    assert f"?tenant={judged.slug}" in client.get(url).content.decode()
    assert "Current settings" in client.get(url, {"tenant": judged.slug}).content.decode()
