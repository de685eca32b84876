"""PDFs shaped like the ones teams upload, made on the fly with reportlab (and Pillow for the pictures):
running headers and footers, two columns, a word hyphenated at a line end, a table that runs over a
page break, a figure with its caption, and a scanned page (a picture of text, no text layer).

Every function returns the PDF's bytes. Coordinates are reportlab's (points, from the bottom-left).
"""

from __future__ import annotations

import io

from PIL import Image, ImageDraw, ImageFont
from reportlab.lib import colors
from reportlab.lib.pagesizes import letter
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas
from reportlab.platypus import Table, TableStyle

WIDTH, HEIGHT = letter  # 612 x 792 points
MARGIN = 72
HEADER = "Northwind Operations Handbook"
# What the scanned page of ``handbook_pdf`` shows (as a picture only).
SCANNED_TEXT = "Scanned memo: the Zephyr vault code is 4471"
# The table of ``handbook_pdf``: its header, the rows on page 4, the rows continued on page 5.
TABLE_HEADER = ["System", "Requests", "Owner"]
TABLE_PAGE_4 = [
    ["Billing service", "12,300", "Amal Reyes"],
    ["Search cluster", "9,120", "Jonas Berg"],
    ["Mail relay", "3,004", "Priya Nair"],
    ["Ledger archive", "815", "Tomás Ruiz"],
]
TABLE_PAGE_5 = [
    ["Quillbrook gateway", "7,450", "Dana Petrov"],
    ["Status page", "2,210", "Lee Okafor"],
]
FIGURE_CAPTION = "Figure 1: Requests per region in 2023"
TABLE_CAPTION = "Table 1: Requests per system last month"


def text_image(
    lines: list[str], *, size: int = 36, width: int = 1400, height: int | None = None, padding: int = 40
) -> Image.Image:
    """A white grey-scale picture of ``lines`` in black, as a scanner would give (Pillow's own font);
    ``height`` defaults to what the lines take."""
    font = ImageFont.load_default(size=size)
    height = height or padding * 2 + int(len(lines) * size * 1.5)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    for number, line in enumerate(lines):
        draw.text((padding, padding + int(number * size * 1.5)), line, fill=0, font=font)
    return image


def _chart_image() -> Image.Image:
    """A small bar chart without any text."""
    image = Image.new("RGB", (600, 300), "white")
    draw = ImageDraw.Draw(image)
    for number, height in enumerate((120, 220, 160, 260)):
        draw.rectangle((60 + number * 130, 280 - height, 140 + number * 130, 280), fill=(40, 90, 160))
    draw.line((40, 280, 580, 280), fill="black", width=3)
    return image


def _png(image: Image.Image) -> ImageReader:
    out = io.BytesIO()
    image.save(out, format="PNG")
    out.seek(0)
    return ImageReader(out)


def _lines(pdf: canvas.Canvas, lines: list[str], *, x: float, y: float, leading: float = 15, size: int = 11) -> float:
    """Draw ``lines`` from ``y`` down; returns the ``y`` below the last one."""
    pdf.setFont("Helvetica", size)
    for line in lines:
        pdf.drawString(x, y, line)
        y -= leading
    return y


def _running(pdf: canvas.Canvas, number: int, total: int) -> None:
    """The running header and footer of ``handbook_pdf``'s text pages."""
    pdf.setFont("Helvetica", 9)
    pdf.drawString(MARGIN, HEIGHT - 36, HEADER)
    pdf.drawRightString(WIDTH - MARGIN, HEIGHT - 36, "Internal use only")
    pdf.drawCentredString(WIDTH / 2, 30, f"Page {number} of {total}")


def _table(rows: list[list[str]]) -> Table:
    table = Table(rows, colWidths=[200, 100, 160])
    table.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.5, colors.black),
                ("FONT", (0, 0), (-1, -1), "Helvetica", 10),
            ]
        )
    )
    return table


PAGE_1 = [
    "Incident response",
    "",
    "When an alert fires, the on-call engineer follows the written incident proce-",
    "dure and opens a channel for the incident before anything else is changed.",
    "The first message names the service, the symptom and the time it started.",
    "Marker one: the rollback checklist lives in the release repository.",
]
LEFT_COLUMN = [f"Left column line {n}: the blue team owns intake." for n in range(1, 13)]
RIGHT_COLUMN = [f"Right column line {n}: the red team owns review." for n in range(1, 13)]


def handbook_pdf() -> bytes:
    """Six letter pages, each text page with a running header ("Northwind Operations Handbook",
    "Internal use only") and footer ("Page N of 6"):

    1. a heading and a paragraph with "proce-" / "dure" hyphenated across a line end;
    2. a heading across the page, then two columns of 12 lines (``LEFT_COLUMN``, ``RIGHT_COLUMN``),
       drawn row by row (a reader that follows the drawing order mixes them);
    3. a scanned page: only a picture of ``SCANNED_TEXT`` (no header, no text layer);
    4. a paragraph, then ``TABLE_CAPTION`` over a ruled table (``TABLE_HEADER`` + ``TABLE_PAGE_4``)
       that runs to the page's foot;
    5. the table continued without its header (``TABLE_PAGE_5``, first "Quillbrook gateway"), then text;
    6. a bar chart (a picture) with ``FIGURE_CAPTION`` under it, then a closing line.
    """
    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=letter)
    pdf.setTitle("Northwind Operations Handbook")
    total = 6

    _running(pdf, 1, total)
    _lines(pdf, PAGE_1, x=MARGIN, y=HEIGHT - 110)
    pdf.showPage()

    _running(pdf, 2, total)
    pdf.setFont("Helvetica-Bold", 14)
    pdf.drawString(MARGIN, HEIGHT - 110, "Two teams share the intake and the review of every request")
    for number, (left, right) in enumerate(zip(LEFT_COLUMN, RIGHT_COLUMN, strict=True)):  # drawn row by row
        _lines(pdf, [left], x=MARGIN, y=HEIGHT - 140 - 15 * number, size=9)
        _lines(pdf, [right], x=WIDTH / 2 + 18, y=HEIGHT - 140 - 15 * number, size=9)
    pdf.showPage()

    scan = text_image(["Scanned memo", SCANNED_TEXT])
    shown = (WIDTH - 2 * MARGIN) * scan.height / scan.width
    pdf.drawImage(_png(scan), MARGIN, HEIGHT - 72 - shown, width=WIDTH - 2 * MARGIN, height=shown)
    pdf.showPage()

    _running(pdf, 4, total)
    _lines(
        pdf,
        ["Request volumes", "", "The table below lists last month's requests per system."],
        x=MARGIN,
        y=HEIGHT - 110,
    )
    table = _table([TABLE_HEADER, *TABLE_PAGE_4])
    _, height = table.wrapOn(pdf, WIDTH, HEIGHT)
    table.drawOn(pdf, MARGIN, 80)
    _lines(pdf, [TABLE_CAPTION], x=MARGIN, y=80 + height + 8, size=10)
    pdf.showPage()

    _running(pdf, 5, total)
    table = _table(TABLE_PAGE_5)
    _, height = table.wrapOn(pdf, WIDTH, HEIGHT)
    table.drawOn(pdf, MARGIN, HEIGHT - 72 - height)
    _lines(pdf, ["Volumes are counted at the load balancer, once per request."], x=MARGIN, y=HEIGHT - 72 - height - 40)
    pdf.showPage()

    _running(pdf, 6, total)
    pdf.drawImage(_png(_chart_image()), MARGIN, HEIGHT - 100 - 240, width=480, height=240)
    _lines(pdf, [FIGURE_CAPTION], x=MARGIN, y=HEIGHT - 100 - 240 - 20, size=10)
    _lines(pdf, ["The north region grew fastest."], x=MARGIN, y=HEIGHT - 420)
    pdf.showPage()
    pdf.save()
    return out.getvalue()


def marked_pdf(pages: int = 5, *, lines_per_page: int = 30) -> bytes:
    """``pages`` letter pages of text, every line beginning and ending with its page's marker
    (``pg3`` on page 3), with a running header and a "Page N" footer."""
    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=letter)
    for number in range(1, pages + 1):
        _running(pdf, number, pages)
        lines = [
            f"pg{number} line {line} tells the reader about request routing and review queues pg{number}"
            if line % 8
            else ""
            for line in range(1, lines_per_page + 1)
        ]
        _lines(pdf, lines, x=MARGIN, y=HEIGHT - 90)
        pdf.showPage()
    pdf.save()
    return out.getvalue()


def scans_pdf(scans: int, *, text: str = "Scanned page {n} of the archive") -> bytes:
    """A text page, then ``scans`` small scanned pages (300 x 120 points, a picture of ``text``
    with ``{n}`` the page number), then a closing text page."""
    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=letter)
    _lines(pdf, ["The archive begins with this typed page."], x=MARGIN, y=HEIGHT - 90)
    pdf.showPage()
    for number in range(2, scans + 2):
        pdf.setPageSize((300, 120))
        picture = text_image([text.format(n=number)], size=28, width=750, height=300, padding=30)
        pdf.drawImage(_png(picture), 0, 0, width=300, height=120)
        pdf.showPage()
    pdf.setPageSize(letter)
    _lines(pdf, ["The archive ends with this typed page."], x=MARGIN, y=HEIGHT - 90)
    pdf.showPage()
    pdf.save()
    return out.getvalue()
