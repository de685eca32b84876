"""The admin of connector sources: the form by kind, "Sync now", sync runs, and deleted documents."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from knowledge.models import Document, Source, SyncRun
from tests.factories import DocumentFactory, SourceFactory, UserFactory, folder_granted

ADD = "admin:knowledge_source_add"


def changelist(model):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def change_page(obj):
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


def source_form(tenant, **fields):
    """The add form as the admin posts it for a source of ``tenant`` (connector fields empty)."""
    return {
        "tenant": tenant.pk,
        "name": "docs",
        "kind": "files",
        "reliability": "1.0",
        "half_life_days": "",
        "versions_kept": "",
        "location": "",
        "branch": "",
        "include": "",
        "exclude": "",
        "text_format": "",
        "uri_prefix": "",
        "sync_every": "",
        "page_limit": "500",
        "crawl_delay_s": "1.0",
        **fields,
    }


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def inline_runs(response) -> list[SyncRun]:
    (runs,) = [f for f in response.context["inline_admin_formsets"] if f.formset.model is SyncRun]
    return list(runs.formset.queryset)


@pytest.fixture
def superuser(client, db):
    user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


@pytest.fixture
def tenant_admin(client, admin_member):
    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    client.force_login(admin_member)
    return admin_member


@pytest.fixture
def folder(tmp_path, tenant):
    """A folder holding two short Markdown pages, granted to ``tenant`` by the operator."""
    folder_granted(tenant, tmp_path)
    (tmp_path / "install.md").write_text("# Install\n\nRun the installer and follow its three steps.\n")
    (tmp_path / "upgrade.md").write_text("# Upgrade\n\nBack up the database before upgrading to a new release.\n")
    return tmp_path


def test_a_folder_source_added_with_globs_one_per_line_and_a_schedule_of_1h_stores_a_list_and_an_hour(
    client, tenant, superuser, folder
):
    form = source_form(
        tenant, kind="folder", location=str(folder), include="guides/**/*.md\n\n  *.rst  \n", sync_every="1h"
    )

    response = client.post(reverse(ADD), form)

    assert response.status_code == 302
    source = Source.objects.get(tenant=tenant, name="docs")
    assert source.include == ["guides/**/*.md", "*.rst"]
    assert source.exclude == []
    assert source.sync_every == timedelta(hours=1)
    page = client.get(change_page(source))
    form = page.context["adminform"].form
    assert form["sync_every"].value() == "1h"
    assert form["include"].value() == "guides/**/*.md\n*.rst"


def test_a_web_source_whose_location_is_not_a_url_is_refused_with_the_services_message(client, tenant, superuser):
    response = client.post(reverse(ADD), source_form(tenant, kind="web", location="docs.example.com/start"))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "http(s) URL" in errors["location"][0]
    assert not Source.objects.filter(name="docs").exists()


def test_a_schedule_that_is_not_a_duration_is_refused_on_its_field(client, tenant, superuser, folder):
    response = client.post(reverse(ADD), source_form(tenant, kind="folder", location=str(folder), sync_every="hourly"))

    assert "30m, 1h, 1d or 1w" in response.context["adminform"].form.errors["sync_every"][0]
    assert not Source.objects.filter(name="docs").exists()


def test_a_source_filled_by_hand_may_not_have_a_schedule(client, tenant, superuser):
    response = client.post(reverse(ADD), source_form(tenant, kind="files", sync_every="1d"))

    errors = str(response.context["adminform"].form.errors)
    assert "Only connector sources (folder, web, git and the services) sync on a schedule." in errors
    assert not Source.objects.filter(name="docs").exists()


def test_sync_now_on_a_folder_sources_page_syncs_its_two_files_and_lists_the_done_run(
    client, tenant, superuser, folder, django_capture_on_commit_callbacks
):
    source = SourceFactory(tenant=tenant, name="docs", kind="folder", location=str(folder))
    form = source_form(tenant, kind="folder", location=str(folder), _sync_now="Sync now")

    with django_capture_on_commit_callbacks(execute=True):  # the run, at commit without a broker
        response = client.post(change_page(source), form)

    assert response.status_code == 302
    assert response.url == change_page(source)
    assert any("Sync of 'docs'" in m for m in messages_of(response))
    page = client.get(change_page(source))
    (run,) = inline_runs(page)
    assert (run.status, run.new, run.failed) == ("done", 2, 0)
    assert b"Sync now" in page.content
    assert set(Document.objects.filter(source=source).values_list("external_id", flat=True)) == {"install", "upgrade"}


def test_a_sources_page_lists_its_newest_twenty_runs_with_errors_as_path_and_message_lines(
    client, tenant, superuser, folder
):
    source = SourceFactory(tenant=tenant, name="docs", kind="folder", location=str(folder))
    for _ in range(21):
        SyncRun.objects.create(tenant=tenant, source=source, status="done", new=1)
    SyncRun.objects.create(
        tenant=tenant,
        source=source,
        status="done",
        failed=1,
        errors=[{"document": "guides/broken.pdf", "error": "The PDF has no text layer."}],
    )

    page = client.get(change_page(source))

    runs = inline_runs(page)
    assert len(runs) == 20
    assert runs[0].failed == 1
    assert "guides/broken.pdf: The PDF has no text layer." in page.content.decode()


def test_a_source_filled_by_hand_has_no_sync_now_button(client, tenant, superuser):
    source = SourceFactory(tenant=tenant, name="uploads", kind="files")

    assert b'name="_sync_now"' not in client.get(change_page(source)).content


def test_the_sync_now_action_refuses_a_source_filled_by_hand_with_a_message(client, tenant, superuser):
    source = SourceFactory(tenant=tenant, name="uploads", kind="files")

    response = client.post(changelist(Source), {"action": "sync_now", "_selected_action": [source.pk]})

    assert response.status_code == 302
    assert any("filled by hand" in m for m in messages_of(response))
    assert not SyncRun.objects.exists()


def test_the_source_list_shows_the_schedule_the_last_runs_status_and_the_live_documents(
    client, tenant, superuser, folder
):
    source = SourceFactory(
        tenant=tenant, name="docs", kind="folder", location=str(folder), sync_every=timedelta(days=1)
    )
    SyncRun.objects.create(tenant=tenant, source=source, status="failed", error="No such folder.")
    DocumentFactory(source=source)
    DocumentFactory(source=source, deleted_at=timezone.now())

    response = client.get(changelist(Source))

    (row,) = response.context["cl"].result_list
    model_admin = response.context["cl"].model_admin
    assert model_admin.schedule(row) == "every 1d"
    assert model_admin.last_run_status(row) == "Failed"
    assert model_admin.document_count(row) == 1


def test_a_tenant_admin_never_sees_another_tenants_sources_or_runs(
    client, tenant, other_tenant_corpus, tenant_admin, folder
):
    ours = SourceFactory(tenant=tenant, name="docs", kind="folder", location=str(folder))
    theirs = Source.objects.for_tenant(other_tenant_corpus).get()
    our_run = SyncRun.objects.create(tenant=tenant, source=ours, status="done")
    their_run = SyncRun.objects.create(tenant=other_tenant_corpus, source=theirs, status="done")

    sources = client.get(changelist(Source))
    runs = client.get(changelist(SyncRun))

    assert set(sources.context["cl"].queryset) == {ours}
    assert list(runs.context["cl"].queryset) == [our_run]
    assert b"secret" not in runs.content
    assert "tenant" not in {spec.title for spec in runs.context["cl"].filter_specs}
    assert client.get(change_page(their_run)).status_code == 302
    assert client.get(change_page(theirs)).status_code == 302
    assert client.get(change_page(our_run)).status_code == 200


def test_the_document_list_filters_documents_deleted_at_their_source(client, tenant, superuser, folder):
    source = SourceFactory(tenant=tenant, name="docs", kind="folder", location=str(folder))
    DocumentFactory(source=source, title="Still there")
    DocumentFactory(source=source, title="Gone", deleted_at=timezone.now())

    deleted = client.get(changelist(Document), {"at_source": "deleted"})
    live = client.get(changelist(Document), {"at_source": "live"})

    assert [d.title for d in deleted.context["cl"].result_list] == ["Gone"]
    assert [d.title for d in live.context["cl"].result_list] == ["Still there"]
