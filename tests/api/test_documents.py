import pytest

from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document
from knowledge.services import documents_ingest
from tests.factories import SourceFactory


def test_the_list_shows_the_tenants_documents_with_their_current_version(corpus, member_client):
    response = member_client.get("/api/v1/documents/")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    by_id = {d["external_id"]: d for d in body["results"]}
    assert set(by_id) == {"recipes/pasta", "howto/bike-tyre", "finance/expenses"}
    pasta = by_id["recipes/pasta"]
    assert pasta["title"] == "Cooking pasta"
    assert pasta["source"] == "handbook"
    assert pasta["current_version"] == 1
    assert set(pasta) == {"id", "external_id", "title", "uri", "source", "current_version", "updated_at"}


def test_the_list_is_paginated_with_limit_and_offset(corpus, member_client):
    first = member_client.get("/api/v1/documents/?limit=2").json()
    second = member_client.get("/api/v1/documents/?limit=2&offset=2").json()
    assert first["count"] == 3 and len(first["results"]) == 2 and first["next"]
    assert len(second["results"]) == 1 and second["next"] is None
    ids = {d["id"] for d in first["results"] + second["results"]}
    assert len(ids) == 3


def test_the_list_can_be_filtered_by_source_name(corpus, member_client):
    notes = SourceFactory(tenant=corpus, name="notes")
    documents_ingest(
        tenant=corpus,
        source=notes,
        documents=[ReadDocument(external_id="notes/tea", title="Tea", text="Tea\n\nSteep green tea for two minutes.")],
    )
    response = member_client.get("/api/v1/documents/?source=notes")
    assert [d["external_id"] for d in response.json()["results"]] == ["notes/tea"]
    assert member_client.get("/api/v1/documents/?source=handbook").json()["count"] == 3


def test_the_detail_lists_versions_with_chunk_counts(corpus, member_client):
    document = Document.objects.get(tenant=corpus, external_id="recipes/pasta")
    response = member_client.get(f"/api/v1/documents/{document.pk}/")
    assert response.status_code == 200
    body = response.json()
    assert body["external_id"] == "recipes/pasta"
    assert body["current_version"] == 1
    [version] = body["versions"]
    assert version["number"] == 1
    assert version["is_current"] is True
    assert version["duplicate_of"] is None
    assert version["chunk_count"] == document.versions.get().chunks.count() > 0
    assert len(version["content_hash"]) == 64


def test_an_unknown_document_is_a_404_in_the_error_shape(corpus, member_client):
    response = member_client.get("/api/v1/documents/999999/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_editor_deletes_a_document_with_its_chunks(corpus, editor_client):
    document = Document.objects.get(tenant=corpus, external_id="recipes/pasta")
    response = editor_client.delete(f"/api/v1/documents/{document.pk}/")
    assert response.status_code == 204
    assert not Document.objects.filter(pk=document.pk).exists()
    assert editor_client.get(f"/api/v1/documents/{document.pk}/").status_code == 404
    results = editor_client.post("/api/v1/search/", {"query": "boil spaghetti"}, format="json").json()["results"]
    assert all(r["document"] != "recipes/pasta" for r in results)


def test_a_member_cannot_delete_a_document(corpus, member_client):
    document = Document.objects.get(tenant=corpus, external_id="recipes/pasta")
    response = member_client.delete(f"/api/v1/documents/{document.pk}/")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert Document.objects.filter(pk=document.pk).exists()


@pytest.mark.parametrize("url", ["/api/v1/documents/", "/api/v1/documents/1/"])
def test_an_unsupported_method_is_a_405_in_the_error_shape(corpus, member_client, url):
    response = member_client.put(url, {}, format="json")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
