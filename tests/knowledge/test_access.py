"""Groups and access rules: restricted sources and documents are hidden inside retrieval's SQL and
from every document read, for everyone but the users and groups they are granted to."""

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction

from core.errors import InvalidInput, PermissionDenied
from knowledge.access import access_group_save, access_rule_grant, access_rule_revoke, access_scope_get
from knowledge.selectors import document_list, source_overview
from retrieval.filters import retrieval_filter
from retrieval.pipeline import pipeline_retrieve
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.acl_world import tenant_world
from tests.api.conftest import client_for
from tests.factories import AccessRuleFactory, MembershipFactory

QUERY = "bicycle tyre puncture patch glue handbook note"


@pytest.fixture
def world(db):
    return tenant_world("acme")


def found(world, user, mode="hybrid") -> set[str]:
    results = chunk_search(AnswerRequest(question=QUERY, k=50, mode=mode), tenant=world.tenant, user=user).results
    by_id = {d.pk: key for key, d in world.documents.items()}
    return {by_id[r.chunk.version.document_id] for r in results}


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "dense"])
def test_each_retriever_returns_only_the_documents_the_user_may_see(world, mode):
    for who in ("viewer", "member", "editor", "board", "granted", "admin", "owner"):
        assert found(world, world.users[who], mode) == world.visible_keys(who), (who, mode)


def test_without_a_user_retrieval_applies_no_rules(world):
    assert found(world, None) == {"public", "board", "private"}


def test_a_tenant_without_rules_adds_no_condition_to_the_sql(db, corpus, member):
    where = retrieval_filter(tenant=corpus, user=member)
    assert where.access is not None and not where.narrows_tenant
    assert "access_denied" not in where.chunk_condition("c").as_string(None)


def test_restricting_rules_narrow_the_filter_for_both_retrievers(world):
    where = retrieval_filter(tenant=world.tenant, user=world.users["member"])
    assert where.narrows_tenant
    assert "access_denied" in where.chunk_condition("c").as_string(None)
    assert where.summary()["access"] == {"user": world.users["member"].pk, "groups": [], "restricted": True}
    assert "NOT IN" in where.posting_condition("p").as_string(None)  # BM25: the hidden chunks only
    assert not retrieval_filter(tenant=world.tenant, user=world.users["admin"]).narrows_tenant


def test_a_user_granted_every_restricted_document_gets_no_condition(world):
    world.tenant.access_groups.get(name="board").members.add(world.users["granted"])
    assert not retrieval_filter(tenant=world.tenant, user=world.users["granted"]).narrows_tenant


def test_a_new_rule_or_group_member_takes_effect_on_the_next_query(world):
    member = world.users["member"]
    assert found(world, member) == {"public"}
    group = world.tenant.access_groups.get(name="board")
    group.members.add(member)
    assert found(world, member) == {"public", "board"}
    rule = access_rule_grant(tenant=world.tenant, document=world.documents["public"], user=world.users["granted"])
    assert found(world, member) == {"board"}  # public is now restricted to "granted"
    access_rule_revoke(tenant=world.tenant, rule_id=rule.pk)
    assert found(world, member) == {"public", "board"}


def test_a_document_rule_narrows_its_sources_rule(world):
    board_doc = world.documents["board"]
    access_rule_grant(tenant=world.tenant, document=board_doc, user=world.users["granted"])
    assert found(world, world.users["board"]) == {"public"}  # in the group, but not granted the document
    world.tenant.access_groups.get(name="board").members.add(world.users["granted"])
    assert found(world, world.users["granted"]) == {"public", "board", "private"}


def test_the_trace_of_a_retrieval_records_the_access_scope(world):
    run = pipeline_retrieve(
        AnswerRequest(question=QUERY, pipeline="simple"), tenant=world.tenant, user=world.users["board"]
    )
    retrieve = next(step for step in run.steps if step.stage == "retrieve")
    group_id = world.tenant.access_groups.get().pk
    assert retrieve.summary["filter"]["access"] == {
        "user": world.users["board"].pk,
        "groups": [group_id],
        "restricted": True,
    }


def test_someone_outside_the_tenant_may_not_retrieve_from_it(world, db):
    stranger = MembershipFactory().user
    with pytest.raises(PermissionDenied):
        chunk_search(AnswerRequest(question=QUERY), tenant=world.tenant, user=stranger)


def test_document_lists_and_source_counts_follow_the_rules(world):
    member, board = world.users["member"], world.users["board"]
    assert {d.external_id.split("/")[0] for d in document_list(tenant=world.tenant, user=member)} == {"public"}
    assert {d.external_id.split("/")[0] for d in document_list(tenant=world.tenant, user=board)} == {"public", "board"}
    overview = {s.name: s.document_count for s in source_overview(tenant=world.tenant, user=member)}
    assert overview == {"handbook": 1}  # the board source is hidden, the private document not counted
    overview = {s.name: s.document_count for s in source_overview(tenant=world.tenant, user=world.users["owner"])}
    assert overview == {"board": 1, "handbook": 2}


def test_the_api_hides_restricted_documents_and_sources_from_a_member(world):
    client = client_for(world.users["member"])
    listed = {d["external_id"] for d in client.get("/api/v1/documents/").json()["results"]}
    assert listed == {world.documents["public"].external_id}
    for key in ("board", "private"):
        assert client.get(f"/api/v1/documents/{world.documents[key].pk}/").status_code == 404
    response = client.post("/api/v1/search/", {"query": QUERY, "sources": ["board"]}, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_source"
    granted = client_for(world.users["granted"])
    assert granted.get(f"/api/v1/documents/{world.documents['private'].pk}/").status_code == 200


def test_an_editor_cannot_delete_a_document_they_may_not_see(world):
    response = client_for(world.users["editor"]).delete(f"/api/v1/documents/{world.documents['board'].pk}/")
    assert response.status_code == 404
    assert world.tenant.documents.filter(pk=world.documents["board"].pk).exists()


def test_another_members_trace_is_hidden_but_an_admin_sees_it(world):
    asked = client_for(world.users["board"]).post(
        "/api/v1/ask/", {"question": QUERY, "extractive": True}, format="json"
    )
    trace_id = asked.json()["trace_id"]
    assert trace_id
    assert client_for(world.users["member"]).get(f"/api/v1/traces/{trace_id}/").status_code == 404
    feedback = client_for(world.users["member"]).post(
        f"/api/v1/traces/{trace_id}/feedback/", {"rating": "up"}, format="json"
    )
    assert feedback.status_code == 404
    assert client_for(world.users["admin"]).get(f"/api/v1/traces/{trace_id}/").status_code == 200


def test_a_rule_grants_exactly_one_target_to_exactly_one_grantee(world):
    with pytest.raises(InvalidInput):
        access_rule_grant(
            tenant=world.tenant,
            source=world.sources["board"],
            document=world.documents["public"],
            user=world.users["member"],
        )
    with pytest.raises(InvalidInput):
        access_rule_grant(tenant=world.tenant, source=world.sources["board"])
    with pytest.raises(IntegrityError), transaction.atomic():
        AccessRuleFactory(source=world.sources["board"], group=None)  # no grantee


def test_groups_and_rules_stay_within_their_tenant(world, db):
    other = tenant_world("other")
    with pytest.raises(InvalidInput):
        access_group_save(tenant=world.tenant, name="mixed", members=[other.users["member"]])
    with pytest.raises(InvalidInput):
        access_rule_grant(tenant=world.tenant, source=other.sources["board"], user=world.users["member"])
    with pytest.raises(InvalidInput):
        access_rule_grant(tenant=world.tenant, source=world.sources["board"], user=other.users["member"])
    with pytest.raises(InvalidInput):
        access_group_save(tenant=world.tenant, name="board")  # taken


def test_owners_admins_and_superusers_see_everything_others_are_bound(world, django_user_model):
    scopes = {who: access_scope_get(tenant=world.tenant, user=u) for who, u in world.users.items()}
    assert {who for who, s in scopes.items() if s.sees_all} == {"owner", "admin"}
    root = django_user_model.objects.create_superuser("root", password="pass-word-123")
    assert access_scope_get(tenant=world.tenant, user=root).sees_all


def test_the_search_and_ask_commands_apply_a_users_rules(world):
    out = io.StringIO()
    call_command("search", QUERY, "--tenant", "acme", "--json", "--user", world.users["member"].username, stdout=out)
    documents = {r["document"] for r in json.loads(out.getvalue())["results"]}
    assert documents == {world.documents["public"].external_id}
    out = io.StringIO()
    call_command("ask", QUERY, "--tenant", "acme", "--json", "--extractive", "--user", "acme-board", stdout=out)
    cited = {c["document"] for c in json.loads(out.getvalue())["citations"]}
    assert cited <= {world.documents["public"].external_id, world.documents["board"].external_id}
    assert world.documents["board"].external_id in cited
    with pytest.raises(CommandError, match="No member"):
        call_command("search", QUERY, "--tenant", "acme", "--user", "nobody", stdout=io.StringIO())
