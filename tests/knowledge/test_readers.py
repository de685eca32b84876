import json

import pytest

from core.errors import InvalidInput, UnsupportedFileType
from knowledge.ingestion.readers import read_bytes
from knowledge.ingestion.restructured import rst_plain
from knowledge.ingestion.splitters import MaxTokenSplitter, SentenceSplitter, SingleChunkSplitter


def test_rst_markup_is_reduced_to_readable_text_with_sections():
    source = (
        "=================\nCustom model fields\n=================\n\n"
        ".. _howto-custom:\n\nUse :class:`~django.db.models.Field` and ``max_length``.\n\n"
        "Writing a subclass\n------------------\n\n.. versionadded:: 5.0\n\nSee :doc:`the docs </ref/models>`.\n\n"
        "Read `PostgreSQL custom types`_ and Bridge_. Then::\n\n    def __init__(self):\n        pass\n"
    )
    document = read_bytes(source.encode(), name="fields.txt", fmt="rst")[0]
    assert document.title == "Custom model fields"
    assert "Use Field and max_length." in document.text
    assert "See the docs." in document.text
    assert "Read PostgreSQL custom types and Bridge. Then:" in document.text
    assert "    def __init__(self):" in document.text
    assert "New in version 5.0" in document.text
    assert [s.heading for s in document.sections] == ["Custom model fields", "Writing a subclass"]


RST_WITH_SPHINX_NAMES = (
    "Title\n=====\n\nSee :foo:`the bar <bar>` and :py:meth:`a.b`.\n\n"
    ".. mydirective:: An argument\n\n   Its content names :baz:`qux`.\n\n"
    ".. role:: custom\n\nThen :custom:`text`.\n"
)


def test_roles_and_directives_a_document_names_are_shown_without_registering_them_in_docutils():
    from docutils.parsers.rst import directives, roles

    text, headings = rst_plain(RST_WITH_SPHINX_NAMES)

    assert text == "Title\n\nSee the bar and a.b().\n\nAn argument\n\nIts content names qux.\n\nThen text."
    assert headings == ["Title"]
    assert not {"foo", "py:meth", "baz", "custom"} & set(roles._roles)
    assert not {"mydirective", "role"} & set(directives._directives)


def test_docutils_itself_still_finds_a_role_unknown_after_a_document_named_it():
    from docutils.core import publish_doctree
    from docutils.nodes import problematic

    rst_plain(RST_WITH_SPHINX_NAMES)

    tree = publish_doctree("See :foo:`bar`.", settings_overrides={"report_level": 5, "halt_level": 5})
    assert list(tree.findall(problematic))  # "Unknown interpreted text role"


def test_a_release_note_date_under_the_title_becomes_published_at():
    source = "=====\nDjango 5.2 release notes\n=====\n\n*April 2, 2025*\n\nWelcome to Django 5.2!\n"
    document = read_bytes(source.encode(), name="5.2.txt", fmt="rst")[0]
    assert document.published_at is not None
    assert document.published_at.date().isoformat() == "2025-04-02"


def test_jsonl_gives_one_document_per_line_with_metadata():
    data = b'{"id": "a", "title": "A", "text": "Alpha text.", "team": "x"}\n{"id": "b", "body": "Beta text.", "date": "2024-05-01"}\n'
    documents = read_bytes(data, name="docs.jsonl")
    assert [d.external_id for d in documents] == ["a", "b"]
    assert documents[0].metadata == {"team": "x"}
    assert documents[1].published_at.year == 2024


def test_malformed_jsonl_names_the_line():
    with pytest.raises(InvalidInput, match="line 2"):
        read_bytes(b'{"id": "a", "text": "ok"}\nnot json\n', name="docs.jsonl")


def test_unknown_types_and_binary_files_are_refused():
    with pytest.raises(UnsupportedFileType):
        read_bytes(b"data", name="archive.zip")
    with pytest.raises(InvalidInput, match="binary"):
        read_bytes(b"\xff\xfe\x00\x00garbage", name="notes.txt")


def test_a_corrupt_pdf_is_refused_with_a_clear_message():
    with pytest.raises(InvalidInput, match="PDF"):
        read_bytes(b"%PDF-1.4 this is not really a pdf", name="report.pdf")


LONG = "# Title\n\n" + " ".join(f"Sentence number {i} talks about topic {i % 7}." for i in range(200))


def test_the_max_token_splitter_respects_the_budget_and_overlaps_whole_sentences():
    document = read_bytes(LONG.encode(), name="long.md")[0]
    spans = MaxTokenSplitter(max_tokens=64, overlap_tokens=16).split(document)
    assert len(spans) > 5
    assert all(s.token_count <= 66 for s in spans)
    assert all(document.text[s.start : s.end] == s.text for s in spans)
    assert spans[1].start < spans[0].end  # overlap
    assert spans[1].text.startswith("Sentence number")


def test_the_sentence_and_single_chunk_splitters():
    document = read_bytes(b"One sentence here. Another one there.\n\nA third paragraph.", name="a.txt")[0]
    assert [s.text for s in SentenceSplitter().split(document)] == [
        "One sentence here.",
        "Another one there.",
        "A third paragraph.",
    ]
    assert len(SingleChunkSplitter().split(document)) == 1


def _minimal_pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` in Helvetica, with a correct cross-reference table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_a_pdf_is_read_into_text():
    document = read_bytes(_minimal_pdf("Quarterly travel policy"), name="policy.pdf")[0]
    assert "Quarterly travel policy" in document.text
    assert document.metadata["pages"] == 1 and document.metadata["page_starts"] == [0]


@pytest.mark.parametrize("value", ["2024-02-30", "2024-13-01T25:61:00"])
def test_an_impossible_jsonl_date_names_the_line_and_the_value(value):
    data = b'{"id": "a", "text": "ok"}\n' + json.dumps({"id": "b", "text": "ok", "published_at": value}).encode()
    with pytest.raises(InvalidInput, match=rf"docs.jsonl, line 2: invalid date '{value}'"):
        read_bytes(data, name="docs.jsonl")


BAD_JSONL_ROWS = [
    ({"id": "a", "title": "Ti\x00tle", "text": "ok"}, "field 'title' contains a NUL character"),
    ({"id": "a", "text": "ok", "team": {"name": "x\x00"}}, "field 'team'\\['name'\\] contains a NUL character"),
    ({"id": "a", "text": "o\x00k"}, "field 'text' contains a NUL character"),
    ({"id": "a", "text": "ok", "bad\x00key": 1}, "a field name contains a NUL character"),
    ({"id": "a", "text": "o\ud800k"}, "field 'text' contains an unpaired surrogate"),
    ({"id": "i" * 1001, "text": "ok"}, "the id is 1001 characters long; the limit is 1000"),
    ({"id": "a", "uri": "https://x/" + "u" * 1991, "text": "ok"}, "the uri is 2001 characters long; the limit is 2000"),
    ({"id": "a", "text": "ok", "score": float("nan")}, "malformed JSON \\(NaN is not valid JSON\\)"),
]


@pytest.mark.parametrize(("row", "message"), BAD_JSONL_ROWS)
def test_jsonl_values_the_database_cannot_store_are_refused_naming_the_line(row, message):
    data = b'{"id": "first", "text": "ok"}\n' + json.dumps(row).encode()
    with pytest.raises(InvalidInput, match=f"docs.jsonl, line 2: {message}"):
        read_bytes(data, name="docs.jsonl")


def test_jsonl_at_the_model_field_limits_is_accepted():
    row = {"id": "i" * 1000, "uri": "u" * 2000, "title": "t" * 600, "text": "ok"}
    [document] = read_bytes(json.dumps(row).encode(), name="docs.jsonl")
    assert (len(document.external_id), len(document.uri), len(document.title)) == (1000, 2000, 500)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-8-sig"])
def test_text_with_a_byte_order_mark_is_decoded(encoding):
    text = "# Café\n\nÜber die Straße: 東京.\n"
    data = text.encode(encoding)
    if encoding in ("utf-16-le", "utf-16-be"):
        data = ("\ufeff" + text).encode(encoding)
    [document] = read_bytes(data, name="notes.md")
    assert (document.title, document.text) == ("Café", "# Café\n\nÜber die Straße: 東京.")


def test_utf16_jsonl_is_decoded():
    data = '{"id": "a", "title": "Größe", "text": "ok"}\n'.encode("utf-16")
    assert read_bytes(data, name="docs.jsonl")[0].title == "Größe"


def test_undecodable_text_names_the_encoding_problem():
    with pytest.raises(InvalidInput, match="not valid UTF-8 text \\(invalid continuation byte at byte 3\\)"):
        read_bytes(b"caf\xe9 au lait", name="notes.txt")
    with pytest.raises(InvalidInput, match="not valid UTF-16-LE text \\(truncated data"):
        read_bytes(b"\xff\xfeH\x00i\x00!", name="notes.txt")


@pytest.mark.parametrize("value", ["2024-02-30", "2024-13-01T25:61:00"])
def test_manage_py_ingest_reports_an_impossible_date_as_a_command_error(tenant, source, tmp_path, value):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from knowledge.models import Document

    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "a", "text": "ok", "published_at": value}) + "\n")
    with pytest.raises(CommandError, match=f"docs.jsonl, line 1: invalid date '{value}'"):
        call_command("ingest", str(tmp_path), tenant=tenant.slug, source=source.name, json=True)
    assert not Document.objects.for_tenant(tenant).exists()


DJANGO_LIKE_RST = """\
=====================
QuerySet API reference
=====================

.. currentmodule:: django.db.models.query

Methods that return new QuerySets
=================================

``bulk_update()``
-----------------

.. method:: bulk_update(objs, fields, batch_size=None)

Note that there are a number of :meth:`caveats to this method
<django.db.models.query.QuerySet.bulk_update>`, so read them. It uses
:meth:`.QuerySet.update` and the :setting:`DATABASES` setting.

.. versionchanged:: 4.0

    The return value is the number of objects updated.

.. code-block:: python
    :caption: example.py

    Entry.objects.bulk_update(objs, ["headline"])

.. seealso::

    The :doc:`database optimization guide </topics/db/optimization>`.

.. toctree::
   :maxdepth: 1

   hidden/page
"""


def test_rst_is_parsed_by_docutils_with_sphinx_roles_even_across_line_breaks(capsys):
    document = read_bytes(DJANGO_LIKE_RST.encode(), name="querysets.txt", fmt="rst")[0]
    assert "Note that there are a number of caveats to this method, so read them." in document.text
    assert "It uses QuerySet.update() and the DATABASES setting." in document.text
    assert ":meth:" not in document.text and "<django" not in document.text and "``" not in document.text
    assert capsys.readouterr().err == ""  # unknown roles and directives print no warnings


def test_rst_directives_become_text_and_sections_keep_their_titles():
    document = read_bytes(DJANGO_LIKE_RST.encode(), name="querysets.txt", fmt="rst")[0]
    assert document.title == "QuerySet API reference"
    assert [s.heading for s in document.sections] == [
        "QuerySet API reference",
        "Methods that return new QuerySets",
        "bulk_update()",
    ]
    assert "Changed in version 4.0.\n\nThe return value is the number of objects updated." in document.text
    assert '    Entry.objects.bulk_update(objs, ["headline"])' in document.text
    assert "bulk_update(objs, fields, batch_size=None)" in document.text
    assert "The database optimization guide." in document.text
    assert (
        "hidden/page" not in document.text and "currentmodule" not in document.text and ":caption:" not in document.text
    )
    for section in document.sections:
        assert document.text[section.start :].startswith(section.heading)


def test_a_sentence_of_an_rst_section_is_headed_by_its_title_and_section():
    document = read_bytes(DJANGO_LIKE_RST.encode(), name="querysets.txt", fmt="rst")[0]
    caveats = next(span for span in SentenceSplitter().split(document) if "caveats to this method" in span.text)
    assert caveats.heading == "QuerySet API reference › bulk_update()"
