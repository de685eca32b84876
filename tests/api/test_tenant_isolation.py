"""Tenant A's token never reaches tenant B's data, whichever endpoint it uses."""

from knowledge.models import Document, IngestionJob


def secret_document(other_tenant_corpus) -> Document:
    return Document.objects.get(tenant=other_tenant_corpus, external_id="secret/bike")


def test_the_list_never_shows_another_tenants_documents(corpus, other_tenant_corpus, member_client):
    ids = {d["external_id"] for d in member_client.get("/api/v1/documents/?limit=100").json()["results"]}
    assert ids == {"recipes/pasta", "howto/bike-tyre", "finance/expenses"}
    assert member_client.get("/api/v1/documents/?source=secret").json()["count"] == 0


def test_another_tenants_document_detail_is_a_404(corpus, other_tenant_corpus, member_client):
    response = member_client.get(f"/api/v1/documents/{secret_document(other_tenant_corpus).pk}/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_admin_cannot_delete_another_tenants_document(corpus, other_tenant_corpus, admin_client):
    document = secret_document(other_tenant_corpus)
    response = admin_client.delete(f"/api/v1/documents/{document.pk}/")
    assert response.status_code == 404
    assert Document.objects.filter(pk=document.pk).exists()


def test_search_never_returns_another_tenants_chunks(corpus, other_tenant_corpus, member_client):
    for mode in ("hybrid", "lexical", "dense"):
        response = member_client.post(
            "/api/v1/search/", {"query": "secret bicycle tyre puncture patch", "k": 50, "mode": mode}, format="json"
        )
        results = response.json()["results"]
        assert results, mode
        assert all(not r["document"].startswith("secret/") for r in results)
        assert all(r["source"] == "handbook" for r in results)


def test_search_cannot_filter_by_another_tenants_source(corpus, other_tenant_corpus, member_client):
    response = member_client.post("/api/v1/search/", {"query": "secret tyre", "sources": ["secret"]}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_source"


def test_ask_never_cites_another_tenants_documents(corpus, other_tenant_corpus, member_client):
    response = member_client.post(
        "/api/v1/ask/",
        {"question": "What is our secret for patching a tyre?", "k": 5, "extractive": True},
        format="json",
    )
    body = response.json()
    assert body["citations"]
    assert all(not c["document"].startswith("secret/") for c in body["citations"])
    assert "Our secret" not in body["answer"]


def test_another_tenants_job_is_a_404(corpus, other_tenant_corpus, member_client, other_admin_client):
    job = IngestionJob.objects.create(
        tenant=other_tenant_corpus,
        source=other_tenant_corpus.sources.get(),
        file_name="secret.md",
        stored_path="/nonexistent/secret.md",
    )
    assert other_admin_client.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    response = member_client.get(f"/api/v1/jobs/{job.pk}/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_the_other_tenant_sees_only_its_own_documents(corpus, other_tenant_corpus, other_admin_client):
    results = other_admin_client.get("/api/v1/documents/").json()["results"]
    assert [d["external_id"] for d in results] == ["secret/bike"]
