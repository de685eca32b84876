"""Two Django releases' documentation as versions of the same documents.

Django 4.2's and 5.2's ``docs/`` (from their PyPI source distributions, fetched by
``demo.services.django_docs_download``) are ingested into ONE source, oldest release first, each
page with its release date as ``published_at``: a page present in both becomes version 1 (4.2)
and version 2 (5.2) of one document. ``CHANGED_FACTS`` are facts that differ between the two
releases, with the words that show which release an answer came from; ``tests`` and
``benchmarks/versions.py`` ask them by default (5.2 expected) and ``as_of`` a date between the
releases (4.2 expected).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from core.models import Tenant
from demo.services import django_docs_download
from knowledge.ingestion.readers import read_path
from knowledge.models import Source
from knowledge.services import IngestReport, documents_ingest


@dataclass(frozen=True)
class Release:
    """A Django release: the sdist version to download and the feature release's date."""

    version: str
    released: date


# Feature release dates from Django's release notes (docs/releases/4.2.txt, 5.2.txt); the sdists
# are the latest patch releases of each series, whose docs are those series' docs.
RELEASES = (Release("4.2.30", date(2023, 4, 3)), Release("5.2.19", date(2025, 4, 2)))
AS_OF_BETWEEN = date(2024, 6, 1)  # after 4.2, before 5.2

# Pages holding the changed facts (and one page only 5.2 has).
PAGES = (
    "faq/install.txt",
    "faq/models.txt",
    "ref/databases.txt",
    "ref/settings.txt",
    "ref/models/fields.txt",
    "topics/composite-primary-key.txt",
)
# A smaller set for tests (no ref/settings or ref/models/fields: a few hundred chunks less).
TEST_PAGES = ("faq/install.txt", "faq/models.txt", "ref/databases.txt", "topics/composite-primary-key.txt")


@dataclass(frozen=True)
class ChangedFact:
    """A question whose answer changed between 4.2 and 5.2.

    ``new``/``old``: phrases (whitespace-normalized, case-insensitive) that an answer from 5.2 /
    4.2 contains; ``new_only``/``old_only``: phrases that must NOT appear in an answer from the
    other release. ``document``: the page (external id) the fact lives on.
    """

    question: str
    document: str
    new: tuple[str, ...]
    old: tuple[str, ...]
    new_only: tuple[str, ...] = ()
    old_only: tuple[str, ...] = ()


CHANGED_FACTS = (
    ChangedFact(
        "Which PostgreSQL versions does Django support?",
        "ref/databases",
        new=("PostgreSQL 14",),
        old=("PostgreSQL 12",),
        new_only=("PostgreSQL 14",),
        old_only=("PostgreSQL 12",),
    ),
    ChangedFact(
        "Which MariaDB versions does Django support?",
        "ref/databases",
        new=("MariaDB 10.5",),
        old=("MariaDB 10.4",),
        new_only=("MariaDB 10.5",),
        old_only=("MariaDB 10.4",),
    ),
    ChangedFact(
        "What is the minimum SQLite version Django supports?",
        "ref/databases",
        new=("SQLite 3.31",),
        old=("SQLite 3.21",),
        new_only=("SQLite 3.31",),
        old_only=("SQLite 3.21",),
    ),
    ChangedFact(
        "What Python version can I use with Django?",
        "faq/install",
        new=("3.13",),
        old=("3.2",),
        new_only=("3.13",),
        old_only=("3.6, 3.7",),
    ),
    ChangedFact(
        "How do I define a composite primary key on a model?",
        "topics/composite-primary-key",
        new=("CompositePrimaryKey",),
        old=(),
        new_only=("CompositePrimaryKey",),
    ),
    ChangedFact(
        "What is the default value of the USE_TZ setting?",
        "ref/settings",
        new=("Default: True",),
        old=("Default: False",),
        new_only=(),
        old_only=("the default value will change from False to True",),
    ),
    ChangedFact(
        "How can a model field use a database-computed default value with db_default?",
        "ref/models/fields",
        new=("db_default",),
        old=(),
        new_only=("db_default",),
    ),
)


def _normalized(text: str) -> str:
    return " ".join(text.replace("``", "").replace("`", "").split()).lower()


def fact_check(fact: ChangedFact, text: str, *, release: str) -> bool:
    """True when ``text`` shows ``fact`` as of ``release`` ("new" = 5.2, "old" = 4.2).

    It must contain every phrase of that release and none of the other release's only-phrases.
    """
    body = _normalized(text)
    wanted, forbidden = (fact.new, fact.old_only) if release == "new" else (fact.old, fact.new_only)
    return all(_normalized(p) in body for p in wanted) and not any(_normalized(p) in body for p in forbidden)


def releases_ingest(
    *,
    tenant: Tenant,
    source: Source,
    downloads: Path,
    pages: Iterable[str] = PAGES,
    releases: Iterable[Release] = RELEASES,
) -> dict[str, IngestReport]:
    """Ingest ``pages`` of each release's ``docs/`` into ``source``, oldest release first.

    Each page's ``published_at`` is its release date (midnight UTC); a page missing from a
    release is skipped for it. Returns the ingestion report per release version. Raises
    ``demo.services.DownloadFailed`` when a release cannot be downloaded.
    """
    reports: dict[str, IngestReport] = {}
    for release in sorted(releases, key=lambda r: r.released):
        docs = django_docs_download(downloads=downloads, version=release.version)
        published = datetime.combine(release.released, datetime.min.time(), tzinfo=UTC)
        series = ".".join(release.version.split(".")[:2])
        uri_prefix = f"https://docs.djangoproject.com/en/{series}/"
        documents = []
        for page in pages:
            path = docs / page
            if path.is_file():
                for read in read_path(path, root=docs, uri_prefix=uri_prefix, fmt="rst"):
                    documents.append(dataclasses.replace(read, published_at=published))
        reports[release.version] = documents_ingest(tenant=tenant, source=source, documents=documents)
    return reports
