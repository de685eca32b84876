"""Versions keep their chunks (not current), BM25 statistics count current chunks, retention, diffs."""

from dataclasses import replace
from datetime import date

import pytest
from django.db import IntegrityError, connection, transaction

from core.errors import InvalidInput, NotFound
from knowledge.ingestion.splitters import SingleChunkSplitter
from knowledge.models import Chunk, CorpusStatistic, DocumentVersion, Posting, TermStatistic
from knowledge.services import documents_ingest
from knowledge.services.versions import versions_prune
from knowledge.versions import as_of_parse, document_versions_list, version_diff
from tests.conftest import DATABASES_2023, DATABASES_2025
from tests.factories import DocumentFactory, TenantFactory


def ingest(tenant, source, *documents):
    return documents_ingest(tenant=tenant, source=source, documents=list(documents), splitter=SingleChunkSplitter())


def current_statistics(tenant):
    """N, total length and df recomputed from the current chunks alone (what BM25 must use)."""
    chunks = list(Chunk.objects.for_tenant(tenant).filter(is_current=True))
    df: dict[str, int] = {}
    for chunk in chunks:
        for lexeme in chunk.term_freqs:
            df[lexeme] = df.get(lexeme, 0) + 1
    return len(chunks), sum(c.term_count for c in chunks), df


def stored_statistics(tenant):
    corpus = CorpusStatistic.objects.get(tenant=tenant)
    return (
        corpus.chunk_count,
        corpus.term_count,
        dict(TermStatistic.objects.for_tenant(tenant).values_list("lexeme", "df")),
    )


def test_a_new_version_keeps_the_old_versions_chunks_marked_not_current(tenant, source):
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, DATABASES_2025)

    old, new = DocumentVersion.objects.filter(document__external_id="ref/databases").order_by("number")
    assert not old.is_current and new.is_current
    assert [c.is_current for c in old.chunks.all()] == [False]
    assert [c.is_current for c in new.chunks.all()] == [True]
    assert "12" in old.chunks.get().text


def test_every_version_carries_its_documents_tenant(tenant, source):
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, DATABASES_2025)

    versions = DocumentVersion.objects.filter(document__external_id="ref/databases")
    assert [v.tenant_id for v in versions] == [tenant.pk, tenant.pk]


def test_a_version_in_another_tenant_than_its_document_is_refused(tenant):
    document = DocumentFactory(source__tenant=tenant)
    other = TenantFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        with connection.cursor() as cursor:  # the key is deferred: check it at the INSERT
            cursor.execute("SET CONSTRAINTS version_document_same_tenant_fk IMMEDIATE")
        DocumentVersion.objects.create(tenant=other, document=document, number=1, text="x", content_hash="0")


def test_bm25_statistics_count_only_current_chunks_while_old_postings_stay_for_as_of(tenant, source):
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, DATABASES_2025)

    assert stored_statistics(tenant) == current_statistics(tenant)
    assert stored_statistics(tenant)[0] == 1
    old_chunk = Chunk.objects.get(version__number=1)
    postings = Posting.objects.filter(chunk_id=old_chunk.pk)
    assert postings.exists() and not postings.filter(is_current=True).exists()
    assert not Posting.objects.filter(chunk__version__number=2, is_current=False).exists()


def test_statistics_stay_exact_through_several_versions_and_duplicates(tenant, source):
    ingest(tenant, source, DATABASES_2023, replace(DATABASES_2023, external_id="mirror/databases", title="Mirror"))
    ingest(tenant, source, DATABASES_2025)
    ingest(tenant, source, replace(DATABASES_2025, text=DATABASES_2025.text + " MariaDB 10.5 too."))

    assert stored_statistics(tenant) == current_statistics(tenant)


def test_a_duplicate_gets_a_copy_of_the_replaced_versions_chunks_and_the_original_keeps_its_own(tenant, source):
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, replace(DATABASES_2023, external_id="mirror/databases", title="Mirror"))
    ingest(tenant, source, DATABASES_2025)

    mirror = DocumentVersion.objects.get(document__external_id="mirror/databases")
    original_v1 = DocumentVersion.objects.get(document__external_id="ref/databases", number=1)
    assert mirror.duplicate_of is None and mirror.chunks.get().is_current
    assert mirror.chunks.get().heading.startswith("Mirror")
    assert original_v1.chunks.get().is_current is False


def test_retention_keeps_chunks_of_only_the_newest_old_versions(tenant, source):
    source.versions_kept = 1
    source.save(update_fields=["versions_kept"])
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, DATABASES_2025)
    ingest(tenant, source, replace(DATABASES_2025, text=DATABASES_2025.text + " And MariaDB 10.5."))

    versions = DocumentVersion.objects.filter(document__external_id="ref/databases").order_by("number")
    assert [v.chunks.count() for v in versions] == [0, 1, 1]
    assert [v.number for v in versions] == [1, 2, 3]  # the text of version 1 is kept
    assert stored_statistics(tenant) == current_statistics(tenant)


def test_retention_zero_applied_later_drops_every_old_versions_chunks_but_never_current_ones(tenant, source):
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, DATABASES_2025)
    source.versions_kept = 0
    source.save(update_fields=["versions_kept"])

    assert versions_prune(source=source) == 1
    assert list(Chunk.objects.for_tenant(tenant).values_list("is_current", flat=True)) == [True]


def test_the_version_list_gives_each_versions_date_and_chunk_count_newest_first(tenant, source):
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, DATABASES_2025)
    document_id = DocumentVersion.objects.get(document__external_id="ref/databases", number=1).document_id

    rows = document_versions_list(tenant=tenant, document_id=document_id)

    assert [(r.number, r.date, r.is_current, r.chunks) for r in rows] == [
        (2, date(2025, 4, 2), True, 1),
        (1, date(2023, 4, 3), False, 1),
    ]


def test_a_word_diff_shows_the_changed_version_number(tenant, source):
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, DATABASES_2025)
    document_id = DocumentVersion.objects.get(document__external_id="ref/databases", number=1).document_id

    diff = version_diff(tenant=tenant, document_id=document_id, old=1, new=2)

    assert ("delete", "12") in diff.ops and ("insert", "14") in diff.ops
    assert (diff.inserted, diff.deleted) == (1, 1)
    assert "<del>12</del> <ins>14</ins>" in diff.as_html()


def test_another_tenants_document_has_no_versions_to_list_or_diff(tenant, source, other_tenant_corpus):
    ingest(tenant, source, DATABASES_2023)
    document_id = DocumentVersion.objects.get(document__external_id="ref/databases", number=1).document_id

    with pytest.raises(NotFound):
        document_versions_list(tenant=other_tenant_corpus, document_id=document_id)
    with pytest.raises(NotFound):
        version_diff(tenant=other_tenant_corpus, document_id=document_id, old=1, new=1)


@pytest.mark.parametrize("value", ["2024-13-01", "yesterday", "2024-6-1", "20240601", "2024-02-30"])
def test_a_bad_as_of_date_is_refused_with_a_clear_message(value):
    with pytest.raises(InvalidInput, match="YYYY-MM-DD"):
        as_of_parse(value)


def test_as_of_accepts_an_iso_date_and_empty_means_current():
    assert as_of_parse("2024-06-01") == date(2024, 6, 1)
    assert as_of_parse("") is None and as_of_parse(None) is None


def test_an_admin_lowering_versions_kept_drops_old_chunks_at_once(client, tenant, source, admin_member):
    from django.contrib.auth.models import Permission
    from django.urls import reverse

    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    client.force_login(admin_member)
    ingest(tenant, source, DATABASES_2023)
    ingest(tenant, source, DATABASES_2025)
    form = {"tenant": tenant.pk, "name": source.name, "kind": source.kind, "reliability": "1.0"}

    response = client.post(reverse("admin:knowledge_source_change", args=[source.pk]), {**form, "versions_kept": "0"})

    assert response.status_code == 302
    source.refresh_from_db()
    assert source.versions_kept == 0
    assert list(Chunk.objects.for_tenant(tenant).values_list("is_current", flat=True)) == [True]
