"""Near-duplicate detection: MinHash + LSH after ingestion, pair classification, clusters and their edits."""

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from core.errors import InvalidInput
from knowledge.dedup.near import (
    MEANINGFUL,
    MEANINGLESS,
    candidate_pairs,
    change_summary,
    clusters_of,
    jaccard,
    markup_strip,
    meaning_words,
    pair_classify,
    shingles,
    signatures,
)
from knowledge.dedup.services import (
    near_duplicate_cluster_split,
    near_duplicate_members_detach,
    near_duplicate_pairs_reject,
    near_duplicates_refresh,
)
from knowledge.ingestion.readers import ReadDocument
from knowledge.models.dedup import MinHashSignature, NearDuplicateCluster, NearDuplicateMember, NearDuplicatePair
from knowledge.services import documents_ingest
from tests.conftest import BIKE, PASTA
from tests.factories import SourceFactory, TenantFactory

DATABASES_OLD = ReadDocument(
    external_id="4.2/ref/databases",
    title="Databases",
    published_at=datetime(2023, 4, 3, tzinfo=UTC),
    text=(
        "Databases\n\nDjango officially supports the following databases: PostgreSQL, MariaDB, MySQL, Oracle "
        "and SQLite. Django supports PostgreSQL 12 and higher. psycopg 3.1.8 or later is required, though "
        "the latest release is recommended. PostgreSQL connection settings are described in the settings "
        "reference; connecting to the database uses a service name or a password file. Optimizing the "
        "PostgreSQL configuration: Django needs the following parameters for its database connections. "
        "client_encoding must be UTF8, default_transaction_isolation read committed by default, and timezone "
        "UTC when USE_TZ is True, else the value of TIME_ZONE. If these parameters already have the correct "
        "values, Django will not set them for every new connection, which improves performance slightly."
    ),
)
DATABASES_NEW = replace(
    DATABASES_OLD,
    external_id="5.2/ref/databases",
    published_at=datetime(2025, 4, 2, tzinfo=UTC),
    text=DATABASES_OLD.text.replace("PostgreSQL 12 and higher", "PostgreSQL 14 and higher"),
)
# The same page, re-formatted only (case, markup, spacing): a meaningless near-duplicate.
DATABASES_REFORMATTED = replace(
    DATABASES_OLD,
    external_id="mirror/ref/databases",
    published_at=datetime(2023, 5, 1, tzinfo=UTC),
    text=DATABASES_OLD.text.replace("PostgreSQL 12", "*PostgreSQL*   12").replace("Databases\n", "DATABASES\n"),
)


def test_a_changed_version_number_is_a_meaningful_pair_with_a_word_level_summary():
    found = pair_classify(DATABASES_OLD.text, DATABASES_NEW.text)
    assert found.kind == MEANINGFUL
    assert found.update == "PostgreSQL 12 -> PostgreSQL 14"


def test_changes_of_case_whitespace_punctuation_and_markup_only_are_meaningless():
    found = pair_classify(DATABASES_OLD.text, DATABASES_REFORMATTED.text)
    assert found.kind == MEANINGLESS and found.update == ""
    assert pair_classify("<p>Hello, <b>World</b>!</p>", "hello world").kind == MEANINGLESS


def test_a_rest_role_added_around_a_link_is_a_meaningless_change():
    # Pair #20 of benchmarks/results/near_duplicates_pairs.md (Django 4.2 -> 5.2): a role whose text
    # and target span two lines, which the reST reader leaves in the text.
    older = "in 3rd-party libraries, like the Django Debug Toolbar."
    newer = "in 3rd-party libraries, like the :pypi:`Django Debug Toolbar\n<django-debug-toolbar>`."
    found = pair_classify(older, newer)
    assert (found.kind, found.update) == (MEANINGLESS, "")


@pytest.mark.parametrize(
    ("marked", "plain"),
    [
        (":ref:`the settings <settings-ref>`", "the settings"),
        (":doc:`/topics/http/urls`", "/topics/http/urls"),
        (":class:`~django.db.models.Field`", "Field"),
        (":py:meth:`!save`", "save"),
        ("``literal``", "literal"),
        ("`Django Forum <https://forum.djangoproject.com/>`_", "Django Forum"),
        ("`anonymous <https://example.org/>`__", "anonymous"),
        ("see `the tutorial`_ and Python_.", "see the tutorial and Python."),
        (".. _the tutorial: https://example.org/tutorial", ""),
        ("  __ https://wiki.c2.com/?DontRepeatYourself", ""),
        (".. note::\n   Read me.", "\n   Read me."),
        ("   :linenos:\n   :emphasize-lines: 2", "\n"),
        ("   :caption: news/models.py", "news/models.py"),
        ('[the docs](https://docs.example.org "Docs")', "the docs"),
        ("![a diagram](img/flow.png)", "a diagram"),
        ("[the docs][docs]\n[docs]: https://docs.example.org", "the docs\n"),
    ],
)
def test_markup_strip_keeps_the_text_a_reader_sees_and_drops_roles_links_and_targets(marked, plain):
    assert markup_strip(marked) == plain


def test_a_changed_link_target_is_meaningless_but_changed_link_text_is_meaningful():
    older = "Read [the guide](https://old.example.org/guide) and :ref:`the FAQ <faq-old>`."
    assert pair_classify(older, "Read [the guide](https://new.example.org/guide) and the FAQ.").kind == MEANINGLESS
    changed = pair_classify(older, "Read [the manual](https://old.example.org/guide) and the FAQ.")
    assert (changed.kind, changed.update) == (MEANINGFUL, "the guide -> the manual")


def test_a_changed_caption_or_version_is_meaningful_and_code_words_are_kept():
    assert pair_classify("   :caption: mysite/news/models.py", "   :caption: news/models.py").kind == MEANINGFUL
    assert meaning_words("def __init__(self): return foo_bar_") == ["def", "__init__", "self", "return", "foo_bar"]


def test_the_change_summary_shows_insertions_deletions_and_counts_the_rest():
    older = "one two three four five six seven eight nine ten"
    newer = "one two three four five 6 seven eight ten eleven"
    summary = change_summary(older, newer, limit=2)
    assert summary.startswith("five six -> five 6; - nine")
    assert summary.endswith("(+1 more)")


def test_lsh_proposes_the_similar_pair_and_not_the_unrelated_document():
    texts = {1: DATABASES_OLD.text, 2: DATABASES_NEW.text, 3: PASTA.text}
    sets = {key: shingles(text) for key, text in texts.items()}
    assert jaccard(sets[1], sets[2]) > 0.8
    sigs = dict(zip(texts, signatures(sets.values()), strict=True))
    assert candidate_pairs(sigs, new=[2], threshold=0.8) == {(1, 2)}
    assert candidate_pairs(sigs, new=[3], threshold=0.8) == set()


def test_clusters_are_the_connected_components_of_the_pairs():
    assert sorted(map(sorted, clusters_of([(1, 2), (2, 3), (7, 9)]))) == [[1, 2, 3], [7, 9]]


@pytest.fixture
def two_releases(tenant, django_capture_on_commit_callbacks):
    """The databases page in two releases (two sources) plus unrelated documents, ingested as the
    API and the CLI do: the near-duplicate task runs on commit."""
    old, new = SourceFactory(tenant=tenant, name="django-4.2"), SourceFactory(tenant=tenant, name="django-5.2")
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(tenant=tenant, source=old, documents=[DATABASES_OLD, PASTA])
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        documents_ingest(tenant=tenant, source=new, documents=[DATABASES_NEW, BIKE])
    # The task was queued with transaction.on_commit (beside the table upkeep).
    queued = [c.args[0] for c in callbacks if getattr(c, "args", None)]
    assert queued == ["knowledge.tasks.near_duplicates_task"]
    return tenant


def test_ingestion_queues_the_task_that_clusters_the_two_releases_of_a_page(two_releases):
    assert MinHashSignature.objects.for_tenant(two_releases).count() == 4
    pair = NearDuplicatePair.objects.for_tenant(two_releases).get()
    assert pair.older.document.external_id == "4.2/ref/databases"
    assert pair.newer.document.external_id == "5.2/ref/databases"
    assert pair.kind == MEANINGFUL and pair.update == "PostgreSQL 12 -> PostgreSQL 14"
    assert 0.8 <= pair.jaccard < 1
    cluster = NearDuplicateCluster.objects.for_tenant(two_releases).get()
    assert {m.version.document.external_id for m in cluster.members.all()} == {
        "4.2/ref/databases",
        "5.2/ref/databases",
    }


def test_unchanged_reingestion_queues_no_task(two_releases, django_capture_on_commit_callbacks):
    source = two_releases.sources.get(name="django-5.2")
    with django_capture_on_commit_callbacks() as callbacks:
        documents_ingest(tenant=two_releases, source=source, documents=[DATABASES_NEW, BIKE])
    assert callbacks == []


def test_a_higher_threshold_finds_no_pair_and_a_rebuild_removes_the_cluster(two_releases):
    summary = near_duplicates_refresh(tenant_id=two_releases.pk, threshold=0.99, rebuild=True)
    assert summary["pairs"] == 0 and summary["clusters"] == 0
    assert not NearDuplicateCluster.objects.for_tenant(two_releases).exists()


def test_near_duplicates_are_never_paired_across_tenants(two_releases, django_capture_on_commit_callbacks):
    other = TenantFactory(slug="other-team")
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(tenant=other, source=SourceFactory(tenant=other), documents=[DATABASES_REFORMATTED])
    assert not NearDuplicatePair.objects.for_tenant(other).exists()
    assert NearDuplicatePair.objects.for_tenant(two_releases).count() == 1


def test_not_a_duplicate_survives_a_new_version_of_the_documents(two_releases, django_capture_on_commit_callbacks):
    pair = NearDuplicatePair.objects.for_tenant(two_releases).get()
    near_duplicate_pairs_reject(tenant=two_releases, pair_ids=[pair.pk])
    assert not NearDuplicateCluster.objects.for_tenant(two_releases).exists()
    edited = replace(DATABASES_NEW, text=DATABASES_NEW.text + " Oracle 19c or later is supported.")
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(tenant=two_releases, source=two_releases.sources.get(name="django-5.2"), documents=[edited])
    statuses = set(NearDuplicatePair.objects.for_tenant(two_releases).values_list("status", flat=True))
    assert statuses == {"not_duplicate"}
    assert not NearDuplicateCluster.objects.for_tenant(two_releases).exists()


def test_splitting_a_member_off_keeps_the_rest_of_the_cluster(two_releases, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        documents_ingest(
            tenant=two_releases,
            source=two_releases.sources.get(name="django-4.2"),
            documents=[DATABASES_REFORMATTED],
        )
    cluster = NearDuplicateCluster.objects.for_tenant(two_releases).get()
    assert cluster.members.count() == 3
    mirror = cluster.members.get(version__document__external_id="mirror/ref/databases")
    near_duplicate_cluster_split(tenant=two_releases, member_ids=[mirror.pk])
    kept = NearDuplicateCluster.objects.for_tenant(two_releases).get()
    assert kept.pk == cluster.pk  # the cluster keeps its id
    assert {m.version.document.external_id for m in kept.members.all()} == {"4.2/ref/databases", "5.2/ref/databases"}
    near_duplicates_refresh(tenant_id=two_releases.pk, rebuild=True)
    assert NearDuplicateMember.objects.for_tenant(two_releases).count() == 2  # the split stays


def test_splitting_off_every_member_is_refused(two_releases):
    ids = list(NearDuplicateMember.objects.for_tenant(two_releases).values_list("pk", flat=True))
    with pytest.raises(InvalidInput):
        near_duplicate_cluster_split(tenant=two_releases, member_ids=ids)


def test_taking_a_member_out_dissolves_a_two_member_cluster(two_releases):
    member = NearDuplicateMember.objects.for_tenant(two_releases).first()
    assert near_duplicate_members_detach(tenant=two_releases, member_ids=[member.pk]) == 1
    assert not NearDuplicateCluster.objects.for_tenant(two_releases).exists()


def test_the_tenant_threshold_setting_is_used_by_the_task(two_releases):
    two_releases.retrieval_config = {"near_duplicate_threshold": 0.99}
    two_releases.save(update_fields=["retrieval_config"])
    assert near_duplicates_refresh(tenant_id=two_releases.pk, rebuild=True)["pairs"] == 0
    two_releases.retrieval_config = {"near_duplicate_threshold": 2}
    two_releases.save(update_fields=["retrieval_config"])
    with pytest.raises(InvalidInput, match="near_duplicate_threshold"):
        near_duplicates_refresh(tenant_id=two_releases.pk)
