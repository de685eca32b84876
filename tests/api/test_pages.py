"""Search hits and citations carry the pages of a paged document: ``page`` (the page the chunk
starts on, 1-based) and ``page_end``, through REST, the CLI's ``--json`` and MCP; ``null`` for
documents without pages.

The harbour manual is a three-page PDF made with reportlab (``harbour_pdf``); its document is
built as the PDF reader's contract says (``knowledge.pages``: the pages' text joined by blank
lines, ``page_starts`` where each begins), cut into three chunks: page 1, a chunk on page 2, and
one that runs from page 2 onto page 3.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from core.models import Membership
from knowledge.ingestion.readers import ReadDocument, read_bytes
from knowledge.ingestion.splitters import Span
from knowledge.models import Chunk
from knowledge.services import documents_ingest
from llm.tokenizer import count_tokens
from mcp_server.tools import AskArguments, FetchArguments, SearchArguments, ask_run, fetch_run, search_run
from tests.factories import SourceFactory

# The manual's pages, each a list of lines as printed.
HARBOUR_PAGES = [
    ["Harbour maintenance manual", "Chapter one covers the mooring lines and the daily checks of the pontoons."],
    [
        "The tide gauge is calibrated every Tuesday by the harbour master.",
        "The dredging contract with Quillmarsh Works runs until",
    ],
    ["the end of the autumn season and covers the eastern basin.", "Visitors report at the harbour office."],
]
PAGE_TWO_CHUNK = "The tide gauge is calibrated every Tuesday by the harbour master."
SPANNING_CHUNK = "The dredging contract with Quillmarsh Works runs until\n\nthe end of the autumn season and covers the eastern basin."


# Where ``harbour_pdf`` prints: the left margin and the first baseline from the page's top (points).
LEFT, FIRST_BASELINE, LEADING, FONT_SIZE = 72, 100, 20, 12


def harbour_pdf(pages: list[list[str]] = HARBOUR_PAGES) -> bytes:
    """A PDF (reportlab, A4, Helvetica 12 pt) printing each page's lines from the top, 20 pt apart."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    pdf.setTitle("Harbour maintenance manual")
    for lines in pages:
        pdf.setFont("Helvetica", FONT_SIZE)
        for i, line in enumerate(lines):
            pdf.drawString(LEFT, A4[1] - FIRST_BASELINE - LEADING * i, line)
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def paged_document(
    pages: list[list[str]] = HARBOUR_PAGES, *, external_id: str = "manuals/harbour", original: bytes | None = None
) -> ReadDocument:
    """The document a PDF reader makes of ``pages`` printed by ``harbour_pdf``: each page's lines,
    pages joined by a blank line, with ``pages``, ``page_starts`` and ``regions`` (each line's
    box in points from the page's top-left, and its characters) in its metadata (the shared contract)."""
    from reportlab.pdfbase.pdfmetrics import stringWidth

    texts, starts, regions, position = [], [], [], 0
    for number, lines in enumerate(pages, start=1):
        starts.append(position)
        for i, line in enumerate(lines):
            baseline = FIRST_BASELINE + LEADING * i
            x1 = LEFT + stringWidth(line, "Helvetica", FONT_SIZE)
            regions.append([number, LEFT, baseline - 9.5, round(x1, 1), baseline + 2.5, position, position + len(line)])
            position += len(line) + 1
        texts.append("\n".join(lines))
        position += 1  # the blank line between pages
    return ReadDocument(
        external_id=external_id,
        title="Harbour maintenance manual",
        text="\n\n".join(texts),
        metadata={"pages": len(pages), "page_starts": starts, "regions": regions},
        original=original,
    )


class PassageSplitter:
    """Cuts a document into the given passages (each found in its text), in order."""

    name = "passages"

    def __init__(self, *passages: str):
        self.passages = passages

    def split(self, document: ReadDocument) -> list[Span]:
        spans, cursor = [], 0
        for passage in self.passages:
            start = document.text.index(passage, cursor)
            end = start + len(passage)
            spans.append(Span(text=passage, start=start, end=end, token_count=count_tokens(passage), heading=""))
            cursor = start
        return spans


def harbour_splitter() -> PassageSplitter:
    return PassageSplitter("\n".join(HARBOUR_PAGES[0]), PAGE_TWO_CHUNK, SPANNING_CHUNK)


@pytest.fixture
def manual(corpus):
    """The corpus tenant with the harbour manual ingested beside its three documents without pages."""
    documents_ingest(
        tenant=corpus,
        source=SourceFactory(tenant=corpus, name="manuals"),
        documents=[paged_document(original=harbour_pdf())],
        splitter=harbour_splitter(),
    )
    return Chunk.objects.for_tenant(corpus).filter(version__document__external_id="manuals/harbour")


def chunk_id(manual, text: str) -> int:
    return manual.get(text=text).pk


def test_each_chunk_of_a_paged_document_stores_the_pages_it_starts_and_ends_on(manual):
    pages = {c.text: (c.metadata["page"], c.metadata["page_end"]) for c in manual}
    assert pages == {"\n".join(HARBOUR_PAGES[0]): (1, 1), PAGE_TWO_CHUNK: (2, 2), SPANNING_CHUNK: (2, 3)}


def test_search_hits_carry_the_page_and_page_end_of_their_chunk(manual, member_client):
    hits = {}
    for query in ("tide gauge calibrated every Tuesday", "dredging contract Quillmarsh Works autumn season"):
        response = member_client.post("/api/v1/search/", {"query": query, "k": 10}, format="json")
        assert response.status_code == 200
        hits.update({hit["chunk_id"]: hit for hit in response.json()["results"]})
    page_two, spanning = hits[chunk_id(manual, PAGE_TWO_CHUNK)], hits[chunk_id(manual, SPANNING_CHUNK)]
    assert (page_two["page"], page_two["page_end"]) == (2, 2)
    assert (spanning["page"], spanning["page_end"]) == (2, 3)


def test_a_document_without_pages_has_null_pages_in_its_hits(manual, member_client):
    response = member_client.post("/api/v1/search/", {"query": "how long do I boil spaghetti?"}, format="json")
    pasta = next(hit for hit in response.json()["results"] if hit["document"] == "recipes/pasta")
    assert pasta["page"] is None and pasta["page_end"] is None


def ask(client, question: str) -> dict:
    response = client.post("/api/v1/ask/", {"question": question, "extractive": True}, format="json")
    assert response.status_code == 200
    return {citation["chunk_id"]: citation for citation in response.json()["citations"]}


def test_citations_of_an_answer_carry_the_cited_chunks_pages(manual, member_client):
    page_two = ask(member_client, "Who calibrates the tide gauge every Tuesday?")[chunk_id(manual, PAGE_TWO_CHUNK)]
    spanning = ask(member_client, "Until when does the dredging contract with Quillmarsh Works run?")[
        chunk_id(manual, SPANNING_CHUNK)
    ]
    assert (page_two["page"], page_two["page_end"]) == (2, 2)
    assert (spanning["page"], spanning["page_end"]) == (2, 3)


def test_the_cli_json_of_search_and_ask_carries_the_pages(manual, corpus):
    out = io.StringIO()
    call_command("search", "--tenant", corpus.slug, "--json", "tide gauge calibrated every Tuesday", stdout=out)
    hits = {hit["chunk_id"]: hit for hit in json.loads(out.getvalue())["results"]}
    assert hits[chunk_id(manual, PAGE_TWO_CHUNK)]["page"] == 2

    out = io.StringIO()
    call_command(
        "ask",
        "--tenant",
        corpus.slug,
        "--extractive",
        "--json",
        "When does the Quillmarsh dredging contract end?",
        stdout=out,
    )
    citations = {c["chunk_id"]: c for c in json.loads(out.getvalue())["citations"]}
    assert (
        citations[chunk_id(manual, SPANNING_CHUNK)]["page"],
        citations[chunk_id(manual, SPANNING_CHUNK)]["page_end"],
    ) == (2, 3)


def test_the_cli_text_of_ask_names_the_pages(manual, corpus):
    out = io.StringIO()
    call_command(
        "ask", "--tenant", corpus.slug, "--extractive", "When does the Quillmarsh dredging contract end?", stdout=out
    )
    assert "pp. 2-3)" in out.getvalue()


def test_the_mcp_tools_carry_the_pages(manual, corpus, member):
    membership = Membership.objects.get(tenant=corpus, user=member)
    found = search_run(membership=membership, arguments=SearchArguments(query="tide gauge calibrated every Tuesday"))
    hit = next(r for r in found["results"] if r["chunk_id"] == chunk_id(manual, PAGE_TWO_CHUNK))
    assert (hit["page"], hit["page_end"]) == (2, 2)

    answer = ask_run(
        membership=membership,
        arguments=AskArguments(question="When does the Quillmarsh dredging contract end?", extractive=True),
    )
    cited = next(c for c in answer["citations"] if c["chunk_id"] == chunk_id(manual, SPANNING_CHUNK))
    assert (cited["page"], cited["page_end"]) == (2, 3)

    fetched = fetch_run(membership=membership, arguments=FetchArguments(chunk_id=chunk_id(manual, SPANNING_CHUNK)))
    assert (fetched["page"], fetched["page_end"]) == (2, 3)


def test_the_openapi_schema_documents_page_and_page_end_as_nullable_integers(member_client):
    components = member_client.get("/api/schema/?format=json").json()["components"]["schemas"]
    for name in ("Result", "Citation"):
        properties = components[name]["properties"]
        for field in ("page", "page_end"):
            assert properties[field]["type"] == "integer", (name, field)
            assert properties[field]["nullable"] is True, (name, field)


def test_the_pdf_readers_document_of_the_manual_gives_its_chunks_the_same_pages(corpus):
    [read] = read_bytes(harbour_pdf(), name="harbour.pdf", external_id="manuals/read")
    documents_ingest(tenant=corpus, source=SourceFactory(tenant=corpus), documents=[read], splitter=harbour_splitter())
    chunks = Chunk.objects.for_tenant(corpus).filter(version__document__external_id="manuals/read")
    assert sorted((c.metadata["page"], c.metadata["page_end"]) for c in chunks) == [(1, 1), (2, 2), (2, 3)]
