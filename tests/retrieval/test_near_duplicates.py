"""Retrieval over duplicates: one result per page (the freshest copy), with where else it appears."""

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from core.errors import InvalidInput
from knowledge.dedup.models import NearDuplicateMember
from knowledge.services import documents_ingest
from retrieval.pipeline import pipeline_answer, pipeline_spec
from retrieval.search import chunk_search
from tests.api.conftest import client_for
from tests.conftest import BIKE
from tests.factories import MembershipFactory, SourceFactory
from tests.knowledge.test_near_duplicates import two_releases  # noqa: F401

QUESTION = "Which PostgreSQL versions does Django support?"


def documents(results) -> list[str]:
    return [r.chunk.version.document.external_id for r in results]


def test_search_keeps_only_the_newer_release_and_lists_the_older_as_near_duplicate(two_releases):  # noqa: F811
    results = chunk_search(tenant=two_releases, query=QUESTION, k=5).results
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
    results = chunk_search(tenant=two_releases, query=QUESTION, k=5, options={"collapse": False}).results
    assert {"5.2/ref/databases", "4.2/ref/databases"} <= set(documents(results))


def test_the_tenant_setting_turns_collapsing_off_and_a_request_turns_it_back_on(two_releases):  # noqa: F811
    two_releases.retrieval_config = {"collapse_near_duplicates": False}
    two_releases.save(update_fields=["retrieval_config"])
    assert {"5.2/ref/databases", "4.2/ref/databases"} <= set(
        documents(chunk_search(tenant=two_releases, query=QUESTION, k=5).results)
    )
    collapsed = chunk_search(tenant=two_releases, query=QUESTION, k=5, options={"collapse": True}).results
    assert "4.2/ref/databases" not in documents(collapsed)


def test_a_bad_collapse_setting_is_refused_by_name(tenant):
    with pytest.raises(InvalidInput, match="collapse_near_duplicates"):
        pipeline_spec(tenant=tenant, overrides={"collapse_near_duplicates": "yes"})
    with pytest.raises(InvalidInput, match="near_duplicate_threshold"):
        pipeline_spec(tenant=tenant, overrides={"near_duplicate_threshold": 0.2})


def test_an_older_copy_is_replaced_by_the_newer_release_even_when_only_the_older_was_retrieved(two_releases):  # noqa: F811
    kept = chunk_search(tenant=two_releases, query="PostgreSQL 12", k=1, mode="lexical", options={"collapse": False})
    assert documents(kept.results) == ["4.2/ref/databases"]  # only the old release says "12"
    collapsed = chunk_search(tenant=two_releases, query="PostgreSQL 12", k=1, mode="lexical").results
    assert documents(collapsed) == ["5.2/ref/databases"]
    assert collapsed[0].components["near_duplicates"] == {"replaced_chunk_id": kept.results[0].chunk.pk}


def test_a_source_filter_is_respected_when_collapsing(two_releases):  # noqa: F811
    old = two_releases.sources.get(name="django-4.2")
    results = chunk_search(tenant=two_releases, query=QUESTION, k=5, source_ids=[old.pk]).results
    assert "4.2/ref/databases" in documents(results) and "5.2/ref/databases" not in documents(results)


def test_an_exact_duplicate_is_one_result_shown_at_its_freshest_place_with_also_in(tenant):
    first = SourceFactory(tenant=tenant, name="wiki")
    mirror = SourceFactory(tenant=tenant, name="mirror")
    documents_ingest(
        tenant=tenant, source=first, documents=[replace(BIKE, published_at=datetime(2020, 1, 1, tzinfo=UTC))]
    )
    copy = replace(BIKE, external_id="mirror/bike", published_at=datetime(2024, 1, 1, tzinfo=UTC))
    documents_ingest(tenant=tenant, source=mirror, documents=[copy])
    results = chunk_search(tenant=tenant, query="patch the inner tube puncture", k=5).results
    assert len(results) == 1
    data = results[0].as_dict()
    assert (data["document"], data["source"]) == ("mirror/bike", "mirror")
    assert [(p["document"], p["source"]) for p in data["also_in"]] == [("howto/bike-tyre", "wiki")]
    assert BIKE.text.split("\n\n")[1][:40] in data["text"]


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
    run = pipeline_answer(tenant=two_releases, question=QUESTION, use_llm=False, trace=False)
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
    run = pipeline_answer(tenant=corpus, question="How long do I boil spaghetti?", use_llm=False, trace=False)
    assert "near_duplicates" not in [s.stage for s in run.steps]


def test_a_near_duplicate_the_asker_may_not_see_is_never_listed(two_releases):  # noqa: F811
    from knowledge.access import access_group_save, access_rule_grant

    member = MembershipFactory(tenant=two_releases, role="member").user
    insider = MembershipFactory(tenant=two_releases, role="member").user
    group = access_group_save(tenant=two_releases, name="archivists", members=[insider])
    access_rule_grant(tenant=two_releases, source=two_releases.sources.get(name="django-4.2"), group=group)

    def listed(user):
        results = chunk_search(tenant=two_releases, query=QUESTION, k=5, user=user).results
        top = next(r for r in results if r.chunk.version.document.external_id == "5.2/ref/databases")
        return [d["document"] for d in top.as_dict()["near_duplicates"] or []]

    assert listed(insider) == ["4.2/ref/databases"]
    assert listed(member) == []
