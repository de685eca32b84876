"""Search and ask from a real streaming replica (``core.replicas``).

The module starts a hot standby of the test's embedded PostgreSQL with ``pg_basebackup -R``
(``scripts/replica_postgres.py``) on a socket and port of its own, and adds it as the database
alias ``replica1``. The tests are transactional: what they write is committed on the primary and
streamed to the replica.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse

from core.models import Tenant
from core.replicas import (
    read_alias,
    replica_choose,
    replica_reads,
    replica_status,
    replica_statuses_forget,
    replica_write_mark,
)
from core.rls import tenant_context
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk, Document, Source
from knowledge.services import documents_ingest
from knowledge.vector_index import tenant_vector_index_ensure
from people import asking
from people.models import Conversation
from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from tests.conftest import BIKE, PASTA, TAXES
from tests.factories import AccessRuleFactory, MembershipFactory, SourceFactory, TenantFactory, UserFactory

ALIAS = "replica1"
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", ALIAS])

_spec = importlib.util.spec_from_file_location(
    "replica_postgres", Path(settings.BASE_DIR) / "scripts" / "replica_postgres.py"
)
replica_postgres = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replica_postgres)

KAYAK = ReadDocument(
    external_id="howto/kayak",
    title="Rolling a kayak",
    text="Rolling a kayak\n\nTuck forward, sweep the paddle out wide and flick the hips to right the kayak.",
)


@pytest.fixture(scope="module")
def replica(django_db_setup, django_db_blocker):
    """A streaming replica of the test database server, as the alias ``replica1``; stopped after the module."""
    primary = connections["default"].settings_dict
    conninfo = f"host={primary['HOST']} user={primary['USER']} dbname={primary['NAME']}"
    if primary["PORT"]:
        conninfo += f" port={primary['PORT']}"
    directory = Path(tempfile.mkdtemp(prefix="kb-replica-"))
    port = _free_port()
    with django_db_blocker.unblock():
        replica_postgres.replica_start(directory, primary=conninfo, port=port, socket=True)
    connections.settings[ALIAS] = {**primary, "HOST": str(directory), "PORT": str(port), "TEST": {"MIRROR": "default"}}
    replica_statuses_forget()
    with override_settings(KB_REPLICA_ALIASES=[ALIAS], KB_REPLICA_CHECK_S=0):
        yield directory, port
    connections[ALIAS].close()
    del connections.settings[ALIAS]
    replica_postgres.replica_stop(directory)
    replica_statuses_forget()
    shutil.rmtree(directory, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _caught_up(timeout: float = 10.0) -> None:
    """Wait until the replica has replayed everything the primary has written."""
    deadline = time.monotonic() + timeout
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()")
        target = cursor.fetchone()[0]
    while time.monotonic() < deadline:
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target])
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("The replica did not catch up.")


@contextmanager
def _replay_paused():
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT pg_wal_replay_pause()")
    try:
        yield
    finally:
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("SELECT pg_wal_replay_resume()")


@pytest.fixture
def corpus(replica):
    tenant = TenantFactory()
    documents_ingest(
        tenant=tenant, source=SourceFactory(tenant=tenant, name="handbook"), documents=[PASTA, BIKE, TAXES]
    )
    _caught_up()
    return tenant


def _titles(response) -> list[str]:
    return [r.chunk.version.document.title for r in response.results]


def test_a_search_reads_from_the_replica_and_finds_what_the_primary_has(corpus):
    with (
        CaptureQueriesContext(connections[ALIAS]) as on_replica,
        CaptureQueriesContext(connections["default"]) as on_primary,
    ):
        response = chunk_search(
            AnswerRequest(question="how do I patch a bicycle tyre puncture", k=3, mode="lexical"), tenant=corpus
        )
    assert _titles(response)[0] == "Fixing a flat bicycle tyre"
    assert any("knowledge_chunk" in q["sql"] or "knowledge_posting" in q["sql"] for q in on_replica.captured_queries)
    assert not any("knowledge_posting" in q["sql"] for q in on_primary.captured_queries)


def test_search_results_are_the_same_on_the_replica_and_the_primary(corpus):
    for mode in ("hybrid", "dense", "lexical"):
        replicated = chunk_search(AnswerRequest(question="salted water for spaghetti", k=3, mode=mode), tenant=corpus)
        with override_settings(KB_REPLICA_ALIASES=[]):
            primary = chunk_search(AnswerRequest(question="salted water for spaghetti", k=3, mode=mode), tenant=corpus)
        assert [r.chunk.pk for r in replicated.results] == [r.chunk.pk for r in primary.results]


def test_the_tenants_hnsw_index_is_used_on_the_replica(corpus):
    embedder = Chunk.objects.filter(tenant=corpus).values_list("embedder", flat=True).first()
    name = tenant_vector_index_ensure(tenant_id=corpus.pk, embedder_key=embedder, min_chunks=1)
    _caught_up()
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery(), EXISTS (SELECT 1 FROM pg_class WHERE relname = %s)", [name])
        assert cursor.fetchone() == (True, True)
    scans = "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = %s"
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(scans, [name])
        before = cursor.fetchone()[0]
    response = chunk_search(AnswerRequest(question="expense receipts", k=2, mode="dense"), tenant=corpus)
    assert _titles(response)[0] == "Expense reports"
    with connections[ALIAS].cursor() as cursor:  # the search ran on this thread's replica connection
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(scans, [name])
        assert cursor.fetchone()[0] > before  # the replica's own statistics: its index was scanned


def test_row_level_security_and_the_access_filter_hold_on_the_replica(corpus):
    member = MembershipFactory(tenant=corpus).user
    secret = SourceFactory(tenant=corpus, name="board")
    documents_ingest(tenant=corpus, source=secret, documents=[KAYAK])
    AccessRuleFactory(source=secret, user=UserFactory())  # granted to someone else only
    other = TenantFactory(slug="other")
    _caught_up()
    assert replica_choose(tenant_id=corpus.pk) == ALIAS
    as_member = chunk_search(
        AnswerRequest(question="rolling a kayak with the paddle", k=5, mode="lexical"), tenant=corpus, user=member
    )
    assert "Rolling a kayak" not in _titles(as_member)
    as_operator = chunk_search(
        AnswerRequest(question="rolling a kayak with the paddle", k=5, mode="lexical"), tenant=corpus
    )
    assert _titles(as_operator)[0] == "Rolling a kayak"
    # Row-level security: as kb_app bound to another tenant, the replica shows none of these chunks.
    with tenant_context(other.pk), connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM knowledge_chunk")
        assert cursor.fetchone()[0] == 0
    with tenant_context(corpus.pk), connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM knowledge_chunk")
        assert cursor.fetchone()[0] == Chunk.objects.filter(tenant=corpus).count() > 0


def test_writes_in_a_read_path_go_to_the_primary_and_pin_the_rest_of_it(corpus):
    seen = {}

    @replica_reads
    def read_then_write(*, tenant):
        seen["before"] = read_alias()
        seen["slug"] = Tenant.objects.get(pk=tenant.pk).slug
        Tenant.objects.filter(pk=tenant.pk).update(name="Renamed")
        seen["after"] = read_alias()
        seen["name"] = Tenant.objects.get(pk=tenant.pk).name

    read_then_write(tenant=corpus)
    assert seen == {"before": ALIAS, "slug": corpus.slug, "after": "default", "name": "Renamed"}


def test_an_answer_retrieves_from_the_replica_and_keeps_the_turn_on_the_primary(corpus):
    member = MembershipFactory(tenant=corpus).user
    with CaptureQueriesContext(connections[ALIAS]) as on_replica:
        run = asking.ask(AnswerRequest(question="How long do I cook pasta?", use_llm=False), tenant=corpus, user=member)
    assert run.turn == 1 and run.answer.citations
    assert any("knowledge_posting" in q["sql"] for q in on_replica.captured_queries)
    assert not any(q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE")) for q in on_replica.captured_queries)
    follow_up = asking.ask(
        AnswerRequest(question="And then?", conversation_id=run.conversation_id, use_llm=False),
        tenant=corpus,
        user=member,
    )
    assert follow_up.turn == 2


def test_a_member_who_just_ingested_reads_from_the_primary_until_the_replica_replays_it(corpus):
    with _replay_paused():
        documents_ingest(tenant=corpus, source=Source.objects.get(tenant=corpus), documents=[KAYAK])
        assert replica_choose(tenant_id=corpus.pk) is None  # behind the ingestion's mark
        response = chunk_search(AnswerRequest(question="rolling a kayak", k=3, mode="lexical"), tenant=corpus)
        assert _titles(response)[0] == "Rolling a kayak"  # from the primary
        other = TenantFactory(slug="elsewhere")
        with override_settings(KB_REPLICA_MAX_LAG_S=3600):
            assert replica_choose(tenant_id=other.pk) == ALIAS  # no write of theirs to wait for
    _caught_up()
    assert replica_choose(tenant_id=corpus.pk) == ALIAS


def test_a_members_own_change_is_read_from_the_primary_until_replayed(corpus):
    member = MembershipFactory(tenant=corpus).user
    with _replay_paused():
        Tenant.objects.filter(pk=corpus.pk).update(name="Changed")
        replica_write_mark(tenant_id=corpus.pk, user_id=member.pk)
        with override_settings(KB_REPLICA_MAX_LAG_S=3600):
            assert replica_choose(tenant_id=corpus.pk, user_id=member.pk) is None
            assert replica_choose(tenant_id=corpus.pk, user_id=None) == ALIAS
    _caught_up()
    assert replica_choose(tenant_id=corpus.pk, user_id=member.pk) == ALIAS


def test_a_replica_lagging_past_the_limit_is_skipped(corpus):
    with _replay_paused():
        TenantFactory(slug="written-meanwhile")
        time.sleep(0.3)
        with override_settings(KB_REPLICA_MAX_LAG_S=0.1):
            assert replica_status(ALIAS, fresh=True).lag_s > 0.1
            assert replica_choose() is None
        with override_settings(KB_REPLICA_MAX_LAG_S=3600):
            assert replica_choose() == ALIAS


def test_a_stopped_replica_falls_back_to_the_primary_without_an_error(corpus, replica):
    directory, port = replica
    assert replica_choose(tenant_id=corpus.pk) == ALIAS  # known as up from here on
    replica_postgres.replica_stop(directory)
    try:
        with override_settings(KB_REPLICA_CHECK_S=3600):  # still believed up: fails mid-search
            response = chunk_search(
                AnswerRequest(question="salted water for spaghetti", k=2, mode="lexical"), tenant=corpus
            )
        assert _titles(response)[0] == "Cooking pasta"
        assert replica_status(ALIAS).up is False
        response = chunk_search(AnswerRequest(question="bicycle tyre", k=2), tenant=corpus)
        assert _titles(response)[0] == "Fixing a flat bicycle tyre"
        replica_statuses_forget()  # checked again: still down, skipped
        assert replica_choose(tenant_id=corpus.pk) is None
    finally:
        primary = connections["default"].settings_dict
        conninfo = f"host={primary['HOST']} user={primary['USER']} dbname={primary['NAME']}"
        replica_postgres.replica_start(directory, primary=conninfo, port=port, socket=True)
        replica_statuses_forget()


def test_the_portals_document_page_reads_from_the_replica(corpus, client):
    member = MembershipFactory(tenant=corpus).user
    document = Document.objects.get(tenant=corpus, external_id=PASTA.external_id)
    client.force_login(member)
    with CaptureQueriesContext(connections[ALIAS]) as on_replica:
        response = client.get(reverse("portal:document", args=[document.pk]))
    assert response.status_code == 200 and b"rolling boil" in response.content
    assert any("knowledge_chunk" in q["sql"] for q in on_replica.captured_queries)


def test_a_members_change_in_the_portal_keeps_their_reads_on_the_primary_until_replayed(corpus, client):
    member = MembershipFactory(tenant=corpus).user
    conversation = Conversation.objects.create(tenant=corpus, user=member, title="Old question")
    client.force_login(member)
    _caught_up()
    with _replay_paused(), override_settings(KB_REPLICA_MAX_LAG_S=3600):
        response = client.post(reverse("portal:conversation-delete", args=[conversation.pk]))
        assert response.status_code < 400
        assert replica_choose(tenant_id=corpus.pk, user_id=member.pk) is None
        assert replica_choose(tenant_id=corpus.pk, user_id=None) == ALIAS  # others are not held back
        with CaptureQueriesContext(connections[ALIAS]) as on_replica:
            page = client.get(reverse("portal:conversations"))
        assert b"Old question" not in page.content
        assert not any("people_conversation" in q["sql"] for q in on_replica.captured_queries)
