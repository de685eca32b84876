"""The PDF reader keeps documents as people made them: pages located in the text, columns in order,
running headers and footers gone, hyphenated words joined, tables as Markdown tables (one across
a page break too), figures with their captions, and scanned pages read by OCR within a budget.

The PDFs are made by ``tests/knowledge/pdf_samples.py``. OCR runs the real engine on pages
rendered at 100 dpi, enough for the samples' large print and four times cheaper than 200.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_right

import pytest
from django.test import override_settings

from core.errors import InvalidInput
from knowledge.ingestion import pdf as pdf_reader
from knowledge.ingestion.documents import ReadDocument, normalize_text
from knowledge.ingestion.pdf.document import document_text
from knowledge.ingestion.pdf.layout import Item, reading_order
from knowledge.ingestion.pdf.page import Block
from knowledge.ingestion.readers import read_bytes
from knowledge.models import Chunk, Document
from knowledge.services import documents_ingest
from tests.knowledge import pdf_samples
from tests.security.attack_files import pdf_of_texts

OCR_DPI = 100


@pytest.fixture(scope="module")
def handbook() -> ReadDocument:
    with override_settings(KB_OCR_DPI=OCR_DPI, KB_OCR_ENGINE="rapidocr"):
        return read_bytes(pdf_samples.handbook_pdf(), name="handbook.pdf")[0]


def page_of(document: ReadDocument, offset: int) -> int:
    return bisect_right(document.metadata["page_starts"], offset)


def lines_of(document: ReadDocument) -> list[str]:
    return document.text.split("\n")


# --- pages ------------------------------------------------------------------------------------


def test_each_chunk_locates_its_markers_on_the_pages_they_were_printed_on(tenant, source):
    [document] = read_bytes(pdf_samples.marked_pdf(5), name="marked.pdf")
    documents_ingest(tenant=tenant, source=source, documents=[document])
    chunks = list(Chunk.objects.filter(version__document__external_id="marked.pdf").order_by("ordinal"))
    assert len(chunks) > 5
    assert len(document.metadata["page_starts"]) == document.metadata["pages"] == 5
    seen = set()
    for chunk in chunks:
        for marker in re.finditer(r"pg(\d)", chunk.text):
            assert page_of(document, chunk.char_start + marker.start()) == int(marker.group(1)), chunk.text
            seen.add(int(marker.group(1)))
        first = re.search(r"pg(\d)", chunk.text)
        assert page_of(document, chunk.char_start) == int(first.group(1))  # a chunk starts on its first marker's page
    assert seen == {1, 2, 3, 4, 5}


def test_every_page_starts_where_its_text_does(handbook):
    starts = handbook.metadata["page_starts"]
    text = handbook.text
    assert starts[0] == 0 and starts == sorted(starts) and len(starts) == 6
    assert text[starts[1] :].startswith("Two teams share the intake")
    assert text[starts[3] :].startswith("Request volumes")
    assert text[starts[4] :].startswith("| Quillbrook gateway |")
    assert text[starts[5] :].startswith("[Figure: Figure 1")
    assert normalize_text(text) == text  # the offsets are those of the stored text


def test_each_line_has_its_box_on_its_page(handbook):
    regions = handbook.metadata["regions"]
    assert len(regions) == len([line for line in lines_of(handbook) if line and not line.startswith("| ---")])
    for page, x0, top, x1, bottom, start, end in regions:
        line = handbook.text[start:end]
        assert line and "\n" not in line and page_of(handbook, start) == page
        assert 0 <= x0 < x1 <= 612 and 0 <= top < bottom <= 792
    [heading] = [r for r in regions if handbook.text[r[5] : r[6]] == "Incident response"]
    assert heading[:2] == [1, 72.0] and 95 < heading[2] < 110  # 110 points below the top, less the ascent
    [row] = [r for r in regions if handbook.text[r[5] : r[6]].startswith("| Quillbrook gateway")]
    assert row[0] == 5 and row[1] == 72.0 and row[3] == 532.0


# --- layout -----------------------------------------------------------------------------------


def test_two_columns_are_read_one_after_the_other_below_the_heading_across_them(handbook):
    lines = lines_of(handbook)
    left = [lines.index(line) for line in pdf_samples.LEFT_COLUMN]
    right = [lines.index(line) for line in pdf_samples.RIGHT_COLUMN]
    heading = lines.index("Two teams share the intake and the review of every request")
    assert heading < left[0] and left == list(range(left[0], left[0] + 12))
    assert right == list(range(right[0], right[0] + 12)) and right[0] > left[-1]


def test_running_headers_and_footers_are_gone_from_every_page(handbook):
    assert "Northwind Operations Handbook" not in handbook.text
    assert "Internal use only" not in handbook.text
    assert not re.search(r"Page \d of 6", handbook.text)
    assert handbook.title == "Northwind Operations Handbook"  # the PDF's own title


def test_a_page_that_says_nothing_but_its_number_keeps_it():
    [document] = read_bytes(pdf_samples.marked_pdf(4, lines_per_page=0), name="numbers.pdf")
    assert [line for line in lines_of(document) if line.startswith("Page")] == [f"Page {n} of 4" for n in range(1, 5)]


def test_a_word_hyphenated_at_a_line_end_is_joined(handbook):
    assert "the written incident procedure" in handbook.text
    assert "proce-" not in handbook.text and "\ndure" not in handbook.text


def test_a_form_of_short_label_value_pairs_is_read_row_by_row_not_as_columns():
    form = []
    for row in range(8):
        form.append(Item(f"Label{row}:", 72, 100 + 20 * row, 130, 110 + 20 * row))
        form.append(Item(f"value{row}", 340, 100 + 20 * row, 400, 110 + 20 * row))
    assert [line.text for line in reading_order(form, 0, 612)][:2] == ["Label0: value0", "Label1: value1"]


def test_two_columns_of_prose_are_found_without_a_heading():
    prose = []
    for row in range(8):
        for column, x in ((0, 72), (1, 320)):
            prose += [
                Item(f"c{column}r{row}w{w}", x + 45 * w, 100 + 14 * row, x + 40 + 45 * w, 110 + 14 * row)
                for w in range(5)
            ]
    lines = [line.text for line in reading_order(prose, 0, 612)]
    assert lines[0].startswith("c0r0w0") and lines[7].startswith("c0r7w0") and lines[8].startswith("c1r0w0")


# --- tables and figures -----------------------------------------------------------------------


def test_a_table_across_two_pages_is_one_markdown_table_a_row_per_line(handbook):
    lines = lines_of(handbook)
    first = lines.index("| System | Requests | Owner |")
    table = lines[first : first + 8]
    assert table[1] == "| --- | --- | --- |"
    assert table[2:6] == [f"| {' | '.join(row)} |" for row in pdf_samples.TABLE_PAGE_4]
    assert table[6] == "| Quillbrook gateway | 7,450 | Dana Petrov |"  # continued on page 5, cells in order
    assert table[7] == "| Status page | 2,210 | Lee Okafor |"
    assert lines[first + 8] == "" and lines.count("| --- | --- | --- |") == 1
    assert lines[first - 2 : first] == ["", pdf_samples.TABLE_CAPTION]  # the caption on the line before
    assert handbook.text.count("Billing service") == 1  # the table's words are not in the running text too


def test_a_figure_is_kept_with_its_caption(handbook):
    [figure] = handbook.metadata["figures"]
    assert figure["page"] == 6 and figure["bbox"] == [72.0, 100.0, 552.0, 340.0]
    assert figure["caption"] == pdf_samples.FIGURE_CAPTION
    assert handbook.text[figure["start"] : figure["end"]] == f"[Figure: {pdf_samples.FIGURE_CAPTION}]"


# --- OCR ----------------------------------------------------------------------------------------


def test_a_scanned_page_is_read_by_ocr_on_its_page(handbook):
    assert handbook.metadata["ocr_pages"] == [3] and handbook.metadata["ocr_skipped"] == []
    starts = handbook.metadata["page_starts"]
    scanned = handbook.text[starts[2] : starts[3]]
    assert "Zephyr vault code is 4471" in scanned


def test_with_ocr_off_a_scanned_page_is_listed_as_skipped_and_the_rest_is_read(settings):
    settings.KB_OCR_ENGINE = "off"
    [document] = read_bytes(pdf_samples.handbook_pdf(), name="handbook.pdf")
    assert document.metadata["ocr_pages"] == [] and document.metadata["ocr_skipped"] == [3]
    assert "Zephyr" not in document.text and "| Quillbrook gateway | 7,450 | Dana Petrov |" in document.text
    starts = document.metadata["page_starts"]
    assert starts[2] == starts[3]  # the page without text starts where the next one does


def test_a_document_past_the_ocr_budget_is_ingested_with_the_pages_read_and_the_others_named(settings, tenant, source):
    settings.KB_OCR_MAX_PAGES = 1
    settings.KB_OCR_DPI = OCR_DPI
    [document] = read_bytes(pdf_samples.scans_pdf(3), name="archive.pdf")
    assert document.metadata["ocr_pages"] == [2] and document.metadata["ocr_skipped"] == [3, 4]
    report = documents_ingest(tenant=tenant, source=source, documents=[document])
    assert report.counts()["created"] == 1
    stored = Document.objects.get(external_id="archive.pdf")
    assert stored.metadata["ocr_skipped"] == [3, 4]
    text = stored.versions.get(is_current=True).text
    assert "Scanned page 2 of the archive" in text and "Scanned page 3" not in text
    assert "begins with this typed page" in text and "ends with this typed page" in text


def test_a_scan_waiting_for_the_ocr_queue_stops_the_read_and_is_not_taken_for_a_damaged_file():
    from knowledge.ingestion.ocr import OcrDeferred, ocr_deferred

    with ocr_deferred(), pytest.raises(OcrDeferred):
        pdf_reader.read_pdf(pdf_samples.scans_pdf(1), name="scan.pdf", external_id="scan.pdf", uri="")


def test_a_page_pdfminer_cannot_read_is_read_by_pypdf_in_its_place_without_boxes(monkeypatch):
    real_read = pdf_reader.read_page

    def failing(page, number, ocr):
        if number == 2:
            raise KeyError("a font pdfminer cannot read")
        return real_read(page, number, ocr)

    monkeypatch.setattr(pdf_reader, "read_page", failing)
    document = pdf_reader.read_pdf(pdf_samples.marked_pdf(3), name="marked.pdf", external_id="m", uri="")
    starts = document.metadata["page_starts"]
    assert "pg2 line 1 tells the reader" in document.text[starts[1] : starts[2]]
    assert "pg3 line 1 tells the reader" in document.text[starts[2] :]
    assert {region[0] for region in document.metadata["regions"]} == {1, 3}


# --- time and text ------------------------------------------------------------------------------


def test_each_page_read_adds_its_time_to_the_parse(monkeypatch):
    granted = []
    monkeypatch.setattr(pdf_reader.sandbox, "parse_time_extend", granted.append)
    pdf_reader.read_pdf(pdf_samples.marked_pdf(3), name="marked.pdf", external_id="m", uri="")
    assert granted == [pdf_reader.PAGE_TIMEOUT_S] * 3


@pytest.mark.parametrize("page_timeout_s", [0.25, 0.0])
def test_a_pdf_whose_pages_take_longer_than_the_base_parse_time_is_read_in_the_time_its_pages_add(
    settings, monkeypatch, page_timeout_s
):
    settings.KB_PARSE_TIMEOUT_S = 1  # and the sandbox's 2 s of grace
    real_read = pdf_reader.read_page

    def slow_read(*args, **kwargs):
        time.sleep(0.25)  # 14 pages: 3.5 s, past 1 + 2 s; a quarter of a second a page brings 3.5 s more
        return real_read(*args, **kwargs)

    monkeypatch.setattr(pdf_reader, "read_page", slow_read)
    monkeypatch.setattr(pdf_reader, "PAGE_TIMEOUT_S", page_timeout_s)
    data = pdf_of_texts([f"Page text {n}" for n in range(14)])
    if page_timeout_s:
        assert len(read_bytes(data, name="slow.pdf")[0].metadata["page_starts"]) == 14
    else:  # the companion: without the pages' time, the base limit stops it
        with pytest.raises(InvalidInput) as caught:
            read_bytes(data, name="slow.pdf")
        assert caught.value.code == "parse_timeout"


def test_text_is_normalized_line_by_line_so_the_offsets_need_no_second_pass_and_ligatures_are_spelled_out():
    blocks = [
        [Block("text", "Cafe\u0301  au lait ", (72, 100, 200, 110), 1), Block("text", "menu", (72, 120, 200, 130), 1)],
        [],
        [Block("text", "Crème, the \ufb01le of the of\u00adfice", (72, 100, 200, 110), 3, paragraph=True)],
    ]
    read = document_text(blocks)
    assert read.text == "Café au lait\nmenu\n\nCrème, the file of the office" and normalize_text(read.text) == read.text
    assert read.page_starts == [0, 19, 19]
    assert [read.text[r[5] : r[6]] for r in read.regions] == ["Café au lait", "menu", "Crème, the file of the office"]
