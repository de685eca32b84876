"""Service connectors' sync against local stand-ins of Slack and Confluence Cloud on loopback.

Usage: python benchmarks/connectors.py [--slack-messages 10000] [--confluence-pages 2000]
       [--full-sync-share 0.2] [--skip-full-sync] [--out FILE]

The worlds (``tests/connectors/standins``; the connectors' real client libraries talk to them
over HTTP):

* Slack: ``--slack-messages`` messages, one an hour (a steady workspace: a bigger one has a longer
  history, not a busier week), in 20 channels of which 5 are private, busy and quiet ones (the
  k-th channel gets a share proportional to 1/k), a message in ten a reply to one of its channel's
  three latest threads; 50 people with e-mails. A document per thread.
* Confluence: ``--confluence-pages`` contents in 6 spaces, each readable by a group (one by
  everyone): a page in five a child page, a blog post in 25, a page in 40 restricted to a group
  or to two people, a footer comment on a page in 10, a Markdown attachment on a page in 100.

Each service is measured in three worlds, each in a throw-away tenant deleted at its end: the
default size and twice it (the fetch pass and the incremental sync), and ``--full-sync-share``
of the default size for the full sync (the MiniLM embedding of 10,000 threads alone would take
longer than the ~10 minutes this run is meant to take on 2 cores):

1. ``fetch``: the connector's ``changes({})`` iterated alone (requests, parsing, no database):
   documents, seconds, documents/s, requests (target: 100 documents/s or more);
2. ``full_sync``: the first ``source_sync(scope="all")`` with the tenant's embedder
   (all-MiniLM-L6-v2): seconds, documents/s, chunks, and the seconds spent inside the embedder
   (its ``embed`` timed during the sync) with their share. ``--skip-full-sync`` leaves it out,
   and the permission sync with it;
3. ``incremental``: 10 changes at the source in 10 places (Slack: the latest thread of five
   channels edited, of two answered, a new thread in three; Confluence: 5 pages edited, 5 new),
   then ``source_sync(scope="content")``: seconds, requests (by endpoint), counts. In the default
   and double worlds it starts from the checkpoint the fetch pass ended with (the documents are
   not stored: an edit counts as new), after the full sync (``incremental_after_full_sync``) from
   that sync's (target: requests that do not grow with the documents, 10 s or less);
4. ``permissions``: ``source_sync(scope="permissions")`` after the full sync: seconds, requests.

What a worker does after an ingestion stays out of the timings, as it does with a broker: the
near-duplicate search and enrichment are off, and the table upkeep (``VACUUM``) runs after each
timed sync (``upkeep_after_s``). Prints one JSON object (and writes it to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from _setup import ROOT, django_setup

FETCH_TARGET = 100  # documents/s, fetching and parsing alone
INCREMENTAL_TARGET_S = 10.0
SLACK_CHANNELS, SLACK_PRIVATE_EVERY, SLACK_PEOPLE = 20, 4, 50
CONFLUENCE_SPACES = 6
MIN_MESSAGES, MIN_PAGES = 200, 50
WORLD_SIZE = {"slack": "messages", "confluence": "contents"}  # what a world's size counts
WORDS = (
    "deploy release review budget roadmap incident customer invoice onboarding migration database latency "
    "dashboard alert design palette hiring interview contract renewal backlog sprint planning retro outage "
    "cache queue worker report quarter forecast pricing launch feedback survey office travel laptop security "
    "audit policy vendor support ticket escalation schema index search ranking model training"
).split()


def _sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def _path_kind(path: str) -> str:
    """A request path with its ids and file names folded (``/wiki/rest/api/content/{id}/child/comment``)."""
    path = re.sub(r"/\d+(?=/|$)", "/{id}", path)
    return re.sub(r"(/download/attachments/\{id\})/[^/]+$", r"\1/{file}", path)


def _requests(standin) -> dict:
    return {
        "requests": len(standin.requests),
        "requests_by_path": dict(Counter(_path_kind(path) for _method, path in standin.requests).most_common()),
    }


# -- the worlds ------------------------------------------------------------------------------------


def slack_world(standin, messages: int) -> dict:
    """Fill a ``SlackStandIn`` (module docstring); returns what it holds."""
    people = [f"U{n:05d}" for n in range(SLACK_PEOPLE)]
    for n, user in enumerate(people):
        standin.add_user(user, f"Person {n}", f"person{n}@example.com")
    channels = [f"C{n:05d}" for n in range(SLACK_CHANNELS)]
    for n, channel in enumerate(channels):
        standin.add_channel(channel, f"channel-{n}", private=n % SLACK_PRIVATE_EVERY == 1, members=people[: 5 + 2 * n])
    rng = random.Random(20240301)
    weights = [1 / (n + 1) for n in range(SLACK_CHANNELS)]
    threads: dict[str, list[str]] = {channel: [] for channel in channels}
    for _ in range(messages):
        standin.advance(days=1 / 24)
        channel = rng.choices(channels, weights)[0]
        text, author = _sentence(rng, rng.randint(8, 30)), rng.choice(people)
        if threads[channel] and rng.random() < 0.1:
            standin.post(channel, author, text, thread=rng.choice(threads[channel][-3:]))
        else:
            threads[channel].append(standin.post(channel, author, text))
    return {
        "messages": messages,
        "threads": sum(len(ts) for ts in threads.values()),
        "channels": SLACK_CHANNELS,
        "private_channels": sum(1 for c in standin.places.values() if c.info["is_private"]),
        "people": SLACK_PEOPLE,
        "history_days": round(messages / 24),
    }


def slack_changes(standin) -> dict:
    """Ten changes in the first ten channels (busy and quiet ones, private ones among them): the
    latest thread of the first five edited, of the next two answered, a new thread in the last three."""
    channels = list(standin.places)[:10]
    latest = {channel_id: standin.places[channel_id].order[-1] for channel_id in channels}
    for channel_id in channels[:5]:
        ts = latest[channel_id]
        standin.edit(channel_id, ts, f"Edited: {standin.places[channel_id].messages[ts]['text']}")
    for channel_id in channels[5:7]:
        standin.post(channel_id, "U00001", "A new answer to this thread.", thread=latest[channel_id])
    for channel_id in channels[7:]:
        standin.post(channel_id, "U00002", "A new thread about the launch checklist.")
    return {"edited_threads": 5, "new_replies": 2, "new_threads": 3, "places": len(channels)}


def _confluence_body(rng: random.Random, n: int) -> str:
    paragraphs = "".join(f"<p>{_sentence(rng, rng.randint(15, 35))}</p>" for _ in range(rng.randint(2, 4)))
    items = "".join(f"<li>{_sentence(rng, rng.randint(3, 8))}</li>" for _ in range(3))
    return f"<h2>Overview</h2>{paragraphs}<h2>Steps</h2><ul>{items}</ul><p>Page {n}.</p>"


def confluence_world(standin, pages: int) -> dict:
    """Fill a ``ConfluenceStandIn`` (module docstring); returns what it holds."""
    people = [f"a{n:03d}" for n in range(30)]
    for n, account in enumerate(people):
        standin.user(account, f"Person {n}", f"person{n}@example.com")
    standin.group("g-all", "confluence-users", people)
    groups = [f"g-{n}" for n in range(CONFLUENCE_SPACES - 1)]
    for n, group in enumerate(groups):
        standin.group(group, f"team-{n}", people[n * 5 : n * 5 + 8])
    keys = [f"S{n}" for n in range(CONFLUENCE_SPACES)]
    for n, key in enumerate(keys):
        standin.space(key, f"Space {n}", groups=["g-all"] if n == 0 else [groups[n - 1]])
    rng = random.Random(20240302)
    by_space: dict[str, list[str]] = {key: [] for key in keys}
    counts = Counter()
    for n in range(pages):
        key = keys[n % CONFLUENCE_SPACES]
        kind = "blogpost" if n % 25 == 24 else "page"
        parent = rng.choice(by_space[key]) if kind == "page" and by_space[key] and n % 5 == 3 else None
        title = f"{_sentence(rng, 4)[:-1]} {n}"
        page = standin.page(key, title, _confluence_body(rng, n), parent=parent, kind=kind, by=rng.choice(people))
        if kind == "page":
            by_space[key].append(page)
        counts[kind] += 1
        counts["child_pages"] += parent is not None
        if n % 40 == 7:
            if n % 80 == 7:
                standin.restrict(page, groups=[rng.choice(groups)])
            else:
                standin.restrict(page, users=rng.sample(people, 2))
            counts["restricted"] += 1
        if n % 10 == 1:
            standin.comment(page, f"<p>{_sentence(rng, 12)}</p>", by=rng.choice(people))
            counts["comments"] += 1
        if n % 100 == 2:
            note = f"# Notes {n}\n\n{_sentence(rng, 40)}\n".encode()
            standin.attachment(page, f"notes-{n}.md", note, "text/markdown")
            counts["attachments"] += 1
    return {"contents": pages, "spaces": CONFLUENCE_SPACES, "groups": len(groups) + 1, **counts}


def _unrestricted(standin, page: str) -> bool:
    """Whether neither the page nor any page above it has a read restriction."""
    while page:
        content = standin.contents[page]
        if content["restricted"]:
            return False
        page = content["parent"]
    return True


def confluence_changes(standin) -> dict:
    """Ten changes over the spaces: five pages without restrictions edited (spread over the
    history, one a space), five new pages (one under a page without restrictions, one restricted
    to two people)."""
    spaces = list(standin.spaces)
    by_space = {
        key: [c["id"] for c in standin.contents.values() if (c["type"], c["space"]) == ("page", key)] for key in spaces
    }
    for n in range(5):
        pages = [page for page in by_space[spaces[n]] if _unrestricted(standin, page)]
        page = pages[(n * len(pages)) // 5]
        standin.edit(page, standin.contents[page]["body"] + "<p>Edited: the owner changed.</p>")
    for n in range(5):
        key = spaces[(n + 1) % len(spaces)]
        parent = [page for page in by_space[key] if _unrestricted(standin, page)][-1] if n == 0 else None
        body = f"<p>A new page about the launch checklist, part {n}.</p>"
        page = standin.page(key, f"New page {n}", body, parent=parent)
        if n == 1:
            standin.restrict(page, users=["a001", "a002"])
    return {"edited_pages": 5, "new_pages": 5, "places": len(spaces)}


# -- the measures ----------------------------------------------------------------------------------


@contextmanager
def _tenant():
    """A throw-away tenant, deleted afterwards."""
    from core.models import Tenant
    from core.services import tenant_create

    tenant = tenant_create(slug=f"bench-connectors-{uuid.uuid4().hex[:8]}")
    try:
        yield tenant
    finally:
        Tenant.objects.filter(pk=tenant.pk).delete()


def _source(tenant, kind: str, standin):
    from knowledge.services.sources import source_create

    if kind == "slack":
        return source_create(tenant=tenant, name="slack", kind=kind, location=standin.url, secret=standin.token)
    return source_create(
        tenant=tenant, name="wiki", kind=kind, location=standin.site, secret=standin.token, options={"cloud": True}
    )


def fetch(source, standin) -> tuple[dict, dict]:
    """The connector's ``changes({})`` iterated alone: figures, and the last checkpoint."""
    from knowledge.connectors.services import service_connector

    standin.reset_counts()
    started = time.perf_counter()
    items = documents = 0
    checkpoint: dict = {}
    for item in service_connector(source).changes({}):
        items += 1
        documents += len(item.documents)
        checkpoint = item.checkpoint if item.checkpoint is not None else checkpoint
    seconds = time.perf_counter() - started
    rate = documents / seconds if seconds else 0.0
    figures = {
        "items": items,
        "documents": documents,
        "seconds": round(seconds, 2),
        "documents_per_s": round(rate, 1),
        **_requests(standin),
        "target_documents_per_s": FETCH_TARGET,
        "met": rate >= FETCH_TARGET,
    }
    return figures, checkpoint


class _EmbedTimer:
    """Time spent inside the tenant's embedder (``embed``) while the block runs."""

    def __init__(self, tenant):
        from knowledge.embedders import get_embedder

        self.embedder = get_embedder(tenant.embedder)
        self.seconds = 0.0

    def __enter__(self):
        original = self.embedder.embed

        def timed(texts):
            started = time.perf_counter()
            try:
                return original(texts)
            finally:
                self.seconds += time.perf_counter() - started

        self.embedder.embed = timed
        return self

    def __exit__(self, *exc):
        del self.embedder.embed  # the class's method again


def _run(source, standin, scope: str, *, embed: bool = False) -> dict:
    """One ``source_sync`` of ``scope``, timed: seconds, counts, requests; with ``embed``, also
    documents/s, chunks and the seconds inside the embedder."""
    from django.core.cache import cache

    from knowledge.models import Chunk
    from knowledge.services import maintenance
    from knowledge.services.sync import source_sync

    standin.reset_counts()
    chunks = Chunk.objects.filter(tenant=source.tenant).count()
    timer = _EmbedTimer(source.tenant)
    # The table upkeep (VACUUM) that a worker runs after ingestions would, with no broker, run
    # inside the sync: marked as queued, it waits, and runs below, outside the timing.
    cache.set(maintenance._QUEUED, True, timeout=None)
    started = time.perf_counter()
    try:
        with timer:
            run = source_sync(source=source, scope=scope)
        seconds = time.perf_counter() - started
    finally:
        upkeep_started = time.perf_counter()
        maintenance.tables_maintain()  # and ingestions queue the upkeep again
        upkeep = time.perf_counter() - upkeep_started
    if run.status != "done":
        raise SystemExit(f"The {scope} sync of {source.name} failed: {run.error}")
    counts = run.counts()
    figures = {
        "seconds": round(seconds, 2),
        **{key: counts[key] for key in ("new", "updated", "unchanged", "deleted", "failed")},
        **_requests(standin),
    }
    if embed:
        figures.update(
            documents_per_s=round((counts["new"] + counts["updated"]) / seconds, 1),
            chunks=Chunk.objects.filter(tenant=source.tenant).count() - chunks,
            embed_seconds=round(timer.seconds, 2),
            embed_share=round(timer.seconds / seconds, 3),
            upkeep_after_s=round(upkeep, 2),
        )
    if scope == "permissions":
        figures["permissions"] = run.permissions
    return figures


def _world(kind: str, standin_class, world, changes, documents: int, *, full: bool) -> dict:
    """One world of ``documents`` in a throw-away tenant: the fetch pass, then (``full``) the full
    sync, the ten changes, the content sync and (``full``) the permission sync."""
    from _toolkit import log

    from knowledge.models import Source

    out: dict = {}
    with standin_class() as standin, _tenant() as tenant:
        out["world"] = world(standin, documents)
        source = _source(tenant, kind, standin)
        out["fetch"], checkpoint = fetch(source, standin)
        log(f"{kind} {out['world']}: fetch {out['fetch']}")
        if full:
            out["full_sync"] = _run(source, standin, "all", embed=True)
            log(f"{kind} full sync: {out['full_sync']}")
            baseline = "the full sync's checkpoint, its documents stored"
        else:
            Source.objects.filter(pk=source.pk).update(checkpoint=checkpoint)
            source.refresh_from_db()
            baseline = "the fetch pass's checkpoint (documents not stored: edits count as new)"
        made = changes(standin)
        incremental = {"changes": made, "baseline": baseline, **_run(source, standin, "content", embed=True)}
        incremental["target_s"] = INCREMENTAL_TARGET_S
        incremental["met_s"] = incremental["seconds"] <= INCREMENTAL_TARGET_S
        out["incremental"] = incremental
        log(f"{kind} incremental: {incremental}")
        if full:
            out["permissions"] = _run(source, standin, "permissions")
            log(f"{kind} permissions: {out['permissions']}")
    return out


def service(kind: str, size: int, *, full_share: float | None) -> dict:
    """Every measure of one service (module docstring): worlds of ``size`` and twice ``size`` for
    the fetch pass and the incremental sync, and one of ``full_share`` x ``size`` for the full sync."""
    from tests.connectors.standins.confluence import ConfluenceStandIn
    from tests.connectors.standins.slack import SlackStandIn

    setup = {
        "slack": (SlackStandIn, slack_world, slack_changes),
        "confluence": (ConfluenceStandIn, confluence_world, confluence_changes),
    }[kind]
    one = _world(kind, *setup, size, full=False)
    two = _world(kind, *setup, 2 * size, full=False)
    out = {
        "world": one["world"],
        "fetch": one["fetch"],
        "incremental": one["incremental"],
        "world_double": two["world"],
        "fetch_double": two["fetch"],
        "incremental_double": two["incremental"],
    }
    requests = {one["world"][WORLD_SIZE[kind]]: one["incremental"]["requests"]}
    requests[two["world"][WORLD_SIZE[kind]]] = two["incremental"]["requests"]
    if full_share is not None:
        synced = _world(kind, *setup, max(1, round(size * full_share)), full=True)
        out["full_sync"] = {"world": synced["world"], "share_of_world": full_share, **synced["full_sync"]}
        out["incremental_after_full_sync"] = synced["incremental"]
        out["permissions"] = synced["permissions"]
        requests[synced["world"][WORLD_SIZE[kind]]] = synced["incremental"]["requests"]
    out["incremental_requests_by_size"] = {str(n): requests[n] for n in sorted(requests)}
    out["incremental_requests_grow"] = two["incremental"]["requests"] > one["incremental"]["requests"]
    return out


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark (module docstring) on the configured database; print and return the JSON."""
    from django.conf import settings
    from django.test import override_settings

    from knowledge.embedders import get_embedder
    from knowledge.ingestion.documents import ReadDocument
    from knowledge.ingestion.splitters import get_splitter

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slack-messages", type=int, default=10_000)
    parser.add_argument("--confluence-pages", type=int, default=2_000)
    parser.add_argument(
        "--full-sync-share", type=float, default=0.2, help="the full sync's world, as a share of the default one"
    )
    parser.add_argument("--skip-full-sync", action="store_true", help="fetch and incremental syncs only")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    share = None if args.skip_full_sync else args.full_sync_share
    smallest = min(1.0, share or 1.0)
    if share is not None and share <= 0:
        parser.error("--full-sync-share is more than 0")
    if round(args.slack_messages * smallest) < MIN_MESSAGES or round(args.confluence_pages * smallest) < MIN_PAGES:
        # Fewer, and a channel or a space that the changes touch may hold nothing to change.
        parser.error(f"every world (the full sync's too) needs {MIN_MESSAGES} messages and {MIN_PAGES} pages or more")
    # What the first ingestion of a process loads (the model, the splitter's tokenizer) loads
    # outside the figures.
    rng = random.Random(0)
    get_embedder("local").embed([_sentence(rng, 100) for _ in range(8)])
    get_splitter().split(ReadDocument(external_id="warm-up", title="Warm up", text=_sentence(rng, 150)))
    with override_settings(
        KB_FETCH_ALLOWED_NETWORKS=["127.0.0.1/32"],
        KB_CONNECTOR_BACKOFF_S=0,
        KB_NEAR_DUPLICATES=False,
        KB_ENRICHMENT=False,
    ):
        load = os.getloadavg()[0]
        result = {
            "machine": f"{os.cpu_count()} cores",
            "options": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
            "embedder": f"local (all-MiniLM-L6-v2, {settings.KB_EMBEDDER_BACKEND})",
            "full_sync": "skipped" if share is None else f"{share:g} of each world",
            "slack": service("slack", args.slack_messages, full_share=share),
            "confluence": service("confluence", args.confluence_pages, full_share=share),
        }
        result["load_average"] = {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return result


if __name__ == "__main__":
    django_setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    main()
