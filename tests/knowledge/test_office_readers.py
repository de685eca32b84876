"""Office and e-book files (.docx, .pptx, .xlsx, .odt, .epub), made with the libraries that read them."""

import io
import zipfile
from datetime import date, datetime
from pathlib import Path

import pytest

from core.errors import InvalidInput
from knowledge.ingestion.office import OLE_SIGNATURE
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS, ReadDocument, read_bytes, read_path


def make_docx(path: Path, *, title: str = "") -> Path:
    import docx

    document = docx.Document()
    document.core_properties.title = title
    document.add_heading("Travel policy", level=0)
    document.add_paragraph("Staff may book economy flights for trips under six hours.")
    document.add_heading("Hotels", level=1)
    document.add_paragraph("Hotels are booked through the travel desk; breakfast counts as one of the Meals.")
    table = document.add_table(rows=4, cols=2)
    for row, (city, rate) in zip(table.rows, [("City", "Nightly rate"), ("Paris", "180 EUR"), ("", "")], strict=False):
        row.cells[0].text, row.cells[1].text = city, rate
    table.cell(3, 0).merge(table.cell(3, 1)).text = "Rates include taxes."
    document.add_heading("Meals", level=2)
    document.add_paragraph("Meals are paid up to 40 EUR a day.")
    document.save(path)
    return path


def make_pptx(path: Path) -> Path:
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])  # title and content
    first.shapes.title.text = "Quarterly results"
    first.placeholders[1].text_frame.text = "Revenue grew by twelve percent."
    second = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    second.shapes.title.text = "Regions"
    table = second.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(6), Inches(1)).table
    for r, values in enumerate([("Region", "Sales"), ("North", "1200")]):
        for c, value in enumerate(values):
            table.cell(r, c).text = value
    third = presentation.slides.add_slide(presentation.slide_layouts[6])  # blank
    box = third.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1))
    box.text_frame.text = "Questions are welcome."
    presentation.save(path)
    return path


def make_xlsx(path: Path) -> Path:
    import openpyxl

    workbook = openpyxl.Workbook()
    budget = workbook.active
    budget.title = "Budget"
    budget.append(["Item", "Amount", "Due"])
    budget.append(["Laptops", 12000.0, datetime(2025, 3, 1)])
    budget.append([None, None, None])
    budget.append(["Desks", 2500.5, date(2025, 4, 15)])
    staff = workbook.create_sheet("Staff")
    staff.append(["Name", "Team", "Active"])
    staff.append(["Ada", "Platform", True])
    workbook.create_sheet("Empty")
    workbook.save(path)
    return path


def make_odt(path: Path, *, title: str = "") -> Path:
    from odf import dc
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, P

    document = OpenDocumentText()
    if title:
        document.meta.addElement(dc.Title(text=title))
    document.text.addElement(H(outlinelevel=1, text="Onboarding"))
    document.text.addElement(P(text="New starters get a laptop on their first day."))
    document.text.addElement(H(outlinelevel=2, text="Accounts"))
    document.text.addElement(P(text="IT creates your e-mail account."))
    table = Table(name="Contacts")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for values in [("Team", "E-mail"), ("IT", "it@example.com")]:
        row = TableRow()
        for value in values:
            cell = TableCell()
            cell.addElement(P(text=value))
            row.addElement(cell)
        table.addElement(row)
    document.text.addElement(table)
    document.save(str(path))
    return path


def make_epub(path: Path) -> Path:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("garden-1")
    book.set_title("The Small Garden")
    book.set_language("en")
    first = epub.EpubHtml(title="Soil", file_name="soil.xhtml", lang="en")
    first.content = (
        "<html><body><h1>Soil</h1><p>Good soil is <b>dark</b> and\n crumbly.</p>"
        "<h2>Testing the soil</h2><p>A simple jar test shows how much clay it holds.</p></body></html>"
    )
    second = epub.EpubHtml(title="Watering", file_name="water.xhtml", lang="en")
    second.content = (
        "<html><body><p>Water early in the morning.</p>"
        "<table><tr><th>Plant</th><th>Litres</th></tr><tr><td>Tomato</td><td>2</td></tr></table></body></html>"
    )
    book.add_item(first)
    book.add_item(second)
    book.toc = [epub.Link("soil.xhtml", "Soil", "soil"), epub.Link("water.xhtml", "Watering", "water")]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", first, second]
    epub.write_epub(str(path), book)
    return path


def read(path: Path) -> ReadDocument:
    [document] = read_bytes(path.read_bytes(), name=path.name)
    return document


def section_text(document: ReadDocument, heading: str) -> str:
    """The text of the section ``heading``, up to the next section."""
    starts = [s.start for s in document.sections] + [len(document.text)]
    i = [s.heading for s in document.sections].index(heading)
    return document.text[starts[i] : starts[i + 1]]


def assert_sections_point_at_their_headings(document: ReadDocument) -> None:
    for section in document.sections:
        assert document.text[section.start :].startswith(section.heading)


def test_the_office_and_ebook_types_are_supported():
    assert {".docx", ".pptx", ".xlsx", ".odt", ".epub"} <= set(SUPPORTED_EXTENSIONS)


def test_a_docx_heading_becomes_a_section(tmp_path):
    document = read(make_docx(tmp_path / "travel.docx"))
    assert [s.heading for s in document.sections] == ["Travel policy", "Hotels", "Meals"]
    assert_sections_point_at_their_headings(document)
    # the heading, not the mention of "Meals" in the paragraph before it
    assert section_text(document, "Meals") == "Meals\n\nMeals are paid up to 40 EUR a day."


def test_a_docx_table_becomes_one_line_per_row_without_empty_rows(tmp_path):
    document = read(make_docx(tmp_path / "travel.docx"))
    # a Markdown table: the empty row is left out; a cell merged across the row comes once
    table = "| City | Nightly rate |\n| --- | --- |\n| Paris | 180 EUR |\n| Rates include taxes. | |"
    assert f"{table}\n\nMeals" in document.text


def test_a_docx_title_is_its_core_title_else_its_first_heading(tmp_path):
    assert read(make_docx(tmp_path / "travel.docx")).title == "Travel policy"
    assert read(make_docx(tmp_path / "titled.docx", title="Travel rules 2025")).title == "Travel rules 2025"


def test_each_pptx_slide_becomes_a_section_named_after_its_title(tmp_path):
    document = read(make_pptx(tmp_path / "results.pptx"))
    assert [s.heading for s in document.sections] == ["Slide 1: Quarterly results", "Slide 2: Regions", "Slide 3"]
    assert_sections_point_at_their_headings(document)
    assert "Revenue grew by twelve percent." in section_text(document, "Slide 1: Quarterly results")
    assert "| Region | Sales |\n| --- | --- |\n| North | 1200 |" in section_text(document, "Slide 2: Regions")
    assert "Questions are welcome." in section_text(document, "Slide 3")
    assert document.title == "Quarterly results"


def test_each_xlsx_sheet_becomes_a_section_of_rows(tmp_path):
    document = read(make_xlsx(tmp_path / "budget.xlsx"))
    assert [s.heading for s in document.sections] == ["Budget", "Staff"]  # the empty sheet adds nothing
    assert_sections_point_at_their_headings(document)
    budget = section_text(document, "Budget")
    assert (
        "| Item | Amount | Due |\n| --- | --- | --- |\n| Laptops | 12000 | 2025-03-01 |\n| Desks | 2500.5 | 2025-04-15 |"
        in budget
    )
    assert "| Name | Team | Active |\n| --- | --- | --- |\n| Ada | Platform | TRUE |" in section_text(document, "Staff")
    assert document.title == "budget"  # no core title, and sheet names are not titles


def test_an_odt_heading_becomes_a_section_and_its_table_rows(tmp_path):
    document = read(make_odt(tmp_path / "onboarding.odt"))
    assert [s.heading for s in document.sections] == ["Onboarding", "Accounts"]
    assert_sections_point_at_their_headings(document)
    assert "New starters get a laptop on their first day." in section_text(document, "Onboarding")
    assert "| Team | E-mail |\n| --- | --- |\n| IT | it@example.com |" in section_text(document, "Accounts")
    assert document.title == "Onboarding"
    assert read(make_odt(tmp_path / "titled.odt", title="Welcome pack")).title == "Welcome pack"


def test_epub_chapters_and_their_headings_become_sections(tmp_path):
    document = read(make_epub(tmp_path / "garden.epub"))
    assert document.title == "The Small Garden"
    # the second chapter opens without a heading: its table-of-contents entry names it
    assert [s.heading for s in document.sections] == ["Soil", "Testing the soil", "Watering"]
    assert_sections_point_at_their_headings(document)
    assert "Good soil is dark and crumbly." in section_text(document, "Soil")
    assert "| Plant | Litres |\n| --- | --- |\n| Tomato | 2 |" in section_text(document, "Watering")
    assert document.text.startswith("Soil\n")  # the navigation page is not read as a chapter


def test_read_path_gives_an_office_file_its_id_without_suffix(tmp_path):
    [document] = read_path(make_docx(tmp_path / "travel.docx"), root=tmp_path)
    assert document.external_id == "travel"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("report.docx", "Word document"),
        ("deck.pptx", "PowerPoint presentation"),
        ("sheet.xlsx", "Excel workbook"),
        ("notes.odt", "OpenDocument text"),
        ("book.epub", "EPUB book"),
    ],
)
def test_a_corrupt_file_is_refused_naming_it(name, kind):
    suffix = Path(name).suffix
    with pytest.raises(InvalidInput) as caught:
        read_bytes(b"PK\x03\x04 this is not really a zip file", name=name)
    assert caught.value.message == f"{name}: not a valid {kind} (the file is damaged or is not {suffix})."


def test_a_zip_that_is_not_the_named_format_is_refused_naming_it(tmp_path):
    pptx_bytes = make_pptx(tmp_path / "deck.pptx").read_bytes()
    with pytest.raises(InvalidInput, match=r"^report\.docx: not a valid Word document"):
        read_bytes(pptx_bytes, name="report.docx")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("hello.txt", "hi")
    for name in ("book.epub", "notes.odt", "sheet.xlsx"):
        with pytest.raises(InvalidInput, match=rf"^{name}: not a valid"):
            read_bytes(archive.getvalue(), name=name)


def test_a_truncated_docx_is_refused_without_a_library_message(tmp_path):
    data = make_docx(tmp_path / "travel.docx").read_bytes()
    with pytest.raises(InvalidInput) as caught:
        read_bytes(data[: len(data) // 2], name="travel.docx")
    assert caught.value.message == "travel.docx: not a valid Word document (the file is damaged or is not .docx)."


def test_an_encrypted_office_file_says_it_is_password_protected():
    encrypted = OLE_SIGNATURE + b"\x00" * 500 + "EncryptedPackage".encode("utf-16-le") + b"\x00" * 500
    with pytest.raises(InvalidInput) as caught:
        read_bytes(encrypted, name="report.docx")
    assert (
        caught.value.message == "report.docx: the file is encrypted (password-protected); save it without a password."
    )
    assert caught.value.code == "encrypted_file"


def test_an_old_binary_office_file_renamed_is_told_apart_from_an_encrypted_one():
    with pytest.raises(InvalidInput, match=r"^budget\.xlsx: an old binary \.xls file, not \.xlsx; save it as \.xlsx\."):
        read_bytes(OLE_SIGNATURE + b"\x00" * 1000, name="budget.xlsx")
    with pytest.raises(InvalidInput, match=r"^notes\.odt: not a valid OpenDocument text"):
        read_bytes(OLE_SIGNATURE + b"\x00" * 1000, name="notes.odt")


def test_a_password_protected_odt_says_it_is_encrypted(tmp_path):
    data = make_odt(tmp_path / "notes.odt").read_bytes()
    locked = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(locked, "w") as target:
        for member in source.infolist():
            content = source.read(member)
            if member.filename == "META-INF/manifest.xml":  # as LibreOffice writes a protected file's
                content = content.replace(b"</manifest:manifest>", b"<manifest:encryption-data/></manifest:manifest>")
            target.writestr(member, content)
    with pytest.raises(InvalidInput, match=r"^notes\.odt: the file is encrypted") as caught:
        read_bytes(locked.getvalue(), name="notes.odt")
    assert caught.value.code == "encrypted_file"


@pytest.mark.parametrize(("target", "encrypted"), [("soil.xhtml", True), ("fonts/serif.otf", False)])
def test_an_epub_with_encrypted_chapters_says_so_but_obfuscated_fonts_pass(tmp_path, target, encrypted):
    data = make_epub(tmp_path / "garden.epub").read_bytes()
    encryption = (
        '<?xml version="1.0"?><encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData><enc:CipherData>'
        f'<enc:CipherReference URI="EPUB/{target}"/></enc:CipherData></enc:EncryptedData></encryption>'
    )
    locked = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(locked, "w") as target_zip:
        for member in source.infolist():
            target_zip.writestr(member, source.read(member))
        target_zip.writestr("META-INF/encryption.xml", encryption)
    if encrypted:
        with pytest.raises(InvalidInput, match=r"^garden\.epub: the file is encrypted") as caught:
            read_bytes(locked.getvalue(), name="garden.epub")
        assert caught.value.code == "encrypted_file"
    else:
        assert read_bytes(locked.getvalue(), name="garden.epub")[0].title == "The Small Garden"


def test_an_empty_office_file_is_refused_as_empty(tmp_path):
    import docx

    with pytest.raises(InvalidInput, match=r"^report\.docx: the file is empty\.$"):
        read_bytes(b"", name="report.docx")
    docx.Document().save(tmp_path / "blank.docx")
    with pytest.raises(InvalidInput, match=r"^blank\.docx: no text could be extracted\.$") as caught:
        read(tmp_path / "blank.docx")
    assert caught.value.code == "empty_file"


def test_a_file_that_unpacks_past_the_cap_is_refused_as_an_archive_bomb(tmp_path, settings):
    settings.KB_PARSE_MAX_UNPACKED_MB = 0.01  # about 10 KB: less than any Word document
    with pytest.raises(InvalidInput, match=r"^travel\.docx: the file unpacks to .* more than the limit of") as caught:
        read(make_docx(tmp_path / "travel.docx"))
    assert caught.value.code == "archive_bomb"


def test_a_folder_with_a_corrupt_docx_among_good_files_stores_nothing(tenant, source, tmp_path):
    from knowledge.models import Document
    from knowledge.services import paths_ingest

    make_docx(tmp_path / "travel.docx")
    make_xlsx(tmp_path / "budget.xlsx")
    (tmp_path / "guide.md").write_text("# Guide\n\nStep one is to read the manual carefully.")
    (tmp_path / "broken.docx").write_bytes(make_docx(tmp_path / "whole.docx").read_bytes()[:2000])
    (tmp_path / "whole.docx").unlink()
    with pytest.raises(InvalidInput, match=r"^broken\.docx: not a valid Word document"):
        paths_ingest(tenant=tenant, source=source, paths=[tmp_path])
    assert not Document.objects.for_tenant(tenant).exists()


def test_a_docx_ingests_into_chunks_headed_by_its_sections(tenant, source, tmp_path):
    import docx

    from knowledge.models import Chunk
    from knowledge.services import paths_ingest

    document = docx.Document()
    document.add_heading("Expense handbook", level=0)
    for topic in ("Hotels", "Meals", "Taxis"):
        document.add_heading(topic, level=1)
        for n in range(6):  # sections long enough to be chunks of their own
            document.add_paragraph(f"Rule {n} about {topic.lower()} says that receipts are kept for {n + 2} years.")
    document.save(tmp_path / "expenses.docx")
    report = paths_ingest(tenant=tenant, source=source, paths=[tmp_path])
    assert [(o.external_id, o.status) for o in report.outcomes] == [("expenses", "created")]
    chunks = Chunk.objects.filter(version__document__external_id="expenses")
    assert {c.heading for c in chunks if "about meals" in c.text} == {"Expense handbook › Meals"}
    assert {c.heading for c in chunks if "about taxis" in c.text} == {"Expense handbook › Taxis"}
