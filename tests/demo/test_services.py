from django.contrib.auth import get_user_model

from core.models import Membership, Tenant
from demo.services import SOURCES, demo_setup, django_docs_download
from knowledge.models import Document


def test_demo_setup_creates_the_tenant_its_two_users_and_five_sources(downloads, db):
    setup = demo_setup(downloads=downloads)

    assert setup.tenant.slug == "demo"
    assert set(setup.runs) == {s.name for s in SOURCES}
    assert set(setup.tenant.sources.values_list("kind", flat=True)) == {"folder"}
    assert setup.tenant.sources.count() == 5
    assert Document.objects.for_tenant(setup.tenant).count() == 6
    roles = dict(Membership.objects.filter(tenant=setup.tenant).values_list("user__username", "role"))
    assert roles == {"admin": "admin", "member": "member"}
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff and admin.check_password("admin-demo-pass")
    assert admin.has_perm("knowledge.change_document") and admin.has_perm("quality.view_evaluationrun")
    member = get_user_model().objects.get(username="member")
    assert not member.is_staff and member.check_password("member-demo-pass")


def test_a_second_demo_setup_is_a_sync_that_finds_nothing_new(downloads, db):
    first = demo_setup(downloads=downloads)

    second = demo_setup(downloads=downloads)

    assert second.tenant.pk == first.tenant.pk
    assert Tenant.objects.filter(slug="demo").count() == 1
    assert sum(r.unchanged for r in second.runs.values()) == 6
    assert sum(r.new + r.updated + r.deleted + r.failed for r in second.runs.values()) == 0


def test_release_notes_are_a_source_with_a_one_year_half_life(downloads, db):
    setup = demo_setup(downloads=downloads)

    assert setup.tenant.sources.get(name="releases").half_life_days == 365.0
    assert setup.tenant.sources.get(name="topics").half_life_days is None


def test_docs_already_extracted_are_reused_without_pip(downloads):
    messages = []

    docs = django_docs_download(downloads=downloads, log=messages.append)

    assert docs == downloads / docs.parent.name / "docs"
    assert messages == []
