"""Named entities in the enrichment field: stored on the chunk's row, searched by the field's BM25,
switched per tenant (off by default), and never a reason for enrichment to fail."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from core.errors import InvalidInput
from knowledge.enrichment import entities as ner
from knowledge.enrichment.services import chunks_enrich
from knowledge.ingestion.readers import ReadDocument
from knowledge.ingestion_settings import enrichment_entities_on
from knowledge.models import Chunk, ChunkEnrichment, EnrichmentPosting
from knowledge.services import documents_ingest
from retrieval.config import SearchConfig
from retrieval.filters import RetrievalFilter
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from retrieval.stages.retrieve.enrichment import enrichment_bm25_search
from tests.knowledge.test_enrichment import statistics_are_exact

# "Lisbon" is named once, at the end: YAKE's keyphrases leave it out, the NER model finds it.
REPAIR = ReadDocument(
    external_id="howto/tyre-repair",
    title="Fixing a flat bicycle tyre",
    text=(
        "Fixing a flat bicycle tyre\n\nRemove the wheel and lever the tyre off the rim. Find the puncture "
        "in the inner tube by pumping it up and listening for escaping air. Patch the hole with glue and a "
        "rubber patch, then refit the tube and inflate the tyre to the pressure printed on the tyre wall. A "
        "tyre lever and a spare tube help on long rides; the patch kit we use was bought in Lisbon."
    ),
)


@pytest.fixture
def repair(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[REPAIR])
    return tenant


def repair_enrichment(tenant) -> ChunkEnrichment:
    return ChunkEnrichment.objects.for_tenant(tenant).get(chunk__version__document__external_id=REPAIR.external_id)


def test_entities_are_off_by_default_and_the_field_holds_keyphrases_only(repair):
    assert enrichment_entities_on(repair) is False

    summary = chunks_enrich(tenant_id=repair.pk, llm=None)

    enrichment = repair_enrichment(repair)
    assert enrichment.keyphrases and enrichment.entities == [] and enrichment.entities_error == ""
    assert enrichment.method == "yake"
    assert summary["with_entities"] == summary["entities_failed"] == 0 and summary["entity_seconds"] == 0


def test_a_tenant_that_switches_entities_on_gets_them_stored_on_the_row_and_indexed(repair):
    repair.retrieval_config = {"enrichment_entities": True}
    repair.save()

    summary = chunks_enrich(tenant_id=repair.pk, llm=None)

    enrichment = repair_enrichment(repair)
    assert enrichment.entities == ["Lisbon"] and enrichment.entities_error == ""
    assert "Lisbon" not in " ".join(enrichment.keyphrases)  # only the entities bring it into the field
    assert enrichment.method == "yake+ner"
    assert enrichment.field_text.endswith("\nLisbon")
    assert EnrichmentPosting.objects.filter(chunk_id=enrichment.chunk_id, lexeme="lisbon").exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT length(to_tsvector('english', %s))", [enrichment.field_text])
        assert enrichment.term_count >= cursor.fetchone()[0] > 0
    assert summary["with_entities"] == 1 and summary["entities_failed"] == 0 and summary["entity_seconds"] > 0
    statistics_are_exact(repair)


def test_a_query_naming_an_entity_finds_the_chunk_through_the_enrichment_field(repair):
    chunk = Chunk.objects.for_tenant(repair).get(version__document__external_id=REPAIR.external_id)
    where = RetrievalFilter(tenant_id=repair.pk)

    chunks_enrich(tenant_id=repair.pk, llm=None)  # keyphrases only: the field does not name Lisbon
    assert enrichment_bm25_search(where=where, limit=5, query="Lisbon") == []

    chunks_enrich(tenant_id=repair.pk, llm=None, entities=True, force=True)

    assert [chunk_id for chunk_id, _ in enrichment_bm25_search(where=where, limit=5, query="Lisbon")] == [chunk.pk]
    config = SearchConfig.for_tenant(repair, enrichment_weight=0.3)
    [result] = chunk_search(AnswerRequest(question="Lisbon", k=5, mode="lexical"), tenant=repair, config=config).results
    parts = result.components["lexical"]
    assert result.chunk.pk == chunk.pk and parts["body"] > 0 and parts["enrichment"] > 0
    assert parts["score"] == pytest.approx(parts["body"] + 0.3 * parts["enrichment"], abs=1e-5)


def test_without_the_model_enrichment_goes_on_with_keyphrases_and_records_why(repair, monkeypatch):
    monkeypatch.setattr(ner, "MODEL_PACKAGE", "no_such_pipeline_package")
    monkeypatch.setattr(ner, "_nlp", None)

    summary = chunks_enrich(tenant_id=repair.pk, llm=None, entities=True)

    enrichment = repair_enrichment(repair)
    assert enrichment.keyphrases and enrichment.entities == [] and enrichment.method == "yake"
    assert enrichment.entities_error.startswith("entities_unavailable:")
    assert "no_such_pipeline_package" in enrichment.entities_error
    assert summary["chunks"] == summary["entities_failed"] == 1 and summary["with_entities"] == 0
    assert EnrichmentPosting.objects.filter(chunk_id=enrichment.chunk_id).exists()
    statistics_are_exact(repair)


def test_without_the_model_ingestion_still_enriches_a_tenant_that_switched_entities_on(
    tenant, source, django_capture_on_commit_callbacks, settings, monkeypatch
):
    settings.KB_ENRICHMENT_QUESTIONS = 0
    monkeypatch.setattr(ner, "MODEL_PACKAGE", "no_such_pipeline_package")
    monkeypatch.setattr(ner, "_nlp", None)
    tenant.retrieval_config = {"enrichment": True, "enrichment_entities": True}
    tenant.save()

    with django_capture_on_commit_callbacks(execute=True):
        report = documents_ingest(tenant=tenant, source=source, documents=[REPAIR])

    assert report.counts()["chunks"] == 1
    enrichment = repair_enrichment(tenant)
    assert enrichment.keyphrases and enrichment.entities_error.startswith("entities_unavailable:")


def test_ingestion_enriches_with_entities_when_the_deployment_default_is_on(
    tenant, source, django_capture_on_commit_callbacks, settings
):
    settings.KB_ENRICHMENT = True
    settings.KB_ENRICHMENT_ENTITIES = True
    settings.KB_ENRICHMENT_QUESTIONS = 0

    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(tenant=tenant, source=source, documents=[REPAIR])

    assert repair_enrichment(tenant).entities == ["Lisbon"]


def test_the_entities_switch_takes_only_true_or_false(tenant, settings):
    settings.KB_ENRICHMENT_ENTITIES = True
    assert enrichment_entities_on(tenant) is True
    tenant.retrieval_config = {"enrichment_entities": False}
    assert enrichment_entities_on(tenant) is False
    tenant.retrieval_config = {"enrichment_entities": "on"}
    with pytest.raises(InvalidInput, match="enrichment_entities"):
        enrichment_entities_on(tenant)


def test_the_enrich_command_adds_or_leaves_out_entities_on_request(repair, settings):
    settings.KB_LLM_MODEL = ""

    call_command("enrich", repair.slug, "--entities", stdout=StringIO())
    assert repair_enrichment(repair).entities == ["Lisbon"]

    out = StringIO()
    call_command("enrich", repair.slug, "--force", "--no-entities", stdout=out)
    assert json.loads(out.getvalue())["with_entities"] == 0
    assert repair_enrichment(repair).entities == []
