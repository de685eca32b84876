"""The caps on what a PDF or an office file may unpack to (``KB_PARSE_*``), each with a companion
that lifts the cap and shows the same file then gets through, and the XML the libraries parse
without resolving entities."""

import io
import re
import zipfile

import pytest

from core.errors import InvalidInput
from knowledge.ingestion import office, sandbox
from knowledge.ingestion.readers import read_bytes, read_check
from tests.knowledge.test_office_readers import make_docx, make_xlsx
from tests.security.attack_files import MiB, pdf, pdf_of_texts

LIFTED = 10**9


@pytest.fixture
def travel_docx(tmp_path) -> bytes:
    return make_docx(tmp_path / "travel.docx").read_bytes()


def with_member(docx: bytes, name: str, data: bytes) -> bytes:
    """``docx`` with one more (deflated) member."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            target.writestr(member, source.read(member))
        target.writestr(name, data)
    return out.getvalue()


def refused(data: bytes, name: str) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        read_bytes(data, name=name)
    return caught.value


# --- zip files: the declared sizes --------------------------------------------------------------


def test_a_docx_that_unpacks_past_the_cap_is_refused_as_an_archive_bomb_at_once(travel_docx, settings):
    settings.KB_PARSE_MAX_UNPACKED_MB = 1
    settings.KB_PARSE_MAX_RATIO = LIFTED
    data = with_member(travel_docx, "word/media/padding.bin", b"\0" * (2 * MiB))
    with pytest.raises(InvalidInput) as caught:
        read_check(data, name="travel.docx")
    assert caught.value.code == "archive_bomb"
    assert re.match(r"travel\.docx: the file unpacks to 2\.\d MB, more than the limit of 1 MB;", caught.value.message)
    assert refused(data, "travel.docx").code == "archive_bomb"  # and again where the job reads it


def test_with_the_unpacked_cap_lifted_the_same_docx_is_read(travel_docx, settings):
    settings.KB_PARSE_MAX_UNPACKED_MB = LIFTED
    settings.KB_PARSE_MAX_RATIO = LIFTED
    data = with_member(travel_docx, "word/media/padding.bin", b"\0" * (2 * MiB))
    read_check(data, name="travel.docx")
    assert read_bytes(data, name="travel.docx")[0].title == "Travel policy"


def test_a_part_over_1_mib_compressed_past_the_ratio_is_an_archive_bomb(travel_docx, settings):
    data = with_member(travel_docx, "word/media/padding.bin", b"\0" * (2 * MiB))
    with pytest.raises(InvalidInput, match=r"its part 'word/media/padding\.bin' unpacks to [\d,]+ times") as caught:
        read_check(data, name="travel.docx")
    assert caught.value.code == "archive_bomb"
    assert "the limit is 100 times" in caught.value.message

    settings.KB_PARSE_MAX_RATIO = LIFTED  # the companion: lifted, it passes
    read_check(data, name="travel.docx")


def test_a_small_part_compressed_far_past_the_ratio_passes_as_real_files_have_them(travel_docx):
    data = with_member(travel_docx, "word/media/blank.bin", b"\0" * (512 * 2**10))  # 512 KiB, ratio ~ 500
    read_check(data, name="travel.docx")
    assert read_bytes(data, name="travel.docx")[0].title == "Travel policy"


def test_many_small_parts_that_unpack_past_the_ratio_together_are_an_archive_bomb(travel_docx, settings):
    data = travel_docx
    for n in range(4):
        data = with_member(data, f"word/media/blank{n}.bin", b"\0" * (900 * 2**10))
    with pytest.raises(InvalidInput, match=r"^travel\.docx: the file unpacks to [\d,]+ times") as caught:
        read_check(data, name="travel.docx")
    assert caught.value.code == "archive_bomb"
    settings.KB_PARSE_MAX_RATIO = LIFTED
    read_check(data, name="travel.docx")


def test_a_zip_of_more_parts_than_a_document_has_is_refused_before_it_is_listed(travel_docx, monkeypatch):
    data = travel_docx
    for n in range(5):
        data = with_member(data, f"word/media/{n}.txt", b"x")
    monkeypatch.setattr(office, "MAX_ZIP_MEMBERS", 10)
    with pytest.raises(InvalidInput, match=r"holds more than 10 parts") as caught:
        read_check(data, name="travel.docx")
    assert caught.value.code == "archive_bomb"


def test_a_docx_past_the_character_cap_is_document_too_large(tmp_path, settings):
    import docx

    document = docx.Document()
    for _ in range(30):
        document.add_paragraph("A paragraph of about one hundred characters, repeated to pass the character cap here.")
    document.save(tmp_path / "long.docx")
    data = (tmp_path / "long.docx").read_bytes()
    settings.KB_PARSE_MAX_CHARS = 1000
    error = refused(data, "long.docx")
    assert error.code == "document_too_large"
    assert error.message.startswith("long.docx: the file holds more than 1,000 characters of text, the limit")

    settings.KB_PARSE_MAX_CHARS = LIFTED
    assert len(read_bytes(data, name="long.docx")[0].text) > 2000


def test_an_xlsx_past_the_character_cap_stops_at_the_row_that_passes_it(tmp_path, settings):
    import openpyxl

    workbook = openpyxl.Workbook()
    for row in range(200):
        workbook.active.append([f"Row {row} of a sheet long enough to pass the cap"])
    workbook.save(tmp_path / "rows.xlsx")
    settings.KB_PARSE_MAX_CHARS = 1000
    assert refused((tmp_path / "rows.xlsx").read_bytes(), "rows.xlsx").code == "document_too_large"
    settings.KB_PARSE_MAX_CHARS = LIFTED
    assert "Row 199" in read_bytes((tmp_path / "rows.xlsx").read_bytes(), name="rows.xlsx")[0].text


# --- PDF: pages, characters, content streams ------------------------------------------------------


def test_a_pdf_of_more_pages_than_the_cap_is_document_too_large(settings):
    data = pdf_of_texts([f"Page {n}" for n in range(6)])
    settings.KB_PARSE_MAX_PDF_PAGES = 5
    error = refused(data, "pages.pdf")
    assert error.code == "document_too_large"
    assert error.message.startswith("pages.pdf: the PDF has 6 pages; the limit is 5.")
    settings.KB_PARSE_MAX_PDF_PAGES = LIFTED
    assert read_bytes(data, name="pages.pdf")[0].metadata["pages"] == 6


def test_a_pdf_past_the_character_cap_stops_at_the_page_that_passes_it(settings, monkeypatch):
    from knowledge.ingestion import pdf as pdf_reader

    extracted = []
    real_read = pdf_reader.read_page
    monkeypatch.setattr(pdf_reader, "read_page", lambda *a, **k: extracted.append(1) or real_read(*a, **k))
    monkeypatch.setattr(sandbox, "parse_isolated", lambda parse, **kw: parse())  # to count in this process
    data = pdf_of_texts(["x" * 99] * 20)  # 99 characters a page
    settings.KB_PARSE_MAX_CHARS = 1000
    error = refused(data, "long.pdf")
    assert error.code == "document_too_large"
    assert error.message.startswith("long.pdf: the PDF holds more than 1,000 characters of text, the limit")
    assert len(extracted) == 11  # the eleventh page passed the cap: the other nine were never read

    extracted.clear()
    settings.KB_PARSE_MAX_CHARS = LIFTED
    assert len(read_bytes(data, name="long.pdf")[0].text) > 1900
    assert len(extracted) == 20


def test_a_content_stream_over_1_mib_compressed_past_the_ratio_is_an_archive_bomb(settings):
    data = pdf([0], {0: b"BT /F1 12 Tf 72 720 Td (Zeros follow) Tj ET\n" + b" " * (3 * MiB)})
    error = refused(data, "zeros.pdf")
    assert error.code == "archive_bomb"
    assert "a content stream of the PDF unpacks to" in error.message and "the limit is 100 times" in error.message
    settings.KB_PARSE_MAX_RATIO = LIFTED
    assert read_bytes(data, name="zeros.pdf")[0].text == "Zeros follow"


def test_a_small_highly_compressible_content_stream_passes():
    data = pdf([0], {0: b"BT /F1 12 Tf 72 720 Td (Small) Tj ET\n" + b" " * (512 * 2**10)})
    assert read_bytes(data, name="small.pdf")[0].text == "Small"


def test_pages_sharing_a_stream_count_it_once_each_against_the_unpacked_cap(settings):
    stream = b"BT /F1 12 Tf 72 720 Td (Shared) Tj ET\n" + b"% not compressed\n" * 100_000  # 1.7 MB
    data = pdf([0, 0, 0], {0: stream}, compress=False)
    settings.KB_PARSE_MAX_UNPACKED_MB = 4
    error = refused(data, "shared.pdf")
    assert error.code == "archive_bomb"
    assert error.message.startswith("shared.pdf: the PDF's pages unpack to more than 4 MB of content, the limit")
    settings.KB_PARSE_MAX_UNPACKED_MB = LIFTED
    assert read_bytes(data, name="shared.pdf")[0].metadata["pages"] == 3


def test_pypdfs_own_decompression_limit_is_an_archive_bomb_not_a_library_error(settings):
    settings.KB_PARSE_MAX_RATIO = LIFTED
    settings.KB_PARSE_MAX_UNPACKED_MB = LIFTED
    data = pdf([0], {0: b" " * (80 * 10**6)})  # past pypdf's 75 MB for one stream
    error = refused(data, "deep.pdf")
    assert error.code == "archive_bomb"
    assert error.message.startswith("deep.pdf: the PDF passes a limit of its reader (")


def test_a_password_protected_pdf_says_so(tmp_path):
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(pdf_of_texts(["Secret"]))))
    writer.encrypt("open-sesame", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    error = refused(out.getvalue(), "locked.pdf")
    assert error.code == "encrypted_file"


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 9 0 R >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n",
        b"%PDF-1.7\n\x00\xff",
    ],
)
def test_a_damaged_pdf_is_an_invalid_pdf_never_a_library_error(data):
    assert refused(data, "damaged.pdf").code == "invalid_pdf"


def test_the_request_checks_a_pdf_by_its_signature_only():
    read_check(b"%PDF-1.4 and then anything", name="later.pdf")  # the job reads it
    with pytest.raises(InvalidInput, match=r"^fake\.pdf: not a PDF") as caught:
        read_check(b"<html>not a pdf</html>", name="fake.pdf")
    assert caught.value.code == "invalid_pdf"


# --- XML: entities are never resolved ------------------------------------------------------------

EXTERNAL = '<!DOCTYPE w:document [<!ENTITY secret SYSTEM "file://{path}">]>'
LAUGHS = (
    '<!DOCTYPE w:document [<!ENTITY a "ha"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">'
    '<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;"><!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">]>'
)


def docx_with_doctype(travel_docx: bytes, doctype: str, entity: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(travel_docx)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            data = source.read(member)
            if member.filename == "word/document.xml":
                head, body = data.split(b"?>", 1)
                body = body.replace(b"Staff may book", f"&{entity}; Staff may book".encode(), 1)
                data = head + b"?>" + doctype.encode() + body
            target.writestr(member, data)
    return out.getvalue()


@pytest.mark.parametrize(("doctype", "entity"), [(EXTERNAL, "secret"), (LAUGHS, "f")], ids=["external", "laughs"])
def test_a_docx_entity_is_never_resolved(travel_docx, tmp_path, doctype, entity):
    (tmp_path / "secret.txt").write_text("TOP-SECRET-MARKER")
    data = docx_with_doctype(travel_docx, doctype.format(path=tmp_path / "secret.txt"), entity)
    try:
        [document] = read_bytes(data, name="travel.docx")
    except InvalidInput:
        return  # refused is fine too
    assert "TOP-SECRET-MARKER" not in document.text and "hahaha" not in document.text


def test_an_xlsx_with_a_document_type_definition_is_refused_by_defusedxml(tmp_path):
    out = io.BytesIO()
    with zipfile.ZipFile(make_xlsx(tmp_path / "budget.xlsx")) as source, zipfile.ZipFile(out, "w") as target:
        for member in source.infolist():
            data = source.read(member)
            if member.filename == "xl/worksheets/sheet1.xml":
                data = LAUGHS.replace("w:document", "worksheet").encode() + data
            target.writestr(member, data)
    assert refused(out.getvalue(), "budget.xlsx").code == "invalid_document"


def test_an_odt_manifest_with_entities_is_refused_not_expanded(tmp_path):
    from tests.knowledge.test_office_readers import make_odt

    out = io.BytesIO()
    with zipfile.ZipFile(make_odt(tmp_path / "notes.odt")) as source, zipfile.ZipFile(out, "w") as target:
        for member in source.infolist():
            data = source.read(member)
            if member.filename == "META-INF/manifest.xml":
                head, body = data.split(b"?>", 1)
                data = head + b"?>" + LAUGHS.replace("w:document", "manifest:manifest").encode() + body
            target.writestr(member, data)
    with pytest.raises(InvalidInput) as caught:
        read_check(out.getvalue(), name="notes.odt")
    assert caught.value.code == "invalid_document"


def test_the_xml_parsers_of_the_libraries_resolve_no_entities():
    import openpyxl.xml
    from docx.oxml.parser import oxml_parser
    from pptx.oxml import oxml_parser as pptx_parser

    assert openpyxl.xml.DEFUSEDXML  # a direct requirement: openpyxl parses sheets with defusedxml
    for parser in (oxml_parser, pptx_parser):
        from lxml import etree

        root = etree.fromstring(b'<!DOCTYPE r [<!ENTITY e "EXPANDED">]><r>&e;</r>', parser=parser)
        assert "EXPANDED" not in etree.tostring(root).decode()
