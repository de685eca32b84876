"""Row-level security holds even where the application's tenant filter does not (core.rls).

Against the real embedded PostgreSQL: the role ``kb_app`` is a real non-superuser role created by
migration ``knowledge.0011``; the test database's tables belong to the superuser that ran it.
"""

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from django.test import Client

from core.models import Membership
from core.rls import APP_ROLE, rls_bypass, rls_request_bind, rls_request_scope, tenant_context
from core.tenancy import TenantScopedQuerySet
from knowledge.models import Chunk, Document, Source
from retrieval.filters import RetrievalFilter
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, UserFactory

# Tenant-owned tables without a tenant_id column: their policy looks the parent row up.
CHILD_TABLES = {
    "retrieval_turn",
    "quality_judgment",
    "people_profile",
}


def tenant_tables() -> set[str]:
    """Every model table with a ``tenant_id`` column, from the models."""
    return {
        model._meta.db_table
        for model in apps.get_models()
        if any(field.column == "tenant_id" for field in model._meta.concrete_fields)
    }


def chunk_tenants() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tenant_id FROM knowledge_chunk")
        return {row[0] for row in cursor.fetchall()}


def session_settings() -> tuple[str, str | None]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user, current_setting('app.tenant_id', true)")
        return cursor.fetchone()


def test_the_app_role_is_a_real_role_that_is_no_superuser_owns_no_table_and_cannot_bypass_rls(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", [APP_ROLE])
        assert cursor.fetchone() == (False, False)
        cursor.execute("SELECT count(*) FROM pg_tables WHERE tableowner = %s", [APP_ROLE])
        assert cursor.fetchone()[0] == 0


def test_every_tenant_owned_table_has_row_level_security_and_the_tenant_policy(db):
    tables = tenant_tables() | CHILD_TABLES
    assert {"knowledge_chunk", "knowledge_document", "retrieval_trace", "quality_judgmentlist"} <= tables
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_policies p ON p.tablename = c.relname"
            " WHERE c.relrowsecurity AND p.policyname = 'kb_tenant_isolation' AND c.relname = ANY(%s)",
            [sorted(tables)],
        )
        protected = {row[0] for row in cursor.fetchall()}
    assert protected == tables


def test_versions_and_trace_steps_are_isolated_by_their_own_tenant_column_not_a_parent_lookup(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename, qual FROM pg_policies WHERE policyname = 'kb_tenant_isolation'"
            " AND tablename IN ('knowledge_documentversion', 'retrieval_tracestep')"
        )
        policies = dict(cursor.fetchall())
    assert set(policies) == {"knowledge_documentversion", "retrieval_tracestep"}
    assert all(qual.startswith("(tenant_id = ") and "EXISTS" not in qual for qual in policies.values())


def test_a_raw_query_without_a_tenant_filter_sees_only_the_contexts_tenant(corpus, other_tenant_corpus):
    assert chunk_tenants() == {corpus.pk, other_tenant_corpus.pk}  # the owner sees both
    with tenant_context(corpus.pk):
        assert chunk_tenants() == {corpus.pk}
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM knowledge_posting WHERE tenant_id = %s", [other_tenant_corpus.pk])
            assert cursor.fetchone()[0] == 0
    with tenant_context(other_tenant_corpus.pk):
        assert chunk_tenants() == {other_tenant_corpus.pk}


def test_orm_queries_without_for_tenant_see_only_the_contexts_tenant(corpus, other_tenant_corpus):
    with tenant_context(corpus):
        assert {d.tenant_id for d in Document.objects.all()} == {corpus.pk}
        assert set(Chunk.objects.values_list("tenant_id", flat=True)) == {corpus.pk}
        # A child table without tenant_id follows its parent's policy.
        from knowledge.models import DocumentVersion

        assert {v.document.tenant_id for v in DocumentVersion.objects.select_related("document")} == {corpus.pk}
        assert not Document.objects.filter(tenant=other_tenant_corpus).exists()


def test_a_request_scope_sees_no_tenant_row_until_its_tenant_is_bound(corpus, other_tenant_corpus):
    with rls_request_scope():
        assert Document.objects.count() == 0
        assert chunk_tenants() == set()
        rls_request_bind(tenant_id=corpus.pk)
        assert {d.tenant_id for d in Document.objects.all()} == {corpus.pk}
        with rls_bypass():
            assert Document.objects.count() == 4


def test_a_bound_request_reads_its_users_own_memberships_in_other_tenants_but_no_one_elses(corpus, other_tenant_corpus):
    mine_elsewhere = MembershipFactory(tenant=other_tenant_corpus)
    someone_elses = MembershipFactory(tenant=other_tenant_corpus)
    here = MembershipFactory(tenant=corpus)
    with rls_request_scope():
        rls_request_bind(tenant_id=corpus.pk, user_id=mine_elsewhere.user_id)
        visible = set(Membership.objects.values_list("pk", flat=True))
        assert {mine_elsewhere.pk, here.pk} <= visible
        assert someone_elses.pk not in visible
        assert Membership.objects.filter(pk=mine_elsewhere.pk).update(role=Membership.Role.ADMIN) == 0


def test_writing_a_row_into_another_tenant_is_refused(corpus, other_tenant_corpus):
    other_source = Source.objects.get(tenant=other_tenant_corpus)
    with tenant_context(corpus), pytest.raises(ProgrammingError, match="row-level security"):
        with transaction.atomic():
            Document.objects.create(tenant=other_tenant_corpus, source=other_source, external_id="x", title="x")


def test_an_update_or_delete_without_a_tenant_filter_touches_only_the_contexts_tenant(corpus, other_tenant_corpus):
    with tenant_context(corpus):
        assert Document.objects.update(title="renamed") == 3
    assert Document.objects.get(tenant=other_tenant_corpus).title == "Secret bicycle tyre notes"


def test_leaving_a_context_inside_a_transaction_restores_the_owners_view(corpus, other_tenant_corpus):
    with transaction.atomic():
        with tenant_context(corpus):
            assert Document.objects.count() == 3
        assert Document.objects.count() == 4
        assert session_settings()[0] != APP_ROLE


def test_a_savepoint_rollback_does_not_drop_the_context(corpus, other_tenant_corpus):
    with tenant_context(corpus):
        try:
            with transaction.atomic():
                assert Document.objects.count() == 3  # settings applied inside the savepoint
                raise RuntimeError
        except RuntimeError:
            pass
        assert Document.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_the_settings_are_transaction_local_and_never_outlive_a_statement_in_autocommit(corpus, other_tenant_corpus):
    with tenant_context(corpus):
        assert session_settings() == (APP_ROLE, str(corpus.pk))
        assert Document.objects.count() == 3
    assert session_settings()[0] != APP_ROLE
    assert session_settings()[1] in (None, "")
    assert Document.objects.count() == 4


def member_of(tenant):
    return client_for(MembershipFactory(tenant=tenant).user)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("atomic_requests", [False, True])
def test_requests_of_two_tenants_on_one_connection_never_see_each_other(
    corpus, other_tenant_corpus, monkeypatch, atomic_requests
):
    """The test client keeps one connection across requests, as a pool or CONN_MAX_AGE would."""
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", atomic_requests)
    a, b = member_of(corpus), member_of(other_tenant_corpus)
    for _ in range(2):
        assert a.get("/api/v1/documents/").json()["count"] == 3
        assert session_settings()[0] != APP_ROLE
        assert [d["external_id"] for d in b.get("/api/v1/documents/").json()["results"]] == ["secret/bike"]
        assert session_settings()[1] in (None, "")


# ---- the test build without the application's tenant filter -----------------------------------


@pytest.fixture
def tenant_filter_removed(monkeypatch, other_tenant_corpus):
    """A deliberately broken build: ``for_tenant`` keeps every row, and the retrievers' SQL
    targets the OTHER tenant's id wherever it names a tenant (BM25 postings and statistics,
    the dense scan's condition)."""
    monkeypatch.setattr(TenantScopedQuerySet, "for_tenant", lambda self, tenant: self)
    params = RetrievalFilter.params
    monkeypatch.setattr(
        RetrievalFilter, "params", lambda self: {**params(self), "filter_tenant": other_tenant_corpus.pk}
    )


def leaks(client) -> list[str]:
    """What of the other tenant (``secret/...``) search, ask and the document API show."""
    found = []
    for mode in ("hybrid", "lexical", "dense"):
        response = client.post(
            "/api/v1/search/", {"query": "secret bicycle tyre puncture patch", "k": 50, "mode": mode}, format="json"
        )
        assert response.status_code == 200, response.content
        found += [r["document"] for r in response.json()["results"] if r["document"].startswith("secret/")]
    response = client.post(
        "/api/v1/ask/",
        {"question": "What is our secret for patching a tyre?", "k": 5, "extractive": True},
        format="json",
    )
    assert response.status_code == 200, response.content
    found += [c["document"] for c in response.json()["citations"] if c["document"].startswith("secret/")]
    found += [
        d["external_id"]
        for d in client.get("/api/v1/documents/?limit=100").json()["results"]
        if d["external_id"].startswith("secret/")
    ]
    secret = Document.objects.get(external_id="secret/bike")
    if client.get(f"/api/v1/documents/{secret.pk}/").status_code == 200:
        found.append("detail")
    return found


def test_without_the_tenant_filter_rls_still_returns_nothing_of_another_tenant(
    corpus, other_tenant_corpus, tenant_filter_removed
):
    assert leaks(member_of(corpus)) == []


def test_without_the_tenant_filter_and_without_rls_the_test_build_does_leak(
    corpus, other_tenant_corpus, tenant_filter_removed, settings
):
    """The control: the broken build above is really broken, so the test before can fail."""
    settings.KB_RLS = False
    assert "detail" in leaks(member_of(corpus))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("rls", [True, False])
def test_without_the_tenant_filter_a_streamed_answer_retrieves_nothing_of_another_tenant_unless_rls_is_off(
    corpus, other_tenant_corpus, tenant_filter_removed, settings, monkeypatch, rls
):
    """The streamed run happens in a worker thread on its own connection: the scope follows it.
    The broken build's retrievers ask for the other tenant's chunks only, so any count is a leak."""
    from tests.api.test_ask_stream import sse_events

    settings.KB_RLS = rls
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: None)
    response = member_of(corpus).post(
        "/api/v1/ask/stream/", {"question": "What is our secret for patching a tyre?", "k": 5}, format="json"
    )
    events = sse_events(response)
    assert [event for event, _ in events].count("answer") == 1, events
    retrieve = next(data for event, data in events if event == "step" and data["stage"] == "retrieve")
    leaked = sum(retrieve["summary"]["counts"].values())
    assert (leaked > 0) is (not rls), retrieve


def test_a_superuser_admin_page_lists_every_tenants_documents(corpus, other_tenant_corpus):
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    page = client.get("/admin/knowledge/document/")
    assert page.status_code == 200
    assert b"Secret bicycle tyre notes" in page.content and b"Cooking pasta" in page.content


def test_a_tenant_admins_admin_page_lists_only_their_tenants_documents(corpus, other_tenant_corpus):
    membership = MembershipFactory(tenant=corpus, role=Membership.Role.ADMIN)
    membership.user.is_staff = True
    membership.user.is_superuser = False
    membership.user.save()
    from django.contrib.auth.models import Permission

    membership.user.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    client = Client()
    client.force_login(membership.user)
    page = client.get("/admin/knowledge/document/")
    assert page.status_code == 200
    assert b"Cooking pasta" in page.content and b"Secret bicycle tyre notes" not in page.content
