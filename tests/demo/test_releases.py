"""The real two-release test: Django 4.2's and 5.2's docs as versions of the same documents.

Pages come from the PyPI source distributions (``pip download``, cached under
``KB_DATA_DIR/downloads``); the test is skipped, saying why, when they cannot be downloaded.
Changed facts are answered from 5.2 by default and from 4.2 ``as_of`` a date between releases.
"""

import pytest
from django.conf import settings

from demo.releases import AS_OF_BETWEEN, CHANGED_FACTS, RELEASES, TEST_PAGES, fact_check, releases_ingest
from demo.services import DownloadFailed
from knowledge.models import Document, DocumentVersion
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search

FACTS = [f for f in CHANGED_FACTS if f.document + ".txt" in TEST_PAGES]


@pytest.fixture(scope="module")
def releases(django_db_setup, django_db_blocker):
    """One tenant with the test pages of both releases (ingested once for the module)."""
    from tests.factories import SourceFactory, TenantFactory

    with django_db_blocker.unblock():
        tenant = TenantFactory(slug="django-releases")
        source = SourceFactory(tenant=tenant, name="django-docs")
        try:
            releases_ingest(
                tenant=tenant, source=source, downloads=settings.KB_DATA_DIR / "downloads", pages=TEST_PAGES
            )
        except DownloadFailed as exc:
            tenant.delete()
            pytest.skip(f"Django's source distributions cannot be downloaded here: {exc.message[:200]}")
        yield tenant
        tenant.delete()


def test_pages_in_both_releases_become_two_dated_versions_of_one_document(releases, db):
    versions = DocumentVersion.objects.for_tenant(releases).filter(document__external_id="ref/databases")

    assert [(v.number, v.published_at.date(), v.is_current) for v in versions.order_by("number")] == [
        (1, RELEASES[0].released, False),
        (2, RELEASES[1].released, True),
    ]
    new_only = Document.objects.for_tenant(releases).get(external_id="topics/composite-primary-key")
    assert new_only.versions.get().published_at.date() == RELEASES[1].released


def evidence(results) -> str:
    return " ".join(r.chunk.text for r in results)


@pytest.mark.parametrize("fact", FACTS, ids=lambda f: f.question)
def test_changed_facts_are_retrieved_from_5_2_by_default(releases, db, fact):
    top = chunk_search(AnswerRequest(question=fact.question, k=3), tenant=releases).results

    assert fact.document in [r.chunk.version.document.external_id for r in top]
    assert all(r.chunk.version.is_current for r in top)  # 5.2's, or a page unchanged since 4.2
    assert top[0].chunk.version.published_at.date() == RELEASES[1].released
    assert fact_check(fact, evidence(top), release="new")


@pytest.mark.parametrize("fact", FACTS, ids=lambda f: f.question)
def test_changed_facts_are_retrieved_from_4_2_as_of_a_date_before_5_2(releases, db, fact):
    top = chunk_search(AnswerRequest(question=fact.question, k=3, as_of=AS_OF_BETWEEN), tenant=releases).results

    assert {r.chunk.version.published_at.date() for r in top} == {RELEASES[0].released}
    assert fact_check(fact, evidence(top), release="old")


def test_an_extractive_answer_as_of_a_date_cites_only_4_2_passages_with_their_date(releases, db):
    question = "Which PostgreSQL versions does Django support?"

    old = pipeline_answer(
        AnswerRequest(question=question, use_llm=False, as_of=AS_OF_BETWEEN, strategy="top_n", k=3),
        tenant=releases,
        trace=False,
    ).answer
    new = pipeline_answer(
        AnswerRequest(question=question, use_llm=False, strategy="top_n", k=3), tenant=releases, trace=False
    ).answer

    assert {c.as_dict()["version_date"] for c in old.citations} == {RELEASES[0].released.isoformat()}
    assert {c.as_dict()["version_date"] for c in new.citations} == {RELEASES[1].released.isoformat()}
    assert "PostgreSQL 12" in old.text and "PostgreSQL 14" not in old.text
    assert "PostgreSQL 14" in new.text and "PostgreSQL 12" not in new.text
