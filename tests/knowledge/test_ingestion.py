from dataclasses import replace

import pytest
from django.db import IntegrityError

from core.errors import InvalidInput, UnsupportedFileType
from knowledge.models import Chunk, Document, DocumentVersion
from knowledge.services import document_delete, documents_ingest, paths_ingest
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.conftest import BIKE, PASTA, TAXES
from tests.factories import DocumentVersionFactory, SourceFactory


def test_ingesting_documents_creates_one_current_version_with_chunks_and_embeddings(tenant, source):
    report = documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE])
    assert report.counts()["created"] == 2
    version = DocumentVersion.objects.get(document__external_id="recipes/pasta")
    assert version.is_current and version.number == 1
    assert len(version.content_hash) == 64
    chunks = list(version.chunks.order_by("ordinal"))
    assert chunks and all(len(c.embedding) == 384 for c in chunks)
    assert all(version.text[c.char_start : c.char_end] == c.text for c in chunks)


def test_reingesting_unchanged_content_creates_no_version(corpus, source):
    chunk_ids = set(Chunk.objects.values_list("id", flat=True))
    report = documents_ingest(tenant=corpus, source=source, documents=[PASTA, BIKE, TAXES])
    assert report.counts() == {"created": 0, "updated": 0, "unchanged": 3, "duplicate": 0, "chunks": 0}
    assert DocumentVersion.objects.count() == 3
    assert set(Chunk.objects.values_list("id", flat=True)) == chunk_ids


def test_changed_content_creates_a_new_version_whose_chunks_replace_the_old_ones_in_search(corpus, source):
    changed = replace(PASTA, text=PASTA.text + "\n\nFresh pasta needs only three minutes of cooking.")
    report = documents_ingest(tenant=corpus, source=source, documents=[changed])
    assert report.counts()["updated"] == 1
    versions = DocumentVersion.objects.filter(document__external_id="recipes/pasta").order_by("number")
    assert [(v.number, v.is_current) for v in versions] == [(1, False), (2, True)]
    assert versions[0].chunks.exists() and not versions[0].chunks.filter(is_current=True).exists()
    assert versions[1].chunks.exists() and not versions[1].chunks.filter(is_current=False).exists()
    top = chunk_search(AnswerRequest(question="fresh pasta three minutes", k=1), tenant=corpus).results[0]
    assert top.chunk.version.number == 2


def test_an_exact_duplicate_is_recorded_and_not_embedded_again(corpus, source):
    copy = replace(BIKE, external_id="copies/bike-tyre", title="Copy of the tyre guide")
    report = documents_ingest(tenant=corpus, source=source, documents=[copy])
    assert report.counts()["duplicate"] == 1
    version = DocumentVersion.objects.get(document__external_id="copies/bike-tyre")
    original = DocumentVersion.objects.get(document__external_id="howto/bike-tyre")
    assert version.duplicate_of == original
    assert not version.chunks.exists()


def test_duplicates_within_one_batch_are_embedded_once(tenant, source):
    twin = replace(PASTA, external_id="recipes/pasta-copy")
    report = documents_ingest(tenant=tenant, source=source, documents=[PASTA, twin])
    assert sorted(o.status for o in report.outcomes) == ["created", "duplicate"]
    assert Chunk.objects.filter(version__document__external_id="recipes/pasta-copy").count() == 0


def test_deleting_the_original_indexes_its_duplicate_on_its_own(corpus, source):
    documents_ingest(tenant=corpus, source=source, documents=[replace(BIKE, external_id="copies/bike")])
    original = Document.objects.get(external_id="howto/bike-tyre")
    document_delete(tenant=corpus, document_id=original.pk)
    copy = DocumentVersion.objects.get(document__external_id="copies/bike")
    assert copy.duplicate_of is None
    assert copy.chunks.exists()
    top = chunk_search(AnswerRequest(question="patch the inner tube", k=1), tenant=corpus).results[0]
    assert top.chunk.version.document.external_id == "copies/bike"


def test_the_same_content_in_another_tenant_is_not_a_duplicate(corpus, other_tenant_corpus):
    source = SourceFactory(tenant=other_tenant_corpus)
    report = documents_ingest(tenant=other_tenant_corpus, source=source, documents=[PASTA])
    assert report.counts()["created"] == 1


def test_the_database_allows_only_one_current_version_per_document(corpus):
    version = DocumentVersion.objects.filter(is_current=True).first()
    with pytest.raises(IntegrityError):
        DocumentVersionFactory(document=version.document, is_current=True)


def test_ingesting_a_folder_reads_every_supported_file(tenant, source, tmp_path):
    (tmp_path / "guide.md").write_text("# Guide\n\nStep one is to read the manual carefully.")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "page.html").write_text(
        "<html><head><title>Page</title><script>x()</script></head><body><p>Hello from HTML.</p></body></html>"
    )
    (tmp_path / "notes.txt").write_text("Plain notes about the quarterly planning meeting.")
    report = paths_ingest(tenant=tenant, source=source, paths=[tmp_path])
    assert sorted(o.external_id for o in report.outcomes) == ["guide", "notes", "sub/page"]
    page = DocumentVersion.objects.get(document__external_id="sub/page")
    assert "x()" not in page.text and "Hello from HTML." in page.text


@pytest.mark.parametrize(
    ("name", "content", "error"),
    [
        ("empty.md", b"   \n", InvalidInput),
        ("binary.txt", b"\x00\x01\x02binary", InvalidInput),
        ("program.exe", b"MZ....", UnsupportedFileType),
        ("broken.jsonl", b'{"id": "a", "text": "fine"}\n{"id": "b", "text": \n', InvalidInput),
    ],
)
def test_a_bad_file_rejects_the_whole_ingestion_and_stores_nothing(tenant, source, tmp_path, name, content, error):
    (tmp_path / "good.md").write_text("# Good\n\nThis document is perfectly fine on its own.")
    (tmp_path / name).write_bytes(content)
    with pytest.raises(error):
        paths_ingest(tenant=tenant, source=source, paths=[tmp_path / "good.md", tmp_path / name])
    assert not Document.objects.for_tenant(tenant).exists()


def test_passages_are_embedded_with_their_heading_and_sentences_without():
    from knowledge.ingestion.splitters import Span
    from knowledge.services import embedding_input

    passage = Span("word " * 60, 0, 300, 60, "Guide › Setup")
    assert embedding_input(passage).startswith("Guide › Setup\n")
    sentence = Span("Install the package first.", 0, 26, 5, "Guide › Setup")
    assert embedding_input(sentence) == "Install the package first."
    titled = Span("Guide › Setup. " + "word " * 60, 0, 320, 64, "Guide › Setup")
    assert embedding_input(titled) == titled.text


def test_a_document_the_database_refuses_stores_none_of_its_batch_and_is_named(tenant, source):
    refused = replace(TAXES, title="T" * 600)  # longer than a title may be: the database refuses it
    with pytest.raises(InvalidInput) as error:
        documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE, refused])
    assert error.value.message.startswith("finance/expenses: the document could not be stored")
    assert "varying" not in error.value.message  # the database's own message is not shown
    assert not Document.objects.for_tenant(tenant).exists()
    assert not Chunk.objects.for_tenant(tenant).exists()


def test_a_duplicate_stays_searchable_when_its_original_gets_a_new_version(corpus, source):
    documents_ingest(
        tenant=corpus, source=source, documents=[replace(BIKE, external_id="copies/bike", title="Tyre guide copy")]
    )
    old_chunks = Chunk.objects.filter(version__document__external_id="howto/bike-tyre").count()
    tubeless = replace(BIKE, text="Fixing a flat bicycle tyre\n\nTubeless tyres seal small holes with latex sealant.")
    documents_ingest(tenant=corpus, source=source, documents=[tubeless])
    copy = DocumentVersion.objects.get(document__external_id="copies/bike", is_current=True)
    assert copy.duplicate_of is None
    assert copy.chunks.count() == old_chunks
    assert all(c.heading.startswith("Tyre guide copy") for c in copy.chunks.all())
    top = chunk_search(AnswerRequest(question="patch the inner tube puncture", k=1), tenant=corpus).results[0]
    assert top.chunk.version.document.external_id == "copies/bike"
    top = chunk_search(AnswerRequest(question="tubeless latex sealant", k=1), tenant=corpus).results[0]
    assert top.chunk.version.document.external_id == "howto/bike-tyre"


def test_the_other_duplicates_point_at_the_one_that_inherits_the_chunks(corpus, source):
    copies = [replace(BIKE, external_id=f"copies/bike-{n}") for n in (1, 2)]
    documents_ingest(tenant=corpus, source=source, documents=copies)
    documents_ingest(tenant=corpus, source=source, documents=[replace(BIKE, text=BIKE.text + " Check the rim tape.")])
    first = DocumentVersion.objects.get(document__external_id="copies/bike-1", is_current=True)
    second = DocumentVersion.objects.get(document__external_id="copies/bike-2", is_current=True)
    assert first.chunks.exists() and first.duplicate_of is None
    assert second.duplicate_of == first and not second.chunks.exists()


def test_a_copy_of_the_old_text_ingested_with_the_new_version_stays_searchable(corpus, source):
    changed = replace(BIKE, text=BIKE.text + " Check the rim tape too.")
    copy = replace(BIKE, external_id="archive/bike-tyre")
    documents_ingest(tenant=corpus, source=source, documents=[changed, copy])
    archived = DocumentVersion.objects.get(document__external_id="archive/bike-tyre", is_current=True)
    assert archived.duplicate_of is None and archived.chunks.exists()
    assert not Chunk.objects.filter(version__is_current=False, is_current=True).exists()
