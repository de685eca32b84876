"""Retrieval sees current versions by default and the versions current on an ``as_of`` date."""

from dataclasses import replace
from datetime import UTC, date, datetime

import pytest

from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from retrieval.filters import RetrievalFilter
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from retrieval.stages.retrieve.lexical import bm25_search
from tests.factories import SourceFactory

OLD = ReadDocument(
    external_id="ref/databases",
    title="Databases",
    text="Databases\n\nDjango supports PostgreSQL 12 and higher. Use psycopg to connect to PostgreSQL.",
    published_at=datetime(2023, 4, 3, tzinfo=UTC),
)
NEW = replace(
    OLD,
    text="Databases\n\nDjango supports PostgreSQL 14 and higher. Use psycopg to connect to PostgreSQL.",
    published_at=datetime(2025, 4, 2, tzinfo=UTC),
)
BETWEEN = date(2024, 6, 1)


@pytest.fixture
def versioned(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[OLD])
    documents_ingest(tenant=tenant, source=source, documents=[NEW])
    return tenant


def texts(response):
    return [r.chunk.text for r in response.results]


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "dense"])
def test_default_search_sees_only_the_current_version(versioned, mode):
    response = chunk_search(
        AnswerRequest(question="Which PostgreSQL versions are supported?", k=10, mode=mode), tenant=versioned
    )

    assert [r.chunk.version.number for r in response.results] == [2]
    assert "PostgreSQL 14" in texts(response)[0]


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "dense"])
def test_as_of_a_date_between_versions_sees_the_older_version(versioned, mode):
    response = chunk_search(
        AnswerRequest(question="Which PostgreSQL versions are supported?", k=10, mode=mode, as_of=BETWEEN),
        tenant=versioned,
    )

    assert [r.chunk.version.number for r in response.results] == [1]
    assert "PostgreSQL 12" in texts(response)[0]
    assert response.results[0].as_dict()["version_date"] == "2023-04-03"
    assert response.results[0].as_dict()["version_current"] is False


def test_as_of_the_new_versions_release_day_sees_the_new_version(versioned):
    response = chunk_search(
        AnswerRequest(question="PostgreSQL versions", k=10, as_of=date(2025, 4, 2)), tenant=versioned
    )

    assert [r.chunk.version.number for r in response.results] == [2]


def test_as_of_before_a_document_existed_finds_nothing_of_it(versioned):
    assert (
        chunk_search(
            AnswerRequest(question="PostgreSQL versions", k=10, as_of=date(2020, 1, 1)), tenant=versioned
        ).results
        == []
    )


def test_undated_versions_count_from_their_ingestion_time(tenant, source):
    documents_ingest(tenant=tenant, source=source, documents=[replace(OLD, published_at=None)])

    assert chunk_search(AnswerRequest(question="PostgreSQL", k=5, as_of=date(2020, 1, 1)), tenant=tenant).results == []
    today = datetime.now(UTC).date()
    assert len(chunk_search(AnswerRequest(question="PostgreSQL", k=5, as_of=today), tenant=tenant).results) == 1


def test_as_of_combines_with_a_source_filter(versioned):
    other = SourceFactory(tenant=versioned, name="blog")
    documents_ingest(
        tenant=versioned,
        source=other,
        documents=[
            ReadDocument(
                external_id="blog/pg",
                title="Blog",
                text="Blog\n\nWe moved to PostgreSQL 13 last year.",
                published_at=datetime(2023, 1, 1, tzinfo=UTC),
            )
        ],
    )
    response = chunk_search(
        AnswerRequest(question="PostgreSQL", k=10, as_of=BETWEEN, source_ids=[other.pk], mode="lexical"),
        tenant=versioned,
    )

    assert [r.chunk.version.document.external_id for r in response.results] == ["blog/pg"]


def test_as_of_never_reaches_another_tenants_versions(versioned, other_tenant_corpus):
    documents_ingest(tenant=other_tenant_corpus, source=other_tenant_corpus.sources.get(), documents=[OLD])

    response = chunk_search(AnswerRequest(question="PostgreSQL", k=20, as_of=BETWEEN), tenant=versioned)

    assert {r.chunk.tenant_id for r in response.results} == {versioned.pk}


def test_default_bm25_scores_equal_those_of_a_corpus_holding_only_the_current_version(versioned, db):
    from tests.factories import TenantFactory

    fresh = TenantFactory(slug="fresh")
    documents_ingest(tenant=fresh, source=SourceFactory(tenant=fresh), documents=[NEW])

    kept = bm25_search(where=RetrievalFilter.for_tenant(versioned), query="PostgreSQL psycopg", limit=5)
    alone = bm25_search(where=RetrievalFilter.for_tenant(fresh), query="PostgreSQL psycopg", limit=5)

    assert [score for _, score in kept] == pytest.approx([score for _, score in alone])


def test_an_answer_as_of_a_date_cites_the_older_version_with_its_date(versioned):
    run = pipeline_answer(
        AnswerRequest(question="Which PostgreSQL versions are supported?", use_llm=False, as_of=BETWEEN),
        tenant=versioned,
    )

    assert "PostgreSQL 12" in run.answer.text
    cited = [c.as_dict() for c in run.answer.citations]
    assert cited and {(c["version"], c["version_date"]) for c in cited} == {(1, "2023-04-03")}


def test_the_real_local_llm_answers_as_of_a_date_from_the_older_version(versioned, local_llm_url):
    from llm import LLMClient
    from llm.local import MODEL_ALIAS

    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600)
    run = pipeline_answer(
        AnswerRequest(question="Which PostgreSQL versions does Django support?", k=1, strategy="top_n", as_of=BETWEEN),
        tenant=versioned,
        llm=llm,
    )

    assert run.answer.mode == "llm", run.degraded_reason
    assert all(c.passage.version.number == 1 for c in run.answer.citations)
    assert {r.chunk.version.number for r in run.retrieval.results} == {1}


def test_the_search_command_takes_as_of_and_prints_the_version_date(versioned, capsys):
    import json

    from django.core.management import call_command

    call_command("search", "PostgreSQL versions", "--tenant", versioned.slug, "--as-of", "2024-06-01", "--json")

    top = json.loads(capsys.readouterr().out)["results"][0]
    assert (top["version"], top["version_date"]) == (1, "2023-04-03")


def test_the_ask_command_refuses_a_bad_as_of_date_with_a_clear_message(versioned):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        call_command("ask", "PostgreSQL?", "--tenant", versioned.slug, "--as-of", "06/01/2024", "--extractive")
