"""Enrichment of chunks: keyphrases (YAKE), questions from an LLM, their BM25 postings and statistics."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from core.errors import InvalidInput
from core.models import Tenant
from knowledge.enrichment.keyphrases import keyphrases_extract
from knowledge.enrichment.services import chunks_enrich, enrichment_enabled
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk, ChunkEnrichment, EnrichmentCorpusStatistic, EnrichmentPosting
from knowledge.services import document_delete, documents_ingest
from llm import LLMBadOutput, LLMUnavailable
from tests.conftest import BIKE, PASTA
from tests.retrieval.doubles import ScriptedLLM


def statistics_are_exact(tenant) -> None:
    """The trigger-kept statistics equal what the postings say, lexeme by lexeme."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT lexeme, count(*) FROM knowledge_enrichmentposting WHERE tenant_id = %s GROUP BY lexeme
               EXCEPT SELECT lexeme, df FROM knowledge_enrichmenttermstatistic WHERE tenant_id = %s""",
            [tenant.pk, tenant.pk],
        )
        assert cursor.fetchall() == []
        cursor.execute(
            "SELECT count(*) FROM knowledge_enrichmenttermstatistic WHERE tenant_id = %s AND lexeme NOT IN "
            "(SELECT lexeme FROM knowledge_enrichmentposting WHERE tenant_id = %s)",
            [tenant.pk, tenant.pk],
        )
        assert cursor.fetchone()[0] == 0
        cursor.execute(
            "SELECT count(DISTINCT chunk_id), COALESCE(sum(term_count), 0) FROM knowledge_chunkenrichment e "
            "WHERE tenant_id = %s AND EXISTS (SELECT 1 FROM knowledge_enrichmentposting p WHERE p.chunk_id = e.chunk_id)",
            [tenant.pk],
        )
        expected = cursor.fetchone()
    stat = EnrichmentCorpusStatistic.objects.filter(tenant=tenant).first()
    assert ((stat.chunk_count, stat.term_count) if stat else (0, 0)) == tuple(expected)


def test_keyphrases_name_what_a_chunk_is_about():
    phrases = keyphrases_extract(BIKE.text)

    assert 1 <= len(phrases) <= 10
    assert any("tyre" in p.lower() or "tube" in p.lower() for p in phrases)
    assert keyphrases_extract("   ") == []


def test_enriching_a_tenant_stores_keyphrases_and_their_postings_with_exact_statistics(corpus):
    summary = chunks_enrich(tenant_id=corpus.pk, llm=None)

    current = Chunk.objects.for_tenant(corpus).filter(is_current=True)
    assert summary["chunks"] == current.count() > 0
    for enrichment in ChunkEnrichment.objects.for_tenant(corpus):
        assert enrichment.keyphrases and enrichment.questions == [] and enrichment.method == "yake"
        lexemes = set(EnrichmentPosting.objects.filter(chunk_id=enrichment.chunk_id).values_list("lexeme", flat=True))
        with connection.cursor() as cursor:
            cursor.execute("SELECT lexeme FROM unnest(to_tsvector('english', %s))", [enrichment.field_text])
            assert lexemes == {row[0] for row in cursor.fetchall()}
    statistics_are_exact(corpus)
    stat = EnrichmentCorpusStatistic.objects.get(tenant=corpus)
    assert stat.chunk_count == current.count()


def test_enriching_again_does_nothing_and_force_replaces_every_enrichment(corpus):
    chunks_enrich(tenant_id=corpus.pk, llm=None)
    before = dict(ChunkEnrichment.objects.for_tenant(corpus).values_list("chunk_id", "method"))

    assert chunks_enrich(tenant_id=corpus.pk, llm=None)["chunks"] == 0
    llm = ScriptedLLM(structured_reply={"questions": ["How do you mend a punctured inner tube?"]})
    assert chunks_enrich(tenant_id=corpus.pk, llm=llm, questions=1, force=True)["chunks"] == len(before)

    after = dict(ChunkEnrichment.objects.for_tenant(corpus).values_list("chunk_id", "method"))
    assert set(before.values()) == {"yake"} and after == dict.fromkeys(before, "yake+llm:scripted")
    assert all(e.questions for e in ChunkEnrichment.objects.for_tenant(corpus))
    statistics_are_exact(corpus)


def test_a_deleted_document_takes_its_chunks_enrichment_and_postings_out_of_the_statistics(corpus):
    chunks_enrich(tenant_id=corpus.pk, llm=None)
    bike = Chunk.objects.for_tenant(corpus).get(version__document__external_id=BIKE.external_id)
    bike_lexemes = set(EnrichmentPosting.objects.filter(chunk_id=bike.pk).values_list("lexeme", flat=True))
    assert bike_lexemes

    document_delete(tenant=corpus, document_id=bike.version.document_id)

    assert not ChunkEnrichment.objects.filter(chunk_id=bike.pk).exists()
    assert not EnrichmentPosting.objects.filter(chunk_id=bike.pk).exists()
    statistics_are_exact(corpus)
    assert (
        EnrichmentCorpusStatistic.objects.get(tenant=corpus).chunk_count
        == ChunkEnrichment.objects.for_tenant(corpus).count()
    )


def postings_follow_their_chunks(tenant) -> None:
    """Every enrichment posting's is_current equals its chunk's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM knowledge_enrichmentposting p JOIN knowledge_chunk c ON c.id = p.chunk_id"
            " WHERE p.tenant_id = %s AND p.is_current IS DISTINCT FROM c.is_current",
            [tenant.pk],
        )
        assert cursor.fetchone()[0] == 0


def test_a_new_version_marks_its_old_chunks_enrichment_postings_not_current(corpus):
    chunks_enrich(tenant_id=corpus.pk, llm=None)
    bike = Chunk.objects.for_tenant(corpus).get(version__document__external_id=BIKE.external_id)
    assert set(EnrichmentPosting.objects.filter(chunk_id=bike.pk).values_list("is_current", flat=True)) == {True}

    documents_ingest(
        tenant=corpus,
        source=bike.version.document.source,
        documents=[ReadDocument(external_id=BIKE.external_id, title=BIKE.title, text="Ride on the left.")],
    )

    assert set(EnrichmentPosting.objects.filter(chunk_id=bike.pk).values_list("is_current", flat=True)) == {False}
    postings_follow_their_chunks(corpus)
    # Enriching the new version's chunk copies its flag (true) from the chunk row.
    chunks_enrich(tenant_id=corpus.pk, llm=None)
    new = Chunk.objects.for_tenant(corpus).get(version__document__external_id=BIKE.external_id, is_current=True)
    assert set(EnrichmentPosting.objects.filter(chunk_id=new.pk).values_list("is_current", flat=True)) == {True}
    postings_follow_their_chunks(corpus)
    statistics_are_exact(corpus)


def test_questions_from_the_llm_are_stored_beside_the_keyphrases_and_indexed(corpus):
    llm = ScriptedLLM(
        structured_reply={"questions": ["How do I repair a flat?", "how do i repair a flat?", "  ", "Which glue?"]}
    )

    summary = chunks_enrich(tenant_id=corpus.pk, llm=llm, questions=2)

    enrichment = ChunkEnrichment.objects.for_tenant(corpus).get(chunk__version__document__external_id=BIKE.external_id)
    assert enrichment.questions == ["How do I repair a flat?", "Which glue?"]
    assert enrichment.method == "yake+llm:scripted" and enrichment.questions_error == ""
    assert EnrichmentPosting.objects.filter(chunk_id=enrichment.chunk_id, lexeme="repair").exists()
    assert summary["with_questions"] == summary["chunks"] and summary["usage"]["llm_calls"] == summary["chunks"]
    assert "Passage:" in llm.calls[0][1][-1]["content"]


@pytest.mark.parametrize(
    "failure",
    [LLMUnavailable("The LLM endpoint is down."), LLMBadOutput("not JSON"), {"questions": ["   "]}],
    ids=["unavailable", "bad output", "no usable question"],
)
def test_an_llm_failure_leaves_the_keyphrases_and_records_why(corpus, failure):
    summary = chunks_enrich(tenant_id=corpus.pk, llm=ScriptedLLM(structured_reply=failure), questions=3)

    enrichments = list(ChunkEnrichment.objects.for_tenant(corpus))
    assert summary["questions_failed"] == len(enrichments) == summary["chunks"] > 0
    for enrichment in enrichments:
        assert enrichment.questions == [] and enrichment.keyphrases
        assert enrichment.questions_error.startswith("llm_")
    statistics_are_exact(corpus)


def test_ingestion_queues_the_enrichment_on_commit_only_for_a_tenant_that_switched_it_on(
    tenant, source, django_capture_on_commit_callbacks, settings
):
    settings.KB_ENRICHMENT_QUESTIONS = 0
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(tenant=tenant, source=source, documents=[PASTA])
    assert not ChunkEnrichment.objects.for_tenant(tenant).exists()

    tenant.retrieval_config = {"enrichment": True}
    tenant.save()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        documents_ingest(tenant=tenant, source=source, documents=[BIKE])

    assert callbacks
    assert ChunkEnrichment.objects.for_tenant(tenant).count() == Chunk.objects.for_tenant(tenant).count()


def test_the_enrichment_switch_takes_only_true_or_false(tenant, settings):
    settings.KB_ENRICHMENT = True
    assert enrichment_enabled(tenant) is True
    tenant.retrieval_config = {"enrichment": False}
    assert enrichment_enabled(tenant) is False
    tenant.retrieval_config = {"enrichment": "yes"}
    with pytest.raises(InvalidInput):
        enrichment_enabled(tenant)


def test_the_enrich_command_enriches_an_existing_tenant_and_names_an_unknown_one(corpus, settings):
    settings.KB_LLM_MODEL = ""
    out = StringIO()

    call_command("enrich", corpus.slug, stdout=out)

    assert json.loads(out.getvalue())["chunks"] == Chunk.objects.for_tenant(corpus).count()
    with pytest.raises(CommandError, match="No tenant"):
        call_command("enrich", "nobody")


def test_another_tenants_chunks_are_never_enriched_by_id(corpus, other_tenant_corpus):
    theirs = list(Chunk.objects.for_tenant(other_tenant_corpus).values_list("pk", flat=True))
    assert theirs  # ids to try

    assert chunks_enrich(tenant_id=corpus.pk, chunk_ids=theirs, llm=None)["chunks"] == 0
    assert not ChunkEnrichment.objects.filter(tenant=Tenant.objects.get(pk=other_tenant_corpus.pk)).exists()


# --- The real local LLM (llama.cpp + Gemma 3 270M): plumbing, not quality -----------------------


def test_the_real_local_llm_writes_questions_or_its_failure_is_recorded(tenant, source, local_llm_url):
    from llm import LLMClient
    from llm.local import MODEL_ALIAS

    documents_ingest(tenant=tenant, source=source, documents=[BIKE])
    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600)

    summary = chunks_enrich(tenant_id=tenant.pk, llm=llm, questions=2)

    enrichment = ChunkEnrichment.objects.for_tenant(tenant).get()
    assert summary["usage"]["llm_calls"] >= 1 and summary["usage"]["tokens_out"] > 0
    assert enrichment.keyphrases and enrichment.method == f"yake+llm:{MODEL_ALIAS}"
    if enrichment.questions:  # indexed with the keyphrases
        assert 1 <= len(enrichment.questions) <= 2 and enrichment.questions_error == ""
        lexemes = set(EnrichmentPosting.objects.filter(chunk_id=enrichment.chunk_id).values_list("lexeme", flat=True))
        with connection.cursor() as cursor:
            cursor.execute("SELECT lexeme FROM unnest(to_tsvector('english', %s))", [enrichment.questions[0]])
            assert {row[0] for row in cursor.fetchall()} <= lexemes
    else:  # the tiny model may not manage the JSON: then the failure is recorded, keyphrases kept
        assert enrichment.questions_error.startswith("llm_"), enrichment.questions_error
    statistics_are_exact(tenant)


def test_deleting_a_tenant_removes_its_enrichment_postings_and_statistics(corpus):
    from knowledge.models import EnrichmentTermStatistic

    chunks_enrich(tenant_id=corpus.pk, llm=None)
    tenant_id = corpus.pk
    models = (ChunkEnrichment, EnrichmentPosting, EnrichmentTermStatistic, EnrichmentCorpusStatistic)
    for model in models:
        assert model.objects.filter(tenant_id=tenant_id).exists(), model.__name__  # there to delete

    Tenant.objects.filter(pk=tenant_id).delete()

    for model in models:
        assert not model.objects.filter(tenant_id=tenant_id).exists(), model.__name__


def test_deleting_a_document_through_the_api_under_row_level_security_keeps_the_statistics_exact(corpus):
    from core.models import Membership
    from tests.api.conftest import client_for
    from tests.factories import MembershipFactory

    chunks_enrich(tenant_id=corpus.pk, llm=None)
    editor = client_for(MembershipFactory(tenant=corpus, role=Membership.Role.EDITOR).user)
    bike = Chunk.objects.for_tenant(corpus).get(version__document__external_id=BIKE.external_id)

    assert editor.delete(f"/api/v1/documents/{bike.version.document_id}/").status_code == 204

    assert not EnrichmentPosting.objects.filter(chunk_id=bike.pk).exists()
    statistics_are_exact(corpus)


def test_the_chunk_admin_page_shows_the_chunk_s_keyphrases_questions_and_method(client, corpus, admin_member):
    from django.contrib.auth.models import Permission
    from django.urls import reverse

    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    client.force_login(admin_member)
    chunks_enrich(tenant_id=corpus.pk, llm=ScriptedLLM(structured_reply={"questions": ["Why patch a tube?"]}))
    chunk = Chunk.objects.for_tenant(corpus).get(version__document__external_id=BIKE.external_id)

    page = client.get(reverse("admin:knowledge_chunk_change", args=[chunk.pk])).content.decode()

    assert ChunkEnrichment.objects.get(chunk=chunk).keyphrases[0] in page
    assert "Why patch a tube?" in page and "yake+llm:scripted" in page


@pytest.mark.django_db(transaction=True)
def test_a_new_version_committed_while_an_enrichment_is_being_stored_still_marks_its_postings_not_current(corpus):
    import threading

    from django.db import connection as thread_connection
    from django.db import transaction

    bike = Chunk.objects.for_tenant(corpus).get(version__document__external_id=BIKE.external_id)
    stored, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def enrich_and_hold() -> None:  # stores the bicycle chunk's postings (current), then waits to commit
        try:
            with transaction.atomic():
                chunks_enrich(tenant_id=corpus.pk, chunk_ids=[bike.pk], llm=None)
                stored.set()
                release.wait(10)
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            stored.set()
        finally:
            thread_connection.close()

    def new_version() -> None:  # makes the bicycle chunk not current
        try:
            documents_ingest(
                tenant=corpus,
                source=bike.version.document.source,
                documents=[ReadDocument(external_id=BIKE.external_id, title=BIKE.title, text="Ride on the left.")],
            )
        except BaseException as error:
            errors.append(error)
        finally:
            thread_connection.close()

    enricher = threading.Thread(target=enrich_and_hold)
    enricher.start()
    assert stored.wait(30)
    ingester = threading.Thread(target=new_version)
    ingester.start()
    ingester.join(1.0)
    # The enrichment read the chunk row FOR SHARE: the version change waits for it to commit.
    waited = ingester.is_alive()
    release.set()
    enricher.join(30)
    ingester.join(30)

    assert errors == []
    assert waited
    assert set(EnrichmentPosting.objects.filter(chunk_id=bike.pk).values_list("is_current", flat=True)) == {False}
    postings_follow_their_chunks(corpus)
