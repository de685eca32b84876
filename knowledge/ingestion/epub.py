"""EPUB books (ebooklib and BeautifulSoup), read for ``knowledge.ingestion.office.read_office``.

Each chapter of the spine, in order, becomes blocks (``html_blocks``): its ``h1``-``h6`` as
headings, paragraphs with whitespace collapsed as a browser does, ``pre`` as it is, and tables
as Markdown tables with their caption (``knowledge.ingestion.tables.html_table``). A chapter that
does not open with a heading gets its table-of-contents entry (else its ``<title>``) as one. The
navigation document is not a chapter. Pictures are not read.
"""

from __future__ import annotations

import io

from knowledge.ingestion.office_blocks import Block, Blocks, Parsed, first_heading, line
from knowledge.ingestion.office_images import ImageReader
from knowledge.ingestion.tables import html_table


def read_epub(data: bytes, blocks: Blocks, images: ImageReader) -> Parsed:
    """Fill ``blocks`` with the book's chapters (``images`` is not used: pictures are not read)."""
    import ebooklib
    from bs4 import BeautifulSoup
    from ebooklib import epub

    book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    toc_titles: dict[str, str] = {}
    _epub_toc(book.toc, toc_titles)
    for item_id, _linear in book.spine:
        item = book.get_item_with_id(item_id)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT or isinstance(item, epub.EpubNav):
            continue
        soup = BeautifulSoup(item.get_content(), "html.parser")
        chapter: list[Block] = []
        html_blocks(soup.body or soup, chapter)
        if not any(block.text for block in chapter):
            continue
        if not chapter[0].heading:
            head_title = soup.title.get_text(" ", strip=True) if soup.title else ""
            chapter_title = toc_titles.get(item.get_name()) or head_title
            if chapter_title:
                chapter.insert(0, Block(line(chapter_title), heading=True))
        blocks.extend(chapter)
    titles = book.get_metadata("DC", "title")
    return Parsed((titles[0][0] if titles else "") or "", first_heading(blocks))


def _epub_toc(entries, titles: dict[str, str]) -> None:
    """File name -> title of the first table-of-contents entry pointing into it."""
    for entry in entries:
        if isinstance(entry, tuple | list):
            _epub_toc([entry[0]], titles)
            _epub_toc(entry[1], titles)
        elif getattr(entry, "href", None) and getattr(entry, "title", None):
            titles.setdefault(entry.href.split("#")[0], entry.title)


_HTML_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_HTML_BLOCKS = {
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "section",
    "ul",
    *_HTML_HEADINGS,
}
_HTML_SKIPPED = {"script", "style", "noscript", "template", "head"}


def html_blocks(element, blocks: list[Block]) -> None:
    """The blocks of an (X)HTML element: headings, paragraphs (whitespace collapsed as a browser
    does), ``pre`` as it is, tables as Markdown tables (``html_table``)."""
    from bs4 import NavigableString, Tag
    from bs4.element import PreformattedString

    inline: list[str] = []

    def flush() -> None:
        text = line("".join(inline))
        if text:
            blocks.append(Block(text))
        inline.clear()

    for child in element.children:
        if isinstance(child, PreformattedString):  # comments, doctypes, processing instructions
            continue
        if isinstance(child, NavigableString):
            inline.append(str(child))
        elif not isinstance(child, Tag) or child.name in _HTML_SKIPPED:
            continue
        elif child.name in _HTML_HEADINGS:
            flush()
            blocks.append(Block(line(child.get_text(" ")), heading=True))
        elif child.name == "table":
            flush()
            blocks.append(Block(html_table(child)))
        elif child.name == "pre":
            flush()
            blocks.append(Block(child.get_text()))
        elif child.name == "br":
            flush()
        elif child.name in _HTML_BLOCKS or child.find(list(_HTML_BLOCKS | {"table", "pre"})):
            flush()
            html_blocks(child, blocks)
        else:
            inline.append(child.get_text())
    flush()
