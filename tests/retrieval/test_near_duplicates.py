"""Retrieval over duplicates: one result per page (the freshest copy), with where else it appears."""

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from core.errors import InvalidInput
from knowledge.models.dedup import NearDuplicateMember
from knowledge.services import documents_ingest
from retrieval.pipeline import pipeline_answer, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.api.conftest import client_for
from tests.conftest import BIKE
from tests.factories import MembershipFactory, SourceFactory
from tests.knowledge.test_near_duplicates import two_releases  # noqa: F401

QUESTION = "Which PostgreSQL versions does Django support?"


def documents(results) -> list[str]:
    return [r.chunk.version.document.external_id for r in results]


def test_search_keeps_only_the_newer_release_and_lists_the_older_as_near_duplicate(two_releases):  # noqa: F811
    results = chunk_search(AnswerRequest(question=QUESTION, k=5), tenant=two_releases).results
    found = documents(results)
    assert "5.2/ref/databases" in found and "4.2/ref/databases" not in found
    top = next(r for r in results if r.chunk.version.document.external_id == "5.2/ref/databases")
    data = top.as_dict()
    assert data["update"] == "PostgreSQL 12 -> PostgreSQL 14"
    assert [(d["document"], d["source"], d["kind"]) for d in data["near_duplicates"]] == [
        ("4.2/ref/databases", "django-4.2", "meaningful")
    ]
    assert data["near_duplicates"][0]["published_at"].startswith("2023-04-03")


def test_collapse_off_per_request_keeps_both_releases(two_releases):  # noqa: F811
    results = chunk_search(AnswerRequest(question=QUESTION, k=5, collapse=False), tenant=two_releases).results
    assert {"5.2/ref/databases", "4.2/ref/databases"} <= set(documents(results))


def test_the_tenant_setting_turns_collapsing_off_and_a_request_turns_it_back_on(two_releases):  # noqa: F811
    two_releases.retrieval_config = {"collapse_near_duplicates": False}
    two_releases.save(update_fields=["retrieval_config"])
    assert {"5.2/ref/databases", "4.2/ref/databases"} <= set(
        documents(chunk_search(AnswerRequest(question=QUESTION, k=5), tenant=two_releases).results)
    )
    collapsed = chunk_search(AnswerRequest(question=QUESTION, k=5, collapse=True), tenant=two_releases).results
    assert "4.2/ref/databases" not in documents(collapsed)


def test_a_bad_collapse_setting_is_refused_by_name(tenant):
    with pytest.raises(InvalidInput, match="collapse_near_duplicates"):
        pipeline_spec(tenant=tenant, overrides={"collapse_near_duplicates": "yes"})
    with pytest.raises(InvalidInput, match="near_duplicate_threshold"):
        pipeline_spec(tenant=tenant, overrides={"near_duplicate_threshold": 0.2})


def test_an_older_copy_is_replaced_by_the_newer_release_even_when_only_the_older_was_retrieved(two_releases):  # noqa: F811
    kept = chunk_search(
        AnswerRequest(question="PostgreSQL 12", k=1, mode="lexical", collapse=False), tenant=two_releases
    )
    assert documents(kept.results) == ["4.2/ref/databases"]  # only the old release says "12"
    collapsed = chunk_search(AnswerRequest(question="PostgreSQL 12", k=1, mode="lexical"), tenant=two_releases).results
    assert documents(collapsed) == ["5.2/ref/databases"]
    assert collapsed[0].components["near_duplicates"] == {"replaced_chunk_id": kept.results[0].chunk.pk}


def test_a_source_filter_is_respected_when_collapsing(two_releases):  # noqa: F811
    old = two_releases.sources.get(name="django-4.2")
    results = chunk_search(AnswerRequest(question=QUESTION, k=5, source_ids=[old.pk]), tenant=two_releases).results
    assert "4.2/ref/databases" in documents(results) and "5.2/ref/databases" not in documents(results)


def test_an_exact_duplicate_is_one_result_shown_at_its_freshest_place_with_also_in(tenant):
    first = SourceFactory(tenant=tenant, name="wiki")
    mirror = SourceFactory(tenant=tenant, name="mirror")
    documents_ingest(
        tenant=tenant, source=first, documents=[replace(BIKE, published_at=datetime(2020, 1, 1, tzinfo=UTC))]
    )
    copy = replace(BIKE, external_id="mirror/bike", published_at=datetime(2024, 1, 1, tzinfo=UTC))
    documents_ingest(tenant=tenant, source=mirror, documents=[copy])
    results = chunk_search(AnswerRequest(question="patch the inner tube puncture", k=5), tenant=tenant).results
    assert len(results) == 1
    data = results[0].as_dict()
    assert (data["document"], data["source"]) == ("mirror/bike", "mirror")
    assert [(p["document"], p["source"]) for p in data["also_in"]] == [("howto/bike-tyre", "wiki")]
    assert BIKE.text.split("\n\n")[1][:40] in data["text"]


def test_a_duplicate_ingested_after_a_search_is_shown_by_the_next_search(tenant):
    first = SourceFactory(tenant=tenant, name="wiki")
    mirror = SourceFactory(tenant=tenant, name="mirror")
    documents_ingest(tenant=tenant, source=first, documents=[BIKE])
    before = chunk_search(AnswerRequest(question="patch the inner tube puncture", k=5), tenant=tenant).results
    assert before[0].as_dict()["also_in"] == []  # no duplicate yet (and the process remembers that)
    documents_ingest(tenant=tenant, source=mirror, documents=[replace(BIKE, external_id="mirror/bike")])
    after = chunk_search(AnswerRequest(question="patch the inner tube puncture", k=5), tenant=tenant).results
    assert len(after) == 1 and len(after[0].as_dict()["also_in"]) == 1


def test_the_api_search_takes_collapse_and_returns_the_duplicate_fields(two_releases):  # noqa: F811
    client = client_for(MembershipFactory(tenant=two_releases).user)
    body = client.post("/api/v1/search/", {"query": QUESTION, "k": 5}, format="json").json()
    assert "4.2/ref/databases" not in [r["document"] for r in body["results"]]
    top = next(r for r in body["results"] if r["document"] == "5.2/ref/databases")
    assert top["update"] == "PostgreSQL 12 -> PostgreSQL 14" and top["also_in"] == []
    body = client.post("/api/v1/search/", {"query": QUESTION, "k": 5, "collapse": False}, format="json").json()
    assert "4.2/ref/databases" in [r["document"] for r in body["results"]]
    bad = client.post("/api/v1/search/", {"query": QUESTION, "collapse": "maybe"}, format="json")
    assert bad.status_code == 400


def test_the_api_answer_cites_the_newer_release_with_its_update(two_releases):  # noqa: F811
    client = client_for(MembershipFactory(tenant=two_releases).user)
    body = client.post("/api/v1/ask/", {"question": QUESTION, "k": 3, "extractive": True}, format="json").json()
    cited = {c["document"]: c for c in body["citations"]}
    assert "4.2/ref/databases" not in cited
    assert cited["5.2/ref/databases"]["update"] == "PostgreSQL 12 -> PostgreSQL 14"
    assert cited["5.2/ref/databases"]["near_duplicates"][0]["document"] == "4.2/ref/databases"


def test_the_search_command_has_no_collapse(two_releases, capsys):  # noqa: F811
    call_command("search", QUESTION, tenant=two_releases.slug, k=5, json=True)
    collapsed = [r["document"] for r in json.loads(capsys.readouterr().out)["results"]]
    call_command("search", QUESTION, "--no-collapse", tenant=two_releases.slug, k=5, json=True)
    both = [r["document"] for r in json.loads(capsys.readouterr().out)["results"]]
    assert "4.2/ref/databases" not in collapsed and "4.2/ref/databases" in both
    call_command("search", QUESTION, tenant=two_releases.slug, k=5)
    assert "update: PostgreSQL 12 -> PostgreSQL 14" in capsys.readouterr().out


def test_the_ask_command_has_no_collapse(two_releases, capsys):  # noqa: F811
    call_command("ask", QUESTION, "--no-collapse", "--extractive", tenant=two_releases.slug, k=5, json=True)
    cited = [c["document"] for c in json.loads(capsys.readouterr().out)["citations"]]
    assert "4.2/ref/databases" in cited or len(cited) < 2


def test_the_rerank_step_reports_what_it_collapsed(two_releases):  # noqa: F811
    run = pipeline_answer(AnswerRequest(question=QUESTION, use_llm=False), tenant=two_releases, trace=False)
    step = next(s for s in run.steps if s.stage == "near_duplicates")
    assert step.summary["collapse"] is True and step.summary["clusters"] == 1


def test_the_portal_answer_shows_the_update_and_the_near_duplicate(two_releases, client):  # noqa: F811
    user = MembershipFactory(tenant=two_releases).user
    client.force_login(user)
    page = client.post("/", {"question": QUESTION}).content.decode()
    assert "Updated: PostgreSQL 12 -&gt; PostgreSQL 14" in page
    assert "django-4.2/Databases" in page


def test_the_admin_splits_a_cluster(two_releases, admin_client):  # noqa: F811
    ids = [str(m.pk) for m in NearDuplicateMember.objects.for_tenant(two_releases)[:1]]
    response = admin_client.post(
        "/admin/knowledge/nearduplicatemember/", {"action": "split_off", "_selected_action": ids}, follow=True
    )
    assert response.status_code == 200
    assert not NearDuplicateMember.objects.for_tenant(two_releases).exists()


def test_a_tenant_without_duplicates_runs_no_near_duplicates_step(corpus):
    run = pipeline_answer(
        AnswerRequest(question="How long do I boil spaghetti?", use_llm=False), tenant=corpus, trace=False
    )
    assert "near_duplicates" not in [s.stage for s in run.steps]


def test_a_near_duplicate_the_asker_may_not_see_is_never_listed(two_releases):  # noqa: F811
    from knowledge.access import access_group_save, access_rule_grant

    member = MembershipFactory(tenant=two_releases, role="member").user
    insider = MembershipFactory(tenant=two_releases, role="member").user
    group = access_group_save(tenant=two_releases, name="archivists", members=[insider])
    access_rule_grant(tenant=two_releases, source=two_releases.sources.get(name="django-4.2"), group=group)

    def listed(user):
        results = chunk_search(AnswerRequest(question=QUESTION, k=5), tenant=two_releases, user=user).results
        top = next(r for r in results if r.chunk.version.document.external_id == "5.2/ref/databases")
        return [d["document"] for d in top.as_dict()["near_duplicates"] or []]

    assert listed(insider) == ["4.2/ref/databases"]
    assert listed(member) == []


# ---- one query for every replaced result (no N+1) ---------------------------------------------

GUIDE_PARAGRAPHS = [
    "Caching. Django ships a cache framework with several backends. The database cache stores entries "
    "in a table that createcachetable makes; the file-based cache writes one file per entry; the local "
    "memory cache lives inside each process. Memcached and Redis are the fast shared choices for "
    "production sites, and the per-site cache middleware caches whole pages for anonymous visitors.",
    "Sessions. The session framework stores arbitrary data per visitor on the server side and sends "
    "only a cookie holding the session key. Sessions can live in the database, in the cache, in files "
    "or in signed cookies. Flushing the session on logout removes the data and a new key is created, "
    "so a stolen key cannot be reused after the visitor signs out.",
    "Email. Sending email uses send_mail with a subject, a message, a sender and a list of recipients. "
    "The SMTP backend talks to the mail server named by EMAIL_HOST and EMAIL_PORT; the console backend "
    "prints messages for development and the locmem backend keeps them in a list for tests. "
    "EmailMessage objects add attachments, headers and alternatives such as HTML parts.",
    "Signals. Signals let decoupled applications get notified when actions occur elsewhere. A receiver "
    "is a function connected to a signal such as post_save or request_finished; the sender argument "
    "limits which model's saves reach it. Connect receivers in the ready method of an application "
    "configuration so they are registered exactly once when the project starts.",
    "Logging. Django configures Python's logging module through the LOGGING setting, a dictConfig "
    "dictionary of loggers, handlers, filters and formatters. The django.request logger reports server "
    "errors, mail_admins sends them to the ADMINS by email, and the django.db.backends logger shows "
    "every SQL query when DEBUG is on, which helps to find slow pages during development.",
    "Pagination. The Paginator class splits a list or a queryset into pages of a fixed size. A view "
    "asks for a page number from the query string, and get_page returns the last page for a number "
    "that is too large and the first for one that is not a number, so templates can always render "
    "previous and next links around the current page without extra checks.",
]


def _guide(release: str, year: int, edit: tuple[str, str] | None = None):
    text = "\n\n".join(GUIDE_PARAGRAPHS)
    if edit:
        text = text.replace(*edit)
    return replace(
        BIKE,
        external_id=f"{release}/topics/guide",
        title="Guide",
        published_at=datetime(year, 4, 1, tzinfo=UTC),
        text=text,
    )


@pytest.fixture
def three_releases(tenant, django_capture_on_commit_callbacks):
    """A four-section guide in three releases, one source each (a three-member cluster), plus
    unrelated pages; the near-duplicate task runs on commit as in production."""
    releases = [
        ("3.2", 2021, None),
        ("4.2", 2023, ("Memcached and Redis", "Memcached, Redis and Valkey")),
        ("5.2", 2025, ("send_mail with a subject", "send_mail or its asynchronous twin with a subject")),
    ]
    for release, year, edit in releases:
        source = SourceFactory(tenant=tenant, name=f"django-{release}")
        extra = [BIKE] if release == "5.2" else []
        with django_capture_on_commit_callbacks(execute=True):
            documents_ingest(tenant=tenant, source=source, documents=[_guide(release, year, edit), *extra])
    return tenant


def _nearest_one_by_one(*, tenant_id, chunk_id, version_ids, condition, params):
    """The collapse step's former per-result query (before batching), kept here as the reference."""
    from django.db import connection
    from psycopg import sql

    query = sql.SQL(
        """
        SELECT c.version_id, c.id FROM knowledge_chunk c, knowledge_chunk q
        WHERE q.id = %(nd_chunk)s AND q.tenant_id = %(nd_tenant)s
          AND c.tenant_id = %(nd_tenant)s AND c.version_id = ANY(%(nd_versions)s::bigint[])
          AND c.embedder = q.embedder AND {condition}
        ORDER BY array_position(%(nd_versions)s::bigint[], c.version_id), c.embedding <=> q.embedding, c.ordinal
        LIMIT 1
        """
    ).format(condition=condition)
    with connection.cursor() as cursor:
        cursor.execute(query, {**params, "nd_chunk": chunk_id, "nd_tenant": tenant_id, "nd_versions": version_ids})
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def test_the_batched_nearest_chunk_query_finds_what_the_per_result_query_found(three_releases):
    from knowledge.dedup.selectors import chunks_nearest_in_versions
    from knowledge.models import Chunk
    from retrieval.filters import RetrievalFilter

    tenant = three_releases
    chunks = list(Chunk.objects.for_tenant(tenant).select_related("version__document").order_by("pk"))
    by_release = {}
    for chunk in chunks:
        by_release.setdefault(chunk.version.document.external_id, []).append(chunk)
    assert all(len(by_release[f"{r}/topics/guide"]) >= 3 for r in ("3.2", "4.2", "5.2"))
    version = {r: by_release[f"{r}/topics/guide"][0].version_id for r in ("3.2", "4.2", "5.2")}
    wanted = {c.pk: [version["5.2"], version["4.2"]] for c in by_release["3.2/topics/guide"]}
    wanted |= {c.pk: [version["5.2"]] for c in by_release["4.2/topics/guide"]}
    newest_source = tenant.sources.get(name="django-5.2")
    filters = [
        RetrievalFilter.for_tenant(tenant),
        # Without the newest release's source, the 3.2 chunks fall back to 4.2 and the 4.2 chunks find nothing.
        RetrievalFilter.for_tenant(tenant, source_ids=[s.pk for s in tenant.sources.exclude(pk=newest_source.pk)]),
    ]
    for where in filters:
        condition, params = where.chunk_condition("c"), where.params()
        batched = chunks_nearest_in_versions(tenant=tenant, wanted=wanted, condition=condition, params=params)
        one_by_one = {
            chunk_id: found
            for chunk_id, versions in wanted.items()
            if (
                found := _nearest_one_by_one(
                    tenant_id=tenant.pk, chunk_id=chunk_id, version_ids=versions, condition=condition, params=params
                )
            )
        }
        assert batched == one_by_one
    assert {v for v, _ in batched.values()} == {version["4.2"]}
    # Without a filter every old chunk goes to the newest release, and an unchanged section to its own copy.
    unfiltered = chunks_nearest_in_versions(tenant=tenant, wanted=wanted)
    assert {v for v, _ in unfiltered.values()} == {version["5.2"]}
    newest = {c.text: c.pk for c in by_release["5.2/topics/guide"]}
    unchanged = [c for c in by_release["3.2/topics/guide"] if c.text in newest]
    assert unchanged and all(unfiltered[c.pk][1] == newest[c.text] for c in unchanged)


def test_collapsing_several_results_costs_one_nearest_chunk_query(three_releases):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    question = "cache backends, sessions, sending email and signals"
    kept = chunk_search(AnswerRequest(question=question, k=10, collapse=False), tenant=three_releases).results
    old = [r for r in kept if not r.chunk.version.document.external_id.startswith("5.2/")]
    assert len(old) >= 2
    with CaptureQueriesContext(connection) as queries:
        collapsed = chunk_search(AnswerRequest(question=question, k=10), tenant=three_releases).results
    assert {r.chunk.version.document.external_id for r in collapsed} <= {"5.2/topics/guide", "howto/bike-tyre"}
    nearest = [q for q in queries.captured_queries if "DISTINCT ON (w.chunk_id)" in q["sql"]]
    assert len(nearest) == 1
