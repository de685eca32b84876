"""Dense search on per-tenant HNSW indexes and the exact path, on the real RAG4p Vasa corpus.

The Vasa timeline (21 documents, one chunk per sentence) is ingested with the real embedder into
two tenants; the threshold for a tenant's own index is lowered so the small corpus gets one.
"""

import csv
import json
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.models import Tenant
from knowledge import vector_index
from knowledge.embedders import get_embedder
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk
from knowledge.services import documents_ingest
from knowledge.services.tenants import tenant_delete
from knowledge.vector_index import tenant_vector_index_ensure, tenant_vector_indexes, vector_index_name
from retrieval.filters import RetrievalFilter
from retrieval.stages.retrieve.dense import vector_search
from tests.factories import SourceFactory, TenantFactory

VASA = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "rag4p-vasa"


def _vasa_documents() -> list[ReadDocument]:
    lines = (VASA / "vasa-timeline.jsonl").read_text().splitlines()
    return [
        ReadDocument(external_id=f"vasa/{i}", title=row["title"], text=row["body"])
        for i, row in enumerate(json.loads(line) for line in lines if line.strip())
    ]


def _questions() -> list[str]:
    with (VASA / "questions_answers.csv").open() as handle:
        return [row["question"] for row in csv.DictReader(handle)][:20]


def _ingest(tenant, documents, source_name="timeline"):
    from knowledge.ingestion.splitters import get_splitter

    source = SourceFactory(tenant=tenant, name=source_name)
    documents_ingest(tenant=tenant, source=source, documents=documents, splitter=get_splitter("sentence"))
    return source


@pytest.fixture
def low_threshold(monkeypatch):
    """Tenants get their own index from 20 chunks on (the Vasa corpus has ~90)."""
    monkeypatch.setattr(vector_index, "TENANT_INDEX_MIN_CHUNKS", 20)


@pytest.fixture
def vasa(db, low_threshold):
    """Two tenants holding the same Vasa corpus (same texts, same vectors), each indexed."""
    documents = _vasa_documents()
    first, second = TenantFactory(slug="vasa-a"), TenantFactory(slug="vasa-b")
    _ingest(first, documents[:10], "early")
    _ingest(first, documents[10:], "late")
    _ingest(second, documents)
    return first, second


def _vectors(questions):
    return get_embedder("local").embed(questions)


def _plan_of_last_dense_query(captured) -> str:
    """EXPLAIN of the dense query ``vector_search`` actually ran (its SQL with the values bound)."""
    queries = [q["sql"] for q in captured.captured_queries]
    settings = [q for q in queries if "hnsw.ef_search" in q][-1]
    statement = [q for q in queries if "ORDER BY" in q][-1]
    with connection.cursor() as cursor:
        cursor.execute(settings)  # the same transaction-local settings (the test's transaction)
        cursor.execute("EXPLAIN " + statement)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_ingesting_past_the_threshold_gives_the_tenant_its_own_index(vasa):
    first, second = vasa
    assert [i["name"] for i in tenant_vector_indexes(tenant_id=first.pk)] == [vector_index_name("local", first.pk)]
    assert [i["valid"] for i in tenant_vector_indexes(tenant_id=second.pk)] == [True]


def test_a_large_tenants_dense_search_walks_its_own_index(vasa):
    first, _ = vasa
    vector = _vectors(["Who built the Vasa?"])[0]
    with CaptureQueriesContext(connection) as captured:
        vector_search(where=RetrievalFilter.for_tenant(first), embedder="local", vector=vector, limit=10)
    plan = _plan_of_last_dense_query(captured)
    assert f"Index Scan using {vector_index_name('local', first.pk)}" in plan
    assert "chunk_emb_local_hnsw" not in plan


def test_a_small_tenant_is_searched_exactly_without_any_hnsw_index(db):
    tenant = TenantFactory()
    _ingest(tenant, _vasa_documents()[:5])
    vector = _vectors(["Who built the Vasa?"])[0]
    with CaptureQueriesContext(connection) as captured:
        results = vector_search(where=RetrievalFilter.for_tenant(tenant), embedder="local", vector=vector, limit=10)
    plan = _plan_of_last_dense_query(captured)
    assert tenant_vector_indexes(tenant_id=tenant.pk) == []
    assert "hnsw" not in plan
    assert len(results) == min(10, Chunk.objects.filter(tenant=tenant).count())


def test_dense_search_on_the_tenant_index_returns_the_exact_scans_top_10(vasa):
    first, _ = vasa
    where = RetrievalFilter.for_tenant(first)
    for vector in _vectors(_questions()):
        indexed = vector_search(where=where, embedder="local", vector=vector, limit=10)
        exact = vector_search(where=where, embedder="local", vector=vector, limit=10, plan="exact")
        assert [chunk for chunk, _ in indexed] == [chunk for chunk, _ in exact]
        assert [score for _, score in indexed] == pytest.approx([score for _, score in exact], abs=1e-5)


def test_a_dense_search_inside_a_transaction_leaves_later_statements_free_to_sort(vasa):
    # The test runs inside a transaction, as a request under ATOMIC_REQUESTS does.
    first, _ = vasa
    vector = _vectors(["Who built the Vasa?"])[0]
    vector_search(where=RetrievalFilter.for_tenant(first), embedder="local", vector=vector, limit=10)
    with connection.cursor() as cursor:
        cursor.execute("SHOW enable_sort")
        assert cursor.fetchone()[0] == "on"


def test_another_tenants_identical_chunks_never_appear(vasa):
    first, second = vasa
    own = set(Chunk.objects.filter(tenant=first).values_list("id", flat=True))
    for vector in _vectors(_questions()):
        for plan in ("auto", "exact"):
            found = vector_search(
                where=RetrievalFilter.for_tenant(first), embedder="local", vector=vector, limit=50, plan=plan
            )
            assert len(found) == 50
            assert {chunk for chunk, _ in found} <= own


def test_a_source_filter_keeps_only_that_sources_chunks_on_the_tenant_index(vasa):
    first, _ = vasa
    late = first.sources.get(name="late")
    allowed = set(Chunk.objects.filter(tenant=first, version__document__source=late).values_list("id", flat=True))
    where = RetrievalFilter.for_tenant(first, source_ids=[late.pk])
    for vector in _vectors(_questions()[:5]):
        indexed = vector_search(where=where, embedder="local", vector=vector, limit=10)
        exact = vector_search(where=where, embedder="local", vector=vector, limit=10, plan="exact")
        assert len(indexed) == 10
        assert {chunk for chunk, _ in indexed} <= allowed
        assert [chunk for chunk, _ in indexed] == [chunk for chunk, _ in exact]


def test_deleting_a_tenant_drops_its_index_and_the_other_tenant_still_searches(vasa):
    first, second = vasa
    tenant_delete(tenant=first)

    assert not Tenant.objects.filter(pk=first.pk).exists()
    assert tenant_vector_indexes(tenant_id=first.pk) == []
    vector = _vectors(["Who built the Vasa?"])[0]
    found = vector_search(where=RetrievalFilter.for_tenant(second), embedder="local", vector=vector, limit=5)
    assert len(found) == 5


def test_the_index_of_a_tenant_deleted_without_the_service_is_harmless_and_pruned(vasa):
    first, second = vasa
    Tenant.objects.filter(pk=first.pk).delete()  # e.g. the admin or a benchmark's cleanup

    vector = _vectors(["Who built the Vasa?"])[0]
    assert len(vector_search(where=RetrievalFilter.for_tenant(second), embedder="local", vector=vector, limit=5)) == 5
    assert tenant_vector_index_ensure(tenant_id=second.pk, embedder_key="local") == vector_index_name(
        "local", second.pk
    )
    assert tenant_vector_indexes(tenant_id=first.pk) == []
