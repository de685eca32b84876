"""Faults every service meets, through the product, for each of the six service connectors on its
sample (``tests/connectors/samples.py``): a revoked credential fails the run clearly and deletes
nothing; a 429 whose ``Retry-After`` is within the cap is waited out and the run finishes; a
``Retry-After`` over the cap (``MAX_RETRY_AFTER_S``, two minutes) ends the run, and the next sync
resumes, except with Notion, which waits the cap instead (docs/connectors.md, Notion's limits)."""

import time
from dataclasses import dataclass

import pytest

from knowledge.connectors.services import notion as notion_connector
from knowledge.models import Document
from knowledge.services.sync import source_sync
from tests.connectors.helpers import member, visible_titles
from tests.connectors.samples import SAMPLES
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db

ENDS_THE_RUN = "ends the run"  # the run fails saying so; the next sync resumes from its checkpoint
WAITS_THE_CAP = "waits the cap"  # the connector shortens the wait to MAX_RETRY_AFTER_S and goes on


@dataclass(frozen=True)
class Faults:
    """How one kind answers the faults: ``revoked_says``, words of the failed run's error when the
    service refuses the credential; ``long_wait``, what a ``Retry-After`` over the cap does
    (``ENDS_THE_RUN`` or ``WAITS_THE_CAP``), and ``long_wait_says``, words of the error when it
    ends the run."""

    revoked_says: tuple[str, ...]
    long_wait: str
    long_wait_says: str = ""


KINDS = {
    "slack": Faults(("token_revoked", "new token"), ENDS_THE_RUN, "kept answering 429"),
    "gdrive": Faults(("refused the service account's key", "Nothing"), ENDS_THE_RUN, "wait 3600 s"),
    "confluence": Faults(("HTTP 401", "new token"), ENDS_THE_RUN, "wait 3600 s"),
    "github": Faults(("HTTP 401", "new token"), ENDS_THE_RUN, "wait 3600 s"),
    "jira": Faults(("revoked or has expired", "new token"), ENDS_THE_RUN, "wait 3600 s"),
    "notion": Faults(("HTTP 401", "new token"), WAITS_THE_CAP),
}
ENDING = [kind for kind, faults in KINDS.items() if faults.long_wait == ENDS_THE_RUN]
WAITING = [kind for kind, faults in KINDS.items() if faults.long_wait == WAITS_THE_CAP]


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.KB_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.KB_CONNECTOR_BACKOFF_S = 0


@pytest.fixture
def sample(kind):
    return SAMPLES[kind]


@pytest.fixture
def standin(sample):
    with sample.running() as running:
        yield running


@pytest.fixture
def tenant():
    return TenantFactory()


@pytest.fixture
def source(tenant, sample, standin):
    return sample.source(tenant, standin)


def _stored(tenant) -> int:
    return Document.objects.filter(tenant=tenant).count()


@pytest.mark.parametrize("kind", KINDS)
def test_a_revoked_credential_fails_the_run_clearly_and_deletes_nothing(kind, sample, standin, tenant, source):
    reader = member(tenant, sample.reader)
    assert source_sync(source=source).status == "done"
    readable = visible_titles(tenant, reader)
    assert readable and _stored(tenant) == sample.documents
    standin.revoke()

    run = source_sync(source=source)

    assert run.status == "failed"
    for words in KINDS[kind].revoked_says:
        assert words in run.error, run.error
    assert visible_titles(tenant, reader) == readable
    assert _stored(tenant) == sample.documents


@pytest.mark.parametrize("kind", KINDS)
def test_a_rate_limited_sync_waits_the_retry_after_asked_and_completes(kind, sample, standin, source):
    standin.fail_next(429, retry_after=1)
    started = time.monotonic()

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["new"] == sample.documents
    assert time.monotonic() - started >= 0.9
    assert standin.requests[0] == standin.requests[1] == sample.first_request  # the rate-limited one, tried again


@pytest.mark.parametrize("kind", ENDING)
def test_a_retry_after_over_the_cap_ends_the_run_and_the_next_sync_resumes(kind, sample, standin, tenant, source):
    standin.fail_next(429, retry_after=3600)
    started = time.monotonic()

    ended = source_sync(source=source)
    resumed = source_sync(source=source)

    assert ended.status == "failed"
    assert KINDS[kind].long_wait_says in ended.error, ended.error
    assert time.monotonic() - started < 30  # neither an hour nor the two minutes of the cap
    assert resumed.status == "done", resumed.error
    assert resumed.counts()["new"] == sample.documents == _stored(tenant)


@pytest.mark.parametrize("kind", WAITING)
def test_a_retry_after_over_the_cap_is_shortened_to_the_cap_and_the_run_completes(
    kind, sample, standin, source, monkeypatch
):
    monkeypatch.setattr(notion_connector, "MAX_RETRY_AFTER_S", 1)  # the cap, shortened for the test
    standin.fail_next(429, retry_after=3600)
    started = time.monotonic()

    run = source_sync(source=source)

    assert run.status == "done", run.error
    assert run.counts()["new"] == sample.documents
    assert 0.9 <= time.monotonic() - started < 30
    assert standin.requests[0] == standin.requests[1] == sample.first_request
