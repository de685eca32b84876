"""A window passage that starts in a later part of a long table keeps the table's caption and
header row, which the splitter repeats before that part's rows."""

from __future__ import annotations

import pytest

from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk
from knowledge.services import documents_ingest
from retrieval.stages.pack import _cut
from tests.factories import SourceFactory, TenantFactory

pytestmark = pytest.mark.django_db


def test_a_window_starting_in_a_later_part_of_a_long_table_keeps_its_header():
    tenant = TenantFactory()
    source = SourceFactory(tenant=tenant)
    rows = "\n".join(f"| gateway {n} | {n * 17:,} | Person {n} |" for n in range(400))
    text = f"Gateways\n\nTable 1: Gateway load\n| Gateway | Requests | Owner |\n| --- | --- | --- |\n{rows}\n"
    documents_ingest(
        tenant=tenant, source=source, documents=[ReadDocument(external_id="g", title="Gateways", text=text)]
    )
    chunks = list(Chunk.objects.filter(tenant=tenant, kind=Chunk.Kind.BODY).order_by("ordinal"))
    later = next(c for c in chunks if c.ordinal > 0 and "gateway 3" in c.text)
    assert later.text.startswith("Table 1: Gateway load\n| Gateway | Requests | Owner |")
    neighbours = {(c.version_id, c.ordinal): c for c in chunks}
    version_text = later.version.text
    passage = _cut(version_text, later.version_id, neighbours, later.ordinal, later.ordinal)
    assert passage.startswith("Table 1: Gateway load\n| Gateway | Requests | Owner |")
    assert passage.endswith(version_text[later.char_start : later.char_end])
