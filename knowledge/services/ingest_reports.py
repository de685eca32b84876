"""What an ingestion call reports: each document's outcome, and what was read only in part.

``documents_ingest`` returns an ``IngestReport``; an ingestion job stores its ``as_dict()`` as the
job's ``result`` and a sync adds its notes to the run's ``errors`` (neither fails for a note).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings

from knowledge.ingestion.documents import ReadDocument


@dataclass
class IngestOutcome:
    """What happened to one document: created, updated, unchanged or duplicate."""

    external_id: str
    status: str
    document_id: int
    version: int
    chunks: int
    duplicate_of: int | None = None


@dataclass
class IngestNote:
    """Something a reader of the run should know about one stored document, e.g. pages not read.

    ``external_id``: the document's id; ``message``: what happened, without the id
    (``"pages 11-40 not read (OCR budget 10 pages)"``).
    """

    external_id: str
    message: str

    def __str__(self) -> str:
        return f"{self.external_id}: {self.message}"


@dataclass
class IngestReport:
    """Totals of an ingestion call; ``outcomes`` lists every document, ``notes`` what was read only in part."""

    outcomes: list[IngestOutcome] = field(default_factory=list)
    embed_seconds: float = 0.0
    total_seconds: float = 0.0
    notes: list[IngestNote] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """``{"created", "updated", "unchanged", "duplicate"}`` documents, and ``"chunks"`` stored."""
        counts = {"created": 0, "updated": 0, "unchanged": 0, "duplicate": 0}
        for outcome in self.outcomes:
            counts[outcome.status] += 1
        counts["chunks"] = sum(o.chunks for o in self.outcomes if o.status in ("created", "updated"))
        return counts

    def as_dict(self) -> dict:
        """The counts, seconds, ``documents`` (each outcome's fields) and ``notes`` (``"<id>: <message>"``)."""
        return {
            **self.counts(),
            "embed_seconds": round(self.embed_seconds, 2),
            "total_seconds": round(self.total_seconds, 2),
            "documents": [o.__dict__ for o in self.outcomes],
            "notes": [str(note) for note in self.notes],
        }


def page_ranges(pages: Iterable[int]) -> str:
    """Page numbers as ranges: ``[3]`` -> ``"page 3"``, ``[3, 4, 5, 9]`` -> ``"pages 3-5, 9"``."""
    numbers = sorted(set(pages))
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    parts = [f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs]
    return ("pages " if len(numbers) > 1 else "page ") + ", ".join(parts)


def ocr_budget_notes(documents: Iterable[ReadDocument]) -> list[IngestNote]:
    """A note for each document whose scanned pages went past the OCR budget (``KB_OCR_MAX_PAGES``).

    The readers name the pages that needed OCR and were not read in ``metadata["ocr_skipped"]``
    (a PDF's pages, a presentation's slides): over the budget, or all of them when OCR is off or
    not installed. They went past the budget when the document used it up: as many pages (or, for
    an office file, pictures: ``ocr_images``) were read as ``KB_OCR_MAX_PAGES`` allows. Pages
    skipped because OCR is off get no note (``docs/ingestion.md`` says where they are named).
    """
    budget = settings.KB_OCR_MAX_PAGES
    noun = "page" if budget == 1 else "pages"
    notes = []
    for document in documents:
        skipped = document.metadata.get("ocr_skipped") or []
        read = document.metadata.get("ocr_images", len(document.metadata.get("ocr_pages") or []))
        if skipped and read >= budget:
            message = f"{page_ranges(skipped)} not read (OCR budget {budget} {noun})"
            notes.append(IngestNote(document.external_id, message))
    return notes
