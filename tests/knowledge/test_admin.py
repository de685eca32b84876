import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from core.models import Membership, Tenant
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk, Document, DocumentVersion, IngestionJob, Source
from knowledge.services import documents_ingest
from tests.factories import IngestionJobFactory, SourceFactory, UserFactory

TENANT_MODELS = [Document, DocumentVersion, Chunk, Source]


def changelist(model):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def change_page(obj):
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])


def tenant_of(row):
    return row.document.tenant_id if isinstance(row, DocumentVersion) else row.tenant_id


@pytest.fixture
def tenant_admin(client, admin_member):
    """A staff user who is not a superuser, holding the knowledge app's model permissions."""
    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    client.force_login(admin_member)
    return admin_member


@pytest.fixture
def superuser(client, db):
    user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m.__name__)
def test_a_tenant_admin_sees_only_their_tenants_rows(client, corpus, other_tenant_corpus, tenant_admin, model):
    response = client.get(changelist(model))
    assert response.status_code == 200
    rows = list(response.context["cl"].queryset)
    assert rows
    assert {tenant_of(row) for row in rows} == {corpus.pk}
    assert b"Secret bicycle" not in response.content
    assert b"secret/bike" not in response.content


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m.__name__)
def test_a_tenant_admin_cannot_open_another_tenants_row(client, corpus, other_tenant_corpus, tenant_admin, model):
    other_row = model.objects.for_tenant(other_tenant_corpus).first()
    response = client.get(change_page(other_row))
    assert response.status_code in (302, 404)
    assert b"Secret bicycle" not in response.content


@pytest.mark.parametrize("model", TENANT_MODELS, ids=lambda m: m.__name__)
def test_a_superuser_sees_every_tenants_rows(client, corpus, other_tenant_corpus, superuser, model):
    response = client.get(changelist(model))
    assert {tenant_of(row) for row in response.context["cl"].queryset} == {corpus.pk, other_tenant_corpus.pk}
    other_row = model.objects.for_tenant(other_tenant_corpus).first()
    assert client.get(change_page(other_row)).status_code == 200


def test_a_tenant_admin_sees_only_their_own_tenant(client, corpus, other_tenant_corpus, tenant_admin):
    response = client.get(changelist(Tenant))
    assert list(response.context["cl"].queryset) == [corpus]
    assert client.get(change_page(other_tenant_corpus)).status_code == 302


def test_a_tenant_admin_has_no_tenant_filter_and_no_foreign_source_filter(
    client, corpus, other_tenant_corpus, tenant_admin
):
    wiki = SourceFactory(tenant=corpus, name="wiki")
    note = ReadDocument(external_id="wiki/note", title="Note", text="Note\n\nA short note kept in the wiki source.")
    documents_ingest(tenant=corpus, source=wiki, documents=[note])

    response = client.get(changelist(Document))
    specs = {spec.title: spec for spec in response.context["cl"].filter_specs}
    assert "tenant" not in specs
    assert {label for _, label in specs["source"].lookup_choices} == {str(wiki), f"{corpus}/handbook"}
    assert b"secret" not in response.content


def test_a_tenant_admin_picks_sources_only_from_their_tenant(client, corpus, other_tenant_corpus, tenant_admin):
    pasta = Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")
    response = client.get(change_page(pasta))
    assert response.status_code == 200
    choices = response.context["adminform"].form.fields["source"].queryset
    assert set(choices) == set(Source.objects.for_tenant(corpus))


def test_a_source_added_by_a_tenant_admin_belongs_to_their_tenant(client, tenant, other_tenant_corpus, tenant_admin):
    add = reverse("admin:knowledge_source_add")
    form = {"name": "wiki", "kind": "web", "location": "https://wiki.example.com/", "reliability": "0.8"}

    rejected = client.post(add, {**form, "tenant": other_tenant_corpus.pk})
    assert rejected.status_code == 200
    assert not Source.objects.filter(name="wiki").exists()

    client.post(add, {**form, "tenant": tenant.pk})
    assert Source.objects.get(name="wiki").tenant == tenant


def test_the_document_delete_action_reindexes_documents_that_duplicated_it(client, tenant, source, tenant_admin):
    text = "Original\n\nThe same words stored under two different document ids in one tenant."
    documents_ingest(tenant=tenant, source=source, documents=[ReadDocument(external_id="a", title="A", text=text)])
    documents_ingest(tenant=tenant, source=source, documents=[ReadDocument(external_id="b", title="B", text=text)])
    original = Document.objects.get(external_id="a")
    duplicate = DocumentVersion.objects.get(document__external_id="b", is_current=True)
    assert duplicate.duplicate_of is not None
    assert not duplicate.chunks.exists()

    confirm = client.post(changelist(Document), {"action": "delete_selected", "_selected_action": [original.pk]})
    assert confirm.status_code == 200
    assert b"Are you sure" in confirm.content
    client.post(changelist(Document), {"action": "delete_selected", "_selected_action": [original.pk], "post": "yes"})

    assert not Document.objects.filter(pk=original.pk).exists()
    assert duplicate.chunks.exists()


def test_chunk_change_pages_are_read_only_and_hide_embeddings(client, corpus, tenant_admin):
    chunk = Chunk.objects.for_tenant(corpus).first()
    response = client.get(change_page(chunk))
    assert response.status_code == 200
    assert "embedding" not in response.context["adminform"].form.fields
    assert not response.context["has_change_permission"]


@pytest.mark.parametrize("user_fixture", ["superuser", "tenant_admin"])
def test_every_admin_changelist_and_change_page_renders(request, client, corpus, admin_member, user_fixture):
    request.getfixturevalue(user_fixture)
    IngestionJobFactory(source=Source.objects.for_tenant(corpus).get())
    for model in [Tenant, Membership, Source, Document, DocumentVersion, Chunk, IngestionJob]:
        assert client.get(changelist(model)).status_code == 200, model
        row = model.objects.first() if model is Tenant else model.objects.for_tenant(corpus).first()
        assert client.get(change_page(row)).status_code == 200, model
    assert client.get(reverse("admin:knowledge_source_add")).status_code == 200
    assert client.get(reverse("admin:core_membership_add")).status_code == 200
