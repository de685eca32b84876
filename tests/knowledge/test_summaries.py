"""Per-document summaries at ingestion: the summary chunk, the task and its switch, versions and
retention, tenant isolation, the LLM and its degradation to the extractive summary."""

from dataclasses import replace

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from core.errors import InvalidInput
from knowledge.ingestion.splitters import get_splitter
from knowledge.models import SUMMARY_ORDINAL, Chunk
from knowledge.services import documents_ingest
from knowledge.summaries.extractive import BodyChunk, lexrank, summary_extract
from knowledge.summaries.services import summaries_refresh, summaries_setting, versions_to_summarize
from llm import LLMBadOutput, LLMClient, LLMEmptyReply, LLMTimeout
from llm.tokenizer import count_tokens
from tests.conftest import BIKE, PASTA, TAXES
from tests.factories import SourceFactory, TenantFactory
from tests.retrieval.doubles import ScriptedLLM

SENTENCES = get_splitter("sentence")


def ingest(tenant, source, *documents):
    return documents_ingest(tenant=tenant, source=source, documents=list(documents), splitter=SENTENCES)


@pytest.fixture
def sentence_corpus(tenant, source):
    """The three handbook documents, one chunk per sentence (so each has several chunks)."""
    ingest(tenant, source, PASTA, BIKE, TAXES)
    return tenant


def summaries_of(tenant):
    return list(Chunk.objects.for_tenant(tenant).filter(kind="summary").select_related("version__document"))


def unit(vector):
    vector = np.asarray(vector, dtype=np.float32)
    return vector / np.linalg.norm(vector)


# ---- the extractive summarizer --------------------------------------------------------------


def test_lexrank_ranks_the_chunk_closest_to_all_the_others_first():
    vectors = np.stack([unit([1, 0, 0]), unit([1, 1, 0]), unit([0, 1, 0]), unit([0, 0, 1])])
    scores = lexrank(vectors)
    assert scores.sum() == pytest.approx(1.0)
    assert int(np.argmax(scores)) == 1  # the chunk between the two others
    assert int(np.argmin(scores)) == 3  # unlike every other chunk


def test_the_extractive_summary_keeps_the_lead_and_the_central_sentences_in_document_order_within_budget():
    chunks = [
        BodyChunk(0, "Vasa was a Swedish warship. It was built in 1626.", unit([1, 0, 0])),
        BodyChunk(1, "The ship sank on its maiden voyage in 1628.", unit([1, 1, 1])),  # like every other
        BodyChunk(2, "Stockholm harbour was busy that summer.", unit([0, 1, 0])),
        BodyChunk(3, "Salvage of the ship began in 1961.", unit([0, 0, 1])),
    ]
    lead, central = "Vasa was a Swedish warship.", "The ship sank on its maiden voyage in 1628."
    budget = count_tokens(lead) + count_tokens(central) + 1  # room for one more sentence: the most central
    summary = summary_extract(chunks, max_tokens=budget)
    assert summary == f"{lead} {central}"  # not "It was built in 1626.": one (the first) sentence per chunk
    assert summary_extract(chunks, max_tokens=200).split(". ")[1:] == [  # all, in document order
        "The ship sank on its maiden voyage in 1628",
        "Stockholm harbour was busy that summer",
        "Salvage of the ship began in 1961.",
    ]
    assert summary_extract(chunks, max_tokens=6).endswith("…")  # a long lead is clipped to the budget
    assert summary_extract([], max_tokens=50) == ""


# ---- the summary chunk ----------------------------------------------------------------------


def test_each_multi_chunk_version_gets_one_summary_chunk_embedded_and_indexed_like_a_chunk(sentence_corpus):
    counts = summaries_refresh(tenant_id=sentence_corpus.pk, method="extractive")
    assert counts["created"] == 3 and counts["extractive"] == 3 and counts["degraded"] == 0
    for summary in summaries_of(sentence_corpus):
        assert summary.ordinal == SUMMARY_ORDINAL and summary.is_current
        assert summary.heading == summary.version.document.title
        assert summary.embedder == sentence_corpus.embedder and len(summary.embedding) == 384
        assert summary.term_count > 0  # BM25 columns computed like any chunk's
        assert summary.metadata == {"summary": {"method": "extractive"}}
    assert summaries_refresh(tenant_id=sentence_corpus.pk, method="extractive")["created"] == 0  # idempotent


def test_a_one_chunk_document_is_its_own_summary(corpus):
    assert versions_to_summarize(tenant=corpus) == []
    assert summaries_refresh(tenant_id=corpus.pk, method="extractive")["created"] == 0


def test_the_database_refuses_a_summary_at_a_body_ordinal(sentence_corpus):
    from django.db import IntegrityError, transaction

    body = Chunk.objects.for_tenant(sentence_corpus).filter(kind="body").first()
    with pytest.raises(IntegrityError), transaction.atomic():
        Chunk.objects.filter(pk=body.pk).update(kind="summary")


# ---- the task and the switch ----------------------------------------------------------------


def test_ingestion_queues_the_summary_task_on_commit_when_the_tenant_turns_summaries_on(
    tenant, source, django_capture_on_commit_callbacks
):
    tenant.retrieval_config = {"summaries": "extractive"}
    tenant.save()
    with django_capture_on_commit_callbacks(execute=True):
        ingest(tenant, source, PASTA, BIKE)
    assert {s.version.document.external_id for s in summaries_of(tenant)} == {"recipes/pasta", "howto/bike-tyre"}
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        ingest(tenant, source, PASTA)  # unchanged: nothing new to summarize
    assert not [c for c in callbacks if "summaries" in repr(c)]


def test_with_summaries_off_ingestion_queues_no_summary_task(tenant, source, django_capture_on_commit_callbacks):
    tenant.retrieval_config = {"summaries": "off"}
    tenant.save()
    with django_capture_on_commit_callbacks(execute=True):
        ingest(tenant, source, PASTA, BIKE)
    assert summaries_of(tenant) == []


def test_a_bad_summaries_setting_is_a_clear_error(tenant):
    from retrieval.pipeline import pipeline_spec

    tenant.retrieval_config = {"summaries": "sometimes"}
    with pytest.raises(InvalidInput, match="summaries"):
        summaries_setting(tenant)
    with pytest.raises(InvalidInput, match="summaries"):
        pipeline_spec(tenant=tenant)
    with pytest.raises(InvalidInput, match="include_summaries"):
        pipeline_spec(tenant=tenant, overrides={"summaries": "auto", "include_summaries": "yes"})


def test_a_bad_stored_summaries_setting_never_fails_the_ingestion_it_follows(
    tenant, source, django_capture_on_commit_callbacks
):
    tenant.retrieval_config = {"summaries": "sometimes"}
    tenant.save()
    with django_capture_on_commit_callbacks(execute=True):
        report = ingest(tenant, source, PASTA)
    assert report.counts()["created"] == 1 and summaries_of(tenant) == []


def test_the_summarize_command_summarizes_an_existing_tenant(sentence_corpus, capsys):
    call_command("summarize", sentence_corpus.slug, "--method", "extractive")
    assert '"created": 3' in capsys.readouterr().out
    assert len(summaries_of(sentence_corpus)) == 3
    with pytest.raises(CommandError, match="No tenant"):
        call_command("summarize", "no-such-tenant")


# ---- versions, retention, reindexing ----------------------------------------------------------


def test_a_new_version_leaves_the_old_summary_not_current_and_gets_its_own(
    tenant, source, django_capture_on_commit_callbacks
):
    tenant.retrieval_config = {"summaries": "extractive"}
    tenant.save()
    with django_capture_on_commit_callbacks(execute=True):
        ingest(tenant, source, PASTA)
    with django_capture_on_commit_callbacks(execute=True):
        ingest(tenant, source, replace(PASTA, text=PASTA.text + " Season with pepper."))
    summaries = sorted(summaries_of(tenant), key=lambda s: s.version.number)
    assert [(s.version.number, s.is_current) for s in summaries] == [(1, False), (2, True)]


def test_retention_deletes_an_old_version_summary_with_its_chunks(tenant, django_capture_on_commit_callbacks):
    source = SourceFactory(tenant=tenant, name="kept", versions_kept=0)
    tenant.retrieval_config = {"summaries": "extractive"}
    tenant.save()
    with django_capture_on_commit_callbacks(execute=True):
        ingest(tenant, source, PASTA)
    with django_capture_on_commit_callbacks(execute=True):
        ingest(tenant, source, replace(PASTA, text=PASTA.text + " Season with pepper."))
    assert [(s.version.number, s.is_current) for s in summaries_of(tenant)] == [(2, True)]


def test_reindexing_a_version_replaces_its_summary(sentence_corpus, django_capture_on_commit_callbacks):
    from knowledge.services import version_reindex

    sentence_corpus.retrieval_config = {"summaries": "extractive"}
    sentence_corpus.save()
    summaries_refresh(tenant_id=sentence_corpus.pk)
    old = summaries_of(sentence_corpus)[0]
    with django_capture_on_commit_callbacks(execute=True):
        version_reindex(version_id=old.version_id, splitter=SENTENCES)
    new = [s for s in summaries_of(sentence_corpus) if s.version_id == old.version_id]
    assert len(new) == 1 and new[0].pk != old.pk


# ---- tenant isolation -------------------------------------------------------------------------


def test_summarizing_a_tenant_never_writes_or_reads_another_tenants_documents(sentence_corpus):
    other = TenantFactory(slug="other-summaries")
    ingest(other, SourceFactory(tenant=other, name="secret"), BIKE, TAXES)
    summaries_refresh(tenant_id=sentence_corpus.pk, method="extractive")
    assert summaries_of(other) == []
    summaries_refresh(tenant_id=other.pk, method="extractive")
    for tenant in (sentence_corpus, other):
        for summary in summaries_of(tenant):
            assert summary.tenant_id == tenant.pk == summary.version.document.tenant_id
            assert summary.is_current


# ---- the LLM and its degradation ------------------------------------------------------------


def test_with_an_llm_the_llm_writes_the_summary_from_the_document(sentence_corpus):
    llm = ScriptedLLM(chat_reply="Summary: How to cook pasta al dente and serve it with sauce.")
    counts = summaries_refresh(tenant_id=sentence_corpus.pk, method="auto", llm=llm)
    assert counts["llm"] == 3 and counts["degraded"] == 0 and counts["tokens_in"] == 300
    texts = {s.text for s in summaries_of(sentence_corpus)}
    assert texts == {"How to cook pasta al dente and serve it with sauce."}  # the preamble is dropped
    prompt = next(m for _, messages in llm.calls for m in messages if "Bring a large pot" in m["content"])
    assert '<document title="Cooking pasta">' in prompt["content"]
    assert {s.metadata["summary"]["method"] for s in summaries_of(sentence_corpus)} == {"llm"}


def test_an_llm_endpoint_failure_degrades_to_the_extractive_summary_recorded_and_stops_calling_it(sentence_corpus):
    llm = ScriptedLLM(chat_reply=LLMTimeout("The LLM endpoint did not answer within 30 s."))
    counts = summaries_refresh(tenant_id=sentence_corpus.pk, method="llm", llm=llm, batch=1)
    assert counts["created"] == 3 and counts["extractive"] == 3 and counts["degraded"] == 3
    assert len(llm.calls) == 1  # the later batches did not call the failing endpoint again
    for summary in summaries_of(sentence_corpus):
        assert summary.metadata["summary"]["method"] == "extractive"
        assert summary.metadata["summary"]["degraded"].startswith("llm_timeout")
        assert summary.text.startswith(summary.version.document.title)  # the lead sentence (the title line)


@pytest.mark.parametrize("reply", [LLMEmptyReply("empty"), LLMBadOutput("unreadable"), "   "])
def test_a_bad_llm_reply_degrades_that_summary_only(sentence_corpus, reply):
    llm = ScriptedLLM(chat_reply=reply)
    counts = summaries_refresh(tenant_id=sentence_corpus.pk, method="llm", llm=llm, batch=1)
    assert counts["degraded"] == 3 and len(llm.calls) == 3  # a bad reply does not stop the next calls


def test_llm_method_without_a_configured_llm_writes_extractive_summaries_marked_degraded(sentence_corpus, settings):
    settings.KB_LLM_MODEL = ""
    counts = summaries_refresh(tenant_id=sentence_corpus.pk, method="llm")
    assert counts["degraded"] == 3
    assert {s.metadata["summary"]["degraded"] for s in summaries_of(sentence_corpus)} == {"no LLM is configured"}
    assert summaries_refresh(tenant_id=sentence_corpus.pk, method="auto", rebuild=True)["degraded"] == 0


def test_a_failure_while_storing_leaves_no_summary_half_written(sentence_corpus, monkeypatch):
    from knowledge.summaries import services

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(services, "count_tokens", broken)
    with pytest.raises(RuntimeError):
        summaries_refresh(tenant_id=sentence_corpus.pk, method="extractive")
    assert summaries_of(sentence_corpus) == []


def test_rebuilding_replaces_each_summary_in_place(sentence_corpus):
    summaries_refresh(tenant_id=sentence_corpus.pk, method="extractive")
    counts = summaries_refresh(
        tenant_id=sentence_corpus.pk, method="llm", llm=ScriptedLLM(chat_reply="A new summary."), rebuild=True
    )
    assert counts["created"] == 3
    assert {s.text for s in summaries_of(sentence_corpus)} == {"A new summary."}


def test_the_real_local_llm_writes_summaries_end_to_end(tenant, source, local_llm_url):
    from knowledge.ingestion.readers import ReadDocument
    from llm.local import MODEL_ALIAS

    # One short two-sentence document and a short reply: the shared CPU makes the tiny model slow.
    ingest(
        tenant, source, ReadDocument(external_id="tea", title="Tea", text="Brew green tea hot.\n\nSteep it briefly.")
    )
    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600)
    counts = summaries_refresh(tenant_id=tenant.pk, method="llm", llm=llm, max_tokens=12)
    assert counts["created"] == 1
    (summary,) = summaries_of(tenant)
    assert counts["llm"] == 1, summary.metadata  # the tiny model proves the path, not the quality
    assert summary.metadata["summary"] == {"method": "llm", "model": MODEL_ALIAS}
    assert summary.text.strip() and summary.token_count <= 12
