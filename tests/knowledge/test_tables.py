"""Tables in office files and HTML as Markdown tables, pictures in office files read with OCR, a
.pptx's slides as pages, and the splitter that cuts a long table between rows, repeating its
header. Files are made with the libraries that read them."""

import io
from pathlib import Path

import pytest

from knowledge.ingestion.documents import ReadDocument, normalize_text
from knowledge.ingestion.office import read_office
from knowledge.ingestion.readers import read_bytes
from knowledge.ingestion.splitters import MaxTokenSplitter, SentenceSplitter
from knowledge.ingestion.tables import find_tables, markdown_table

RATES = "| City | Nightly rate |\n| --- | --- |\n| Paris | 180 EUR |\n| Lyon | 120 EUR |"


def read(data: bytes, name: str) -> ReadDocument:
    [document] = read_bytes(data, name=name)
    assert normalize_text(document.text) == document.text  # offsets stay true: never normalized again
    return document


def saved(document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def picture(text: str = "", *, size: tuple[int, int] = (900, 140)) -> bytes:
    """A PNG showing ``text`` in black on white, as a screenshot would."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    ImageDraw.Draw(image).text((20, 40), text, fill="black", font=ImageFont.load_default(size=40))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def rates_docx(*, caption_after: bool = False):
    import docx

    document = docx.Document()
    document.add_paragraph("Hotels are booked through the travel desk.")
    if not caption_after:
        document.add_paragraph("Table 1: Nightly rates", style="Caption")
    table = document.add_table(rows=3, cols=2)
    for row, values in zip(
        table.rows, [("City", "Nightly rate"), ("Paris", "180 EUR"), ("Lyon", "120 EUR")], strict=True
    ):
        row.cells[0].text, row.cells[1].text = values
    if caption_after:
        document.add_paragraph("Table 1: Nightly rates", style="Caption")
    document.add_paragraph("Meals are paid up to 40 EUR a day.")
    return document


# Office tables ---------------------------------------------------------------------------------


@pytest.mark.parametrize("caption_after", [False, True])
def test_a_docx_table_is_a_markdown_table_under_its_caption(caption_after):
    document = read(saved(rates_docx(caption_after=caption_after)), "travel.docx")
    assert document.text == (
        "Hotels are booked through the travel desk.\n\n"
        f"Table 1: Nightly rates\n{RATES}\n\n"
        "Meals are paid up to 40 EUR a day."
    )


def test_a_docx_cell_merged_down_is_repeated_in_each_row_and_one_merged_across_is_left_empty():
    import docx

    document = docx.Document()
    table = document.add_table(rows=4, cols=3)
    for row, values in zip(
        table.rows, [("Region", "City", "Rate"), ("North", "Lille", "90"), ("", "Calais", "80")], strict=False
    ):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    table.cell(1, 0).merge(table.cell(2, 0))  # "North" spans two rows
    table.cell(3, 0).merge(table.cell(3, 1)).text = "Total"
    table.cell(3, 2).text = "170"
    text = read(saved(document), "regions.docx").text
    assert text == (
        "| Region | City | Rate |\n| --- | --- | --- |\n| North | Lille | 90 |\n| North | Calais | 80 |\n| Total | | 170 |"
    )


def test_a_table_nested_in_a_docx_cell_is_flattened_into_that_cell():
    import docx

    document = docx.Document()
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Plan", "Limits"
    table.cell(1, 0).text = "Team"
    inner = table.cell(1, 1).add_table(rows=1, cols=2)
    inner.cell(0, 0).text, inner.cell(0, 1).text = "10 users", "5 GB"
    text = read(saved(document), "plans.docx").text
    assert text == "| Plan | Limits |\n| --- | --- |\n| Team | 10 users 5 GB |"


def test_a_cell_with_a_pipe_or_a_line_break_stays_in_its_column():
    assert markdown_table([["Op", "Meaning"], ["a | b", "either\nor"]]) == (
        "| Op | Meaning |\n| --- | --- |\n| a \\| b | either or |"
    )


def test_a_one_column_table_is_read_as_lines_of_text():
    assert markdown_table([["Note"], ["Keep receipts for seven years."]]) == "Note\nKeep receipts for seven years."


def test_an_xlsx_sheet_is_a_markdown_table_headed_by_its_first_row_without_empty_columns():
    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Budget"
    sheet.append([None, "Item", None, "Amount"])
    sheet.append([None, "Laptops", None, 12000])
    sheet.merge_cells("B3:D3")
    sheet["B3"] = "Approved by the board"
    document = read(saved(workbook), "budget.xlsx")
    assert [s.heading for s in document.sections] == ["Budget"]
    # merged cells are left empty (openpyxl's streaming reader does not know them)
    assert document.text == (
        "Budget\n\n| Item | Amount |\n| --- | --- |\n| Laptops | 12000 |\n| Approved by the board | |"
    )


def test_a_pptx_table_repeats_a_value_merged_down_and_leaves_one_merged_across_empty():
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    table = slide.shapes.add_table(3, 3, Inches(1), Inches(1), Inches(6), Inches(2)).table
    for r, values in enumerate([("Region", "City", "Sales"), ("North", "Lille", "90"), ("", "Calais", "")]):
        for c, value in enumerate(values):
            table.cell(r, c).text = value
    table.cell(1, 0).merge(table.cell(2, 0))  # "North" spans two rows
    table.cell(2, 1).merge(table.cell(2, 2))  # "Calais" spans two columns
    text = read(saved(presentation), "sales.pptx").text
    assert "| Region | City | Sales |\n| --- | --- | --- |\n| North | Lille | 90 |\n| North | Calais | |" in text


def test_an_odt_table_keeps_its_caption_and_repeats_a_cell_spanning_rows(tmp_path):
    from odf.opendocument import OpenDocumentText
    from odf.table import CoveredTableCell, Table, TableCell, TableColumn, TableRow
    from odf.text import P, Sequence

    document = OpenDocumentText()
    caption = P(text="Table ")
    caption.addElement(Sequence(name="Table", text="1"))
    caption.addText(": Contacts")
    document.text.addElement(caption)
    table = Table(name="Contacts")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for values in [("Team", "E-mail"), ("IT", "it@example.com"), (None, "help@example.com")]:
        row = TableRow()
        for value in values:
            if value is None:
                row.addElement(CoveredTableCell())
                continue
            cell = TableCell(numberrowsspanned=2) if value == "IT" else TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    document.text.addElement(table)
    document.save(str(tmp_path / "contacts.odt"))
    text = read((tmp_path / "contacts.odt").read_bytes(), "contacts.odt").text
    assert text == (
        "Table 1: Contacts\n| Team | E-mail |\n| --- | --- |\n| IT | it@example.com |\n| IT | help@example.com |"
    )


# HTML tables -----------------------------------------------------------------------------------


def test_an_html_table_is_a_markdown_table_with_its_caption_spans_and_nested_tables():
    page = (
        "<html><body><h1>Offices</h1><p>Where we work.</p>"
        "<table><caption>Table 2: Sites</caption><thead><tr><th>Region</th><th>City</th><th>Desks</th></tr></thead>"
        "<tbody><tr><td rowspan='2'>North</td><td>Lille</td><td>90</td></tr><tr><td>Calais</td><td>80</td></tr>"
        "<tr><td colspan='2'>Total</td><td>170 <table><tr><td>(2</td><td>sites)</td></tr></table></td></tr>"
        "</tbody></table><p>Ask facilities for a desk.</p></body></html>"
    )
    document = read(page.encode(), "offices.html")
    assert document.text == (
        "Offices\nWhere we work.\n\nTable 2: Sites\n| Region | City | Desks |\n| --- | --- | --- |\n"
        "| North | Lille | 90 |\n| North | Calais | 80 |\n| Total | | 170 (2 sites) |\n\nAsk facilities for a desk."
    )
    assert [s.heading for s in document.sections] == ["Offices"]


def test_a_one_column_html_layout_table_reads_as_text():
    page = "<html><body><table><tr><td><h2>News</h2><p>The office moves in May.</p></td></tr></table></body></html>"
    assert read(page.encode(), "news.html").text == "News The office moves in May."


def test_a_cell_spanning_thousands_of_rows_adds_a_bounded_amount_of_text():
    rows = "".join(f"<tr><td rowspan='65534'>{'x' * 500}</td><td>{n}</td></tr>" for n in range(300))
    page = f"<html><body><table>{rows}</table></body></html>"
    assert len(read(page.encode(), "wide.html").text) < 4 * len(page)


# Pictures --------------------------------------------------------------------------------------


def test_a_screenshot_of_text_in_a_docx_is_read_where_it_stands():
    import docx
    from docx.shared import Inches

    document = docx.Document()
    document.add_paragraph("Before the picture.")
    document.add_picture(io.BytesIO(picture("Backups run every night at 2 am")), width=Inches(5))
    document.add_paragraph("After the picture.")
    read_doc = read_office(saved(document), name="backups.docx", external_id="backups", uri="")
    before, image, after = read_doc.text.split("\n\n")
    assert (before, after) == ("Before the picture.", "After the picture.")
    assert image.startswith("[Image: ") and "every night" in image.lower()
    assert read_doc.metadata["ocr_images"] == 1


def test_a_slide_that_is_one_picture_is_read_and_named_among_the_ocr_pages():
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[5])
    first.shapes.title.text = "Agenda"
    second = presentation.slides.add_slide(presentation.slide_layouts[6])
    second.shapes.add_picture(io.BytesIO(picture("Quarterly revenue grew")), Inches(1), Inches(1), Inches(8))
    document = read_office(saved(presentation), name="deck.pptx", external_id="deck", uri="")
    assert "quarterly revenue" in document.text.lower()
    assert document.metadata["ocr_pages"] == [2]
    assert document.text[document.metadata["page_starts"][1] :].startswith("Slide 2\n\n[Image: ")


def test_icons_are_skipped_and_pictures_past_the_budget_keep_their_alternative_text(settings):
    import docx
    from docx.shared import Inches

    settings.KB_OCR_MAX_PAGES = 0
    document = docx.Document()
    document.add_paragraph("Logos:")
    document.add_picture(io.BytesIO(picture(size=(24, 24))), width=Inches(0.3))
    document.add_picture(io.BytesIO(picture("Ignored")), width=Inches(5))
    descriptions = document.element.body.xpath(".//wp:docPr")
    descriptions[0].set("descr", "A small icon")
    descriptions[1].set("descr", "Organisation chart of the support team")
    data = saved(document)
    document = read(data, "chart.docx")
    assert document.text == "Logos:\n\n[Image: Organisation chart of the support team]"
    assert document.metadata["ocr_images_skipped"] == 1 and "ocr_images" not in document.metadata
    # the chart is kept to be shown beside citations (knowledge.figures), the icon is not
    [figure] = document.metadata["figures"]
    assert figure["caption"] == "Organisation chart of the support team" and len(document.images) == 1


def test_a_docx_picture_left_to_the_ocr_queue_ends_the_read_as_deferred_not_as_a_bad_file():
    import docx
    from docx.shared import Inches

    from knowledge.ingestion.ocr import OcrDeferred, ocr_deferred

    document = docx.Document()
    document.add_paragraph("See the screenshot.")
    document.add_picture(io.BytesIO(picture("Backups run nightly")), width=Inches(5))
    with ocr_deferred(), pytest.raises(OcrDeferred):
        read(saved(document), "screenshot.docx")


def test_with_ocr_off_an_odt_picture_keeps_its_alternative_text_in_place(settings, tmp_path):
    from odf.draw import Frame, Image
    from odf.opendocument import OpenDocumentText
    from odf.svg import Title
    from odf.text import P

    settings.KB_OCR_ENGINE = "off"
    document = OpenDocumentText()
    document.text.addElement(P(text="The floor plan:"))
    href = document.addPicture("plan.png", mediatype="image/png", content=picture("Room 4"))
    frame = Frame(width="8cm", height="2cm", anchortype="as-char")
    frame.addElement(Image(href=href))
    frame.addElement(Title(text="Floor plan of the second floor"))
    paragraph = P()
    paragraph.addElement(frame)
    document.text.addElement(paragraph)
    document.text.addElement(P(text="Fire exits are marked in green."))
    document.save(str(tmp_path / "plan.odt"))
    text = read((tmp_path / "plan.odt").read_bytes(), "plan.odt").text
    assert text == "The floor plan:\n\n[Image: Floor plan of the second floor]\n\nFire exits are marked in green."


# Slides as pages -------------------------------------------------------------------------------


def test_each_slide_is_a_page_and_a_slide_without_text_starts_where_the_next_does():
    from pptx import Presentation

    presentation = Presentation()
    for title in ("Welcome", "", "Results"):
        slide = presentation.slides.add_slide(presentation.slide_layouts[5])
        slide.shapes.title.text = title
    document = read(saved(presentation), "deck.pptx")
    starts = document.metadata["page_starts"]
    assert document.metadata["pages"] == 3
    assert starts == [0, document.text.index("Slide 3"), document.text.index("Slide 3")]
    assert document.text[starts[2] :] == "Slide 3: Results"


# The splitter ----------------------------------------------------------------------------------


def long_table(rows: int = 40) -> str:
    body = [["Country", "Capital", "Population"]] + [[f"Land {n}", f"City {n}", f"{n * 1000}"] for n in range(rows)]
    return markdown_table(body, caption="Table 3: Capitals")


def table_document(table: str) -> ReadDocument:
    return ReadDocument(
        external_id="atlas", title="Atlas", text=f"The capitals of the lands.\n\n{table}\n\nThat is all."
    )


def test_a_table_that_fits_in_a_chunk_stays_whole():
    document = table_document(long_table(3))
    spans = MaxTokenSplitter(max_tokens=120, overlap_tokens=16).split(document)
    assert any(long_table(3) in span.text for span in spans)


def test_a_long_table_is_cut_between_rows_and_each_part_repeats_its_caption_and_header():
    table = long_table()
    document = table_document(table)
    spans = MaxTokenSplitter(max_tokens=64, overlap_tokens=16).split(document)
    parts = [span for span in spans if "| Land " in span.text]
    assert len(parts) > 5
    head = "Table 3: Capitals\n| Country | Capital | Population |\n| --- | --- | --- |\n"
    rows = []
    for span in parts:
        assert span.text.startswith(head) or head in document.text[span.start : span.end]
        assert span.token_count <= 64
        assert span.text.endswith(document.text[span.start : span.end])  # its offsets are its rows
        rows += [line for line in span.text.split("\n") if line.startswith("| Land ")]
    assert rows == [line for line in table.split("\n") if line.startswith("| Land ")]  # each once, whole


def test_a_row_longer_than_a_chunk_is_cut_and_each_piece_keeps_the_header():
    table = markdown_table(
        [["Term", "Definition"], ["Tenant", "word " * 200], ["Source", "Where documents come from."]]
    )
    spans = MaxTokenSplitter(max_tokens=48, overlap_tokens=8).split(table_document(table))
    pieces = [span for span in spans if "word word" in span.text]
    assert len(pieces) > 3
    assert all("| Term | Definition |\n| --- | --- |\n" in span.text for span in pieces)
    assert any(span.text.endswith("| Source | Where documents come from. |") for span in spans)


def test_the_sentence_splitter_makes_a_chunk_per_row_with_its_header():
    spans = SentenceSplitter().split(table_document(long_table(3)))
    assert [span.text for span in spans] == [
        "The capitals of the lands.",
        "Table 3: Capitals\n| Country | Capital | Population |\n| --- | --- | --- |\n| Land 0 | City 0 | 0 |",
        "Table 3: Capitals\n| Country | Capital | Population |\n| --- | --- | --- |\n| Land 1 | City 1 | 1000 |",
        "Table 3: Capitals\n| Country | Capital | Population |\n| --- | --- | --- |\n| Land 2 | City 2 | 2000 |",
        "That is all.",
    ]


def test_find_tables_takes_a_short_line_right_before_the_header_as_the_caption():
    text = "Intro.\n\nRates\n| a | b |\n|---|:-:|\n| 1 | 2 |\n\nNo table | here\nat all."
    [table] = find_tables(text)
    assert table.context(text) == "Rates\n| a | b |\n|---|:-:|"
    assert [text[a:b] for a, b in table.rows] == ["| 1 | 2 |"]


def test_a_docx_with_a_long_table_ingests_into_chunks_that_each_name_the_columns(tenant, source, tmp_path):
    import docx

    from knowledge.models import Chunk
    from knowledge.services import paths_ingest

    document = docx.Document()
    document.add_heading("Price list", level=1)
    table = document.add_table(rows=81, cols=3)
    for n, row in enumerate(table.rows):
        values = ("Product", "Unit price", "Stock") if n == 0 else (f"Part {n}", f"{n * 3} EUR", f"{n} boxes")
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    Path(tmp_path / "prices.docx").write_bytes(saved(document))
    paths_ingest(tenant=tenant, source=source, paths=[tmp_path])
    chunks = list(Chunk.objects.filter(version__document__external_id="prices").order_by("ordinal"))
    with_rows = [chunk for chunk in chunks if "| Part " in chunk.text]
    assert len(with_rows) > 2
    assert all("| Product | Unit price | Stock |" in chunk.text for chunk in with_rows)


def test_a_line_with_a_pipe_over_a_rule_is_not_a_table():
    assert find_tables("Options: fast | safe\n---\n\nColumns a | b | c\n| --- | --- |\n| 1 | 2 |") == []
