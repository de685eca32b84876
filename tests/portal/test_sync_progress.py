"""The Sources page while a source syncs: documents done of total, chunks per second and time left,
refreshed in place (htmx polls the table) until every sync has ended."""

import re

import pytest
from django.urls import reverse

from knowledge.models import Source, SyncRun
from tests.factories import SourceFactory

SOURCES = reverse("portal:sources")
TABLE = reverse("portal:sources-table")
HX = {"HTTP_HX_REQUEST": "true"}
PROGRESS = {"stage": "ingesting", "items": 383, "done": 96, "chunks": 2300, "chunks_per_s": 21.7, "eta_s": 205}


@pytest.fixture
def syncing(tenant):
    """A folder source ``releases`` halfway through a sync, and ``ref`` waiting for its turn."""
    releases = SourceFactory(tenant=tenant, name="releases", kind=Source.Kind.FOLDER, location="/srv/releases")
    ref = SourceFactory(tenant=tenant, name="ref", kind=Source.Kind.FOLDER, location="/srv/ref")
    run = SyncRun.objects.create(tenant=tenant, source=releases, status=SyncRun.Status.RUNNING, progress=PROGRESS)
    SyncRun.objects.create(tenant=tenant, source=ref, status=SyncRun.Status.PENDING)
    return run


def rows(html: str) -> dict[str, str]:
    return dict(re.findall(r'<th scope="row">([^<]+)</th>(.*?)</tr>', html, flags=re.S))


def test_a_running_sync_shows_documents_done_of_total_chunks_per_second_and_time_left(client, member, syncing):
    client.force_login(member)

    html = client.get(SOURCES).content.decode()

    text = re.sub(r"<[^>]+>", "", rows(html)["releases"])
    assert "96 of 383 documents · 21.7 chunks/s · about 3 min 25 s left" in text
    assert '<progress max="383" value="96">' in rows(html)["releases"]
    assert "Waiting to sync" in rows(html)["ref"]
    assert f'hx-get="{TABLE}" hx-trigger="every 2s"' in html  # the table refreshes itself meanwhile


def test_the_polled_table_moves_with_the_sync_and_stops_polling_once_all_are_done(client, member, syncing):
    client.force_login(member)
    SyncRun.objects.filter(pk=syncing.pk).update(progress={**PROGRESS, "done": 200, "eta_s": 40})

    moving = client.get(TABLE, **HX).content.decode()
    SyncRun.objects.update(status=SyncRun.Status.DONE, progress={}, new=383)
    finished = client.get(TABLE, **HX).content.decode()

    assert "200 of 383 documents" in moving and "about 40 s left" in moving and "hx-trigger" in moving
    assert "Done: 383 new" in rows(finished)["releases"]
    assert "hx-trigger" not in finished
    assert client.get(TABLE).status_code == 302  # not htmx: the Sources page


def test_the_runs_api_gives_a_running_syncs_progress(member, syncing):
    from tests.api.conftest import client_for

    url = reverse("api:source-run-detail", args=[syncing.source_id, syncing.pk])

    assert client_for(member).get(url).json()["progress"] == PROGRESS
