"""The isolation test: two tenants with restricted sources and documents, users
of every role and grant, and every API endpoint, portal page, admin page and command tried as
every user against every other's objects, in a seeded random order: 0 leaks.

A leak is a document the user may not see (another tenant's, or a restricted one of their own
tenant not granted to them) showing in a response: its marker word (title and text), its portal
link or its ``document_id``, in the body or in a redirect (``Location``, ``HX-Redirect``). The
seed is printed; rerun one with ``KB_ISOLATION_SEED=<seed>``.

Each tenant also holds documents synced from a service (a scripted Slack) whose permissions the
seed draws: public, a channel of drawn members, drawn e-mail addresses, or unreadable (admins
only); and a file its member attached to a conversation of theirs, which no one else may see,
owners and admins included.

Users: every role of each tenant, a member in the restricted group, a member granted the restricted
document, and ``roamer``, a member of both tenants (who asks with ``X-Tenant``). Each user also
calls the API with a membership token of their own, and names the other tenant in ``X-Tenant``.
Objects: documents (ids, versions and diffs), sources (filters, profile preferences, the sources
API and sync runs), conversations (read, continue, unfold, delete), traces (read, feedback, citation opens, portal
citation links), feedback (admin), jobs, retrieval-settings changes (read, override), tenants
(switcher), and the side doors: sources pointed at each tenant's uploads and git cache in the data
directory and at a loopback page holding each tenant's restricted text, synced and then searched,
and uploads. The portal is tried plain and as htmx (``HX-Request``) for the fragment views.

The second test repeats the API and portal probes in a deliberately broken build whose
application tenant filter is removed (``for_tenant`` keeps every row, the retrievers' SQL names
the other tenant): row-level security alone must keep every other tenant's document out.
"""

from __future__ import annotations

import functools
import io
import json
import os
import random
import re
from pathlib import Path

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, TestCase
from django.urls import reverse
from dulwich import porcelain

from core.memberships import membership_token_create
from core.models import Membership, Tenant
from core.tenancy import TenantScopedQuerySet
from knowledge import folder_grants
from knowledge.connectors import folder as folder_connector
from knowledge.models import IngestionJob, SyncRun
from people.models import Conversation, Feedback
from quality.models import ConfigChange
from retrieval.filters import RetrievalFilter
from retrieval.models import Trace
from retrieval.pipeline import pipeline_answer
from retrieval.request import AnswerRequest
from retrieval.walks.models import Walk
from tests.acl_world import attached_document, markers, synced_documents, tenant_world
from tests.api.conftest import client_for
from tests.connectors.scripted import scripted_service
from tests.knowledge.web_site import WebSite
from tests.retrieval.doubles import ScriptedLLM

QUESTIONS = [
    "bicycle tyre puncture patch glue",
    "How do I fix a flat tyre?",
    "board handbook note",
    "What does the private handbook note say about the tube?",
    "cycling inflate tube rubber patch",
]
MODES = ("hybrid", "lexical", "dense")


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path):
    settings.KB_DATA_DIR = tmp_path / "data"
    settings.KB_DATA_DIR.mkdir()
    settings.KB_TRACING = True


def _side_doors(worlds, data_dir: Path) -> dict:
    """Each tenant's restricted text where a side door would find it: an upload left in the data
    directory, a fetched repository in the git cache, and a page on a loopback server. Returns the
    locations (``ids["side_doors"]``) and the server (to close)."""
    folders, caches = [], []
    for world in worlds.values():
        text = world.documents["board"].versions.get().text
        upload = data_dir / "uploads" / world.tenant.slug / "0a"
        upload.mkdir(parents=True)
        (upload / "minutes.md").write_text(text)
        folders.append(str(data_dir / "uploads" / world.tenant.slug))
        work = data_dir.parent / f"work-{world.tenant.slug}"
        porcelain.init(str(work)).close()
        (work / "minutes.md").write_text(text)
        porcelain.add(str(work), paths=[str(work / "minutes.md")])
        porcelain.commit(str(work), message=b"minutes", author=b"A <a@x>", committer=b"A <a@x>")
        cache = data_dir / "git" / str(world.tenant.pk) / str(world.sources["board"].pk)
        cache.parent.mkdir(parents=True)
        porcelain.clone(str(work), str(cache), bare=True, errstream=io.BytesIO()).close()
        caches.append(str(cache))
    pages = {f"/{w.tenant.slug}": (200, w.documents["board"].versions.get().text) for w in worlds.values()}
    site = WebSite({**pages, "/robots.txt": (404, "")}).start()
    urls = [site.url(path) for path in pages] + [f"http://localhost:{site.port}{path}" for path in pages]
    return {"folders": folders, "caches": caches, "urls": urls, "site": site}


def _facts_of_every_passage(messages) -> dict:
    """A walk's fact extraction that keeps one fact per passage, naming its title (and so its
    document's marker word): a fact that leaks shows its document."""
    titles = re.findall(r'<passage n="(\d+)" title="([^"]*)"', messages[-1]["content"])
    facts = [{"fact": f"{title} says to patch the tube", "relevance": "", "passage": int(n)} for n, title in titles]
    return {"facts": facts, "sufficient": True, "missing": []}


@pytest.fixture
def worlds(db, tmp_path, monkeypatch):
    """Both tenants, with documents synced from a service under drawn permissions, conversations,
    traces, feedback and a job of the users who may see most."""
    worlds = {slug: tenant_world(slug) for slug in ("acme", "bolt")}
    draw = random.Random(_seed())
    for world in worlds.values():
        synced_documents(world, scripted_service(monkeypatch, tenant_id=world.tenant.pk), draw)
        attached_document(world)  # the member's file in a conversation of theirs: theirs alone
    side_doors = _side_doors(worlds, tmp_path / "data")
    # A member of both tenants, in neither's restricted group.
    roamer = worlds["acme"].users["member"].__class__.objects.create_user(username="roamer", password="pass-word-123")
    for world in worlds.values():
        Membership.objects.create(user=roamer, tenant=world.tenant, role=Membership.Role.MEMBER)
        world.users["roamer"] = roamer
    staff = Permission.objects.filter(
        content_type__app_label__in=["core", "knowledge", "retrieval", "people", "quality"]
    )
    for world in worlds.values():
        for who in ("owner", "admin"):
            world.users[who].user_permissions.set(staff)
        for who in ("board", "granted", "owner", "member", "viewer"):
            answer = client_for(world.users[who]).post(
                "/api/v1/ask/", {"question": QUESTIONS[0], "extractive": True, "k": 5}, format="json"
            )
            assert answer.status_code == 200, answer.content
            body = answer.json()
            if who != "viewer":
                client_for(world.users[who]).post(
                    f"/api/v1/traces/{body['trace_id']}/feedback/", {"rating": "up", "citation": 1}, format="json"
                )
        # The owner (who reads every document) walks once: facts from every document, kept as memory,
        # and a walk only its asker may read or steer.
        pipeline_answer(
            AnswerRequest(question=QUESTIONS[0], pipeline="walkingrag", k=3),
            tenant=world.tenant,
            llm=ScriptedLLM(structured_reply=_facts_of_every_passage, chat_reply="Patch the tube [1]."),
            user=world.users["owner"],
            overrides={"walk_entity_hop": 0, "walk_facts_from": 3},
        )
        Walk.objects.filter(tenant=world.tenant).update(steered=True)
        IngestionJob.objects.create(
            tenant=world.tenant, source=world.sources["board"], file_name="board.md", stored_path="/nonexistent"
        )
        SyncRun.objects.create(tenant=world.tenant, source=world.sources["board"], status=SyncRun.Status.DONE, new=1)
        ConfigChange.objects.create(tenant=world.tenant, status=ConfigChange.Status.REFUSED)
        roaming = client_for(roamer)
        answer = roaming.post(
            "/api/v1/ask/",
            {"question": QUESTIONS[1], "extractive": True, "k": 5},
            format="json",
            HTTP_X_TENANT=world.tenant.slug,
        )
        assert answer.status_code == 200, answer.content
    worlds["acme"].side_doors = side_doors
    yield worlds
    side_doors["site"].close()


class Probe:
    """Runs requests as one user and checks every response for the documents they may not see."""

    def __init__(self, worlds, slug: str, who: str, rng: random.Random, *, cross_tenant_only: bool = False):
        self.world, self.who, self.rng = worlds[slug], who, rng
        self.user = self.world.users[who]
        self.other_slug = next(s for s in worlds if s != slug)
        visible = self.world.visible_keys(who)
        self.forbidden = [
            document
            for world in worlds.values()
            for key, document in world.documents.items()
            if (world is not self.world and who != "roamer")
            or (world is self.world and key not in visible and not cross_tenant_only)
            or (world is not self.world and who == "roamer" and key not in world.visible_keys("roamer"))
        ]
        self.patterns = [(d, m) for d in self.forbidden for m in markers(d)]
        # The admin site shows a tenant's owners and admins every row of their tenant, the files its
        # members attached to conversations included (docs/people.md): only there may they see them.
        attached = self.world.documents.get("attached") if who in ("owner", "admin") else None
        self.admin_patterns = [(d, m) for d, m in self.patterns if d != attached]
        self.api = client_for(self.user)
        if who == "roamer":  # several tenants: the API needs the tenant named
            self.api.credentials(HTTP_AUTHORIZATION=self.api._credentials["HTTP_AUTHORIZATION"], HTTP_X_TENANT=slug)
        membership = Membership.objects.get(user=self.user, tenant=self.world.tenant)
        _token, key = membership_token_create(membership=membership, name="probe")
        self.token_api = client_for(self.user)
        self.token_api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        self.portal = Client()
        self.portal.force_login(self.user)
        if who == "roamer":  # the portal acts in the tenant picked with the switcher
            assert self.portal.post(reverse("portal:tenant-switch"), {"tenant": slug}).status_code == 302
        self.checked = 0
        self.own_conversations = set(Conversation.objects.filter(user=self.user).values_list("pk", flat=True))

    def check(self, what: str, body) -> None:
        if isinstance(body, (bytes, bytearray)):
            text = body.decode("utf-8", "replace")
            try:
                text = json.dumps(json.loads(text))  # one spelling of "document_id": n
            except ValueError:
                pass
        else:
            text = body
        for document, marker in self.admin_patterns if what.startswith("admin /admin/") else self.patterns:
            assert marker not in text, f"LEAK to {self.user.username}: {document.external_id} ({marker!r}) in {what}"
        self.checked += 1

    def response(self, what: str, response, *, allow_errors: bool = False) -> None:
        assert allow_errors or response.status_code < 500, (what, response.status_code)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        self.check(what, body)
        for header in ("Location", "HX-Redirect", "HX-Location"):
            if response.has_header(header):
                self.check(f"{what} ({header})", response[header])


def object_ids(worlds):
    """Every tenant's traces, conversations, feedback, jobs and documents, for probing by id."""
    return {
        "trace": list(Trace.objects.values_list("pk", flat=True)),
        "conversation": list(Conversation.objects.values_list("pk", flat=True)),
        "feedback": list(Feedback.objects.values_list("pk", flat=True)),
        "job": list(IngestionJob.objects.values_list("pk", flat=True)),
        "source_id": sorted(s.pk for w in worlds.values() for s in w.sources.values()),
        "run": list(SyncRun.objects.values_list("source_id", "pk")),
        "document": [d.pk for w in worlds.values() for d in w.documents.values()],
        "source": sorted({name for w in worlds.values() for name in w.sources}),
        "change": list(ConfigChange.objects.values_list("pk", flat=True)),
        "walk": list(Walk.objects.values_list("pk", flat=True)),
        "tenant": sorted(worlds),
        "side_doors": getattr(worlds["acme"], "side_doors", {}),
    }


def _sample(rng: random.Random, ids: list[int], own: set[int], n: int = 3) -> list[int]:
    """``n`` random ids of others' conversations plus one of the user's own (follow-ups run a pipeline:
    a follow-up in another's conversation is refused before it, so a sample tries the same path)."""
    others = [pk for pk in ids if pk not in own]
    return rng.sample(others, min(n, len(others))) + rng.sample(sorted(own), min(1, len(own)))


def _delete_unless_own(api, p: Probe, pk: int):
    """DELETE another's conversation (must be a 404); the user's own are kept for the other probes."""
    if pk in p.own_conversations:
        return api.get(f"/api/v1/conversations/{pk}/")
    response = api.delete(f"/api/v1/conversations/{pk}/")
    assert response.status_code == 404, (p.user.username, pk, response.status_code)
    return response


def _side_door(api, body: dict, question: str):
    """Create ``body`` as a source; if that is allowed, sync it and search: the response to check.

    Whoever may not manage sources gets a 403, an admin a 400: no side door may open."""
    created = api.post("/api/v1/sources/", {"crawl_delay_s": 0.5, **body}, format="json")
    if created.status_code != 201:
        assert created.status_code in (400, 403), created.content
        return created
    with TestCase.captureOnCommitCallbacks(execute=True):
        api.post(f"/api/v1/sources/{created.json()['id']}/sync/")
    return api.post("/api/v1/search/", {"query": question, "k": 50, "mode": "lexical"}, format="json")


def _upload(api, rng: random.Random):
    """Upload a note (editors and above; 403 below): the job and its documents stay in the tenant."""
    name = f"note-{rng.randrange(10**6)}.md"
    data = b"# Note\n\nPatch the bicycle tyre puncture with glue.\n"
    with TestCase.captureOnCommitCallbacks(execute=True):
        response = api.post("/api/v1/documents/", {"file": SimpleUploadedFile(name, data)}, format="multipart")
    assert response.status_code in (202, 403, 429), response.content
    return response


def side_door_probes(p: Probe, ids: dict) -> list:
    """Sources at every tenant's uploads, git cache and loopback page; an upload."""
    doors = ids["side_doors"]
    question = "board handbook note patch the bicycle tyre puncture"
    bodies = [{"kind": "folder", "location": folder} for folder in doors["folders"]]
    bodies += [{"kind": "git", "location": cache} for cache in doors["caches"]]
    bodies += [{"kind": "git", "location": f"file://{cache}"} for cache in doors["caches"]]
    bodies += [{"kind": "web", "location": url} for url in doors["urls"]]
    probes = []
    for n, body in enumerate(bodies):
        body = {"name": f"door-{p.who}-{n}", **body}
        probes.append((f"POST source {body}", lambda b=body: _side_door(p.api, b, question)))
    probes.append(("POST upload", lambda: _upload(p.api, p.rng)))
    return probes


def api_probes(p: Probe, ids: dict) -> list:
    rng, api = p.rng, p.api
    probes = [("GET documents", lambda: api.get("/api/v1/documents/?limit=200"))]
    for name in ids["source"]:
        probes.append((f"GET documents?source={name}", lambda n=name: api.get(f"/api/v1/documents/?source={n}")))
    for pk in ids["document"]:
        probes.append((f"GET document {pk}", lambda pk=pk: api.get(f"/api/v1/documents/{pk}/")))
    for pk in ids["job"]:
        probes.append((f"GET job {pk}", lambda pk=pk: api.get(f"/api/v1/jobs/{pk}/")))
    probes.append(("GET sources", lambda: api.get("/api/v1/sources/?limit=200")))
    for pk in ids["source_id"]:
        probes.append((f"GET source {pk}", lambda pk=pk: api.get(f"/api/v1/sources/{pk}/")))
        probes.append((f"GET source {pk} runs", lambda pk=pk: api.get(f"/api/v1/sources/{pk}/runs/")))
        # The worlds' sources are filled by hand: a sync is refused (400, 403 or 404) and changes nothing.
        probes.append((f"POST sync source {pk}", lambda pk=pk: api.post(f"/api/v1/sources/{pk}/sync/", {})))
    for source_id, pk in ids["run"]:
        url = f"/api/v1/sources/{source_id}/runs/{pk}/"
        probes.append((f"GET sync run {pk}", lambda u=url: api.get(u)))
    # Every source filter; each with a random mode (a mode each filter in turn would triple the runs).
    for sources in [[], *[[n] for n in ids["source"]]]:
        body = {"query": rng.choice(QUESTIONS), "k": 50, "mode": rng.choice(MODES), "sources": sources}
        probes.append((f"POST search {body}", lambda b=body: api.post("/api/v1/search/", b, format="json")))
        body = {"question": rng.choice(QUESTIONS), "k": rng.randint(3, 10), "extractive": True, "sources": sources}
        endpoint = rng.choice(["/api/v1/ask/", "/api/v1/ask/stream/"])
        probes.append((f"POST {endpoint} {body}", lambda b=body, e=endpoint: api.post(e, b, format="json")))
    for pk in ids["conversation"]:
        probes.append((f"GET conversation {pk}", lambda pk=pk: api.get(f"/api/v1/conversations/{pk}/")))
        probes.append((f"DELETE conversation {pk}", lambda pk=pk: _delete_unless_own(api, p, pk)))
        probes.append((f"GET conversation {pk} files", lambda pk=pk: api.get(f"/api/v1/conversations/{pk}/files/")))
    for pk in _sample(rng, ids["conversation"], p.own_conversations):
        body = {"question": rng.choice(QUESTIONS), "extractive": True, "conversation": pk}
        probes.append((f"POST ask in conversation {pk}", lambda b=body: api.post("/api/v1/ask/", b, format="json")))
    probes.append(("GET conversations", lambda: api.get("/api/v1/conversations/")))
    probes.append(("GET facts", lambda: api.get("/api/v1/facts/?limit=100")))
    facts_query = {"q": rng.choice(QUESTIONS), "limit": 100}
    probes.append((f"GET facts {facts_query}", lambda: api.get("/api/v1/facts/", facts_query)))
    for pk in ids["walk"]:
        probes.append((f"GET walk {pk}", lambda pk=pk: api.get(f"/api/v1/walks/{pk}/")))
        probes.append(
            (f"PATCH walk {pk}", lambda pk=pk: api.patch(f"/api/v1/walks/{pk}/", {"question": "mine?"}, format="json"))
        )
    for pk in ids["trace"]:
        probes.append((f"GET trace {pk}", lambda pk=pk: api.get(f"/api/v1/traces/{pk}/")))
        body = {"rating": rng.choice(["up", "down"]), "citation": rng.choice([None, 1, 2])}
        body = {k: v for k, v in body.items() if v is not None}
        probes.append(
            (
                f"POST feedback on trace {pk}",
                lambda pk=pk, b=body: api.post(f"/api/v1/traces/{pk}/feedback/", b, format="json"),
            )
        )
        n = rng.choice([1, 2])
        probes.append(
            (
                f"POST citation {n} open on trace {pk}",
                lambda pk=pk, n=n: api.post(f"/api/v1/traces/{pk}/citations/{n}/open/", {}, format="json"),
            )
        )
    probes.append(("GET profile", lambda: api.get("/api/v1/profile/")))
    for name in ids["source"]:
        body = {rng.choice(["preferred_sources", "muted_sources"]): [name]}
        probes.append((f"PATCH profile {body}", lambda b=body: api.patch("/api/v1/profile/", b, format="json")))
    probes.append(("GET settings", lambda: api.get("/api/v1/settings/retrieval/")))
    for pk in ids["change"]:
        probes.append((f"GET settings change {pk}", lambda pk=pk: api.get(f"/api/v1/settings/retrieval/changes/{pk}/")))
        probes.append(
            (
                f"POST override settings change {pk}",
                lambda pk=pk: api.post(f"/api/v1/settings/retrieval/changes/{pk}/override/", {}, format="json"),
            )
        )
    # The user's membership token, alone and naming the other tenant; the user's token naming it.
    token, other = p.token_api, p.other_slug
    probes.append(("token GET documents", lambda: token.get("/api/v1/documents/?limit=200")))
    body = {"query": rng.choice(QUESTIONS), "k": 50, "mode": rng.choice(MODES)}
    probes.append((f"token POST search {body}", lambda: token.post("/api/v1/search/", body, format="json")))
    probes.append(("token GET conversations", lambda: token.get("/api/v1/conversations/")))
    probes.append(("token GET sources", lambda: token.get("/api/v1/sources/?limit=200")))
    # (The roamer belongs to both tenants: their own user token may name either.)
    namers = [(token, "token")] + ([(api, "user token")] if p.who != "roamer" else [])
    for client, label in namers:
        probes.append(
            (
                f"{label} naming tenant {other}: GET documents",
                lambda c=client: _refused(c.get("/api/v1/documents/", HTTP_X_TENANT=other)),
            )
        )
        probes.append(
            (
                f"{label} naming tenant {other}: POST search",
                lambda c=client: _refused(c.post("/api/v1/search/", body, format="json", HTTP_X_TENANT=other)),
            )
        )
    return probes


def _refused(response):
    """A request naming a tenant the user is not a member of (or not the token's): a 403."""
    assert response.status_code == 403, (response.status_code, response.content[:300])
    return response


def portal_probes(p: Probe, ids: dict) -> list:
    rng, portal = p.rng, p.portal
    probes = [
        ("portal ask page", lambda: portal.get(reverse("portal:ask"))),
        ("portal sources", lambda: portal.get(reverse("portal:sources"))),
        ("portal conversations", lambda: portal.get(reverse("portal:conversations"))),
        ("portal profile", lambda: portal.get(reverse("portal:profile"))),
        ("portal walks", lambda: portal.get(reverse("portal:walks"))),
        ("portal ask", lambda: portal.post(reverse("portal:ask"), {"question": rng.choice(QUESTIONS)})),
        ("portal ask stream", lambda: portal.post(reverse("portal:ask-stream"), {"question": rng.choice(QUESTIONS)})),
    ]
    for pk in ids["document"]:
        probes.append((f"portal document {pk}", lambda pk=pk: portal.get(reverse("portal:document", args=[pk]))))
        probes.append(  # the cited page's viewer, and the kept original PDF (portal.viewer)
            (f"portal viewer {pk}", lambda pk=pk: portal.get(f"{reverse('portal:document-view', args=[pk])}?chunk=0"))
        )
        probes.append(
            (f"portal original {pk}", lambda pk=pk: portal.get(reverse("portal:document-original", args=[pk, 1])))
        )
    for pk in ids["walk"]:
        probes.append((f"portal walk {pk}", lambda pk=pk: portal.get(reverse("portal:walk", args=[pk]))))
        probes.append(
            (
                f"htmx walk state {pk}",
                lambda pk=pk: portal.get(reverse("portal:walk-state", args=[pk]), HTTP_HX_REQUEST="true"),
            )
        )
        probes.append(
            (
                f"portal steer walk {pk}",
                lambda pk=pk: portal.post(reverse("portal:walk-steer", args=[pk]), {"action": "stop"}),
            )
        )
    for pk in ids["conversation"]:
        probes.append(
            (f"portal conversation {pk}", lambda pk=pk: portal.get(f"{reverse('portal:ask')}?conversation={pk}"))
        )
    for pk in _sample(rng, ids["conversation"], p.own_conversations):
        probes.append(
            (
                f"portal follow-up in {pk}",
                lambda pk=pk: portal.post(
                    reverse("portal:ask"), {"question": rng.choice(QUESTIONS), "conversation": pk}
                ),
            )
        )
    for pk in ids["conversation"]:
        url = reverse("portal:conversation", args=[pk])
        probes.append((f"portal conversation page {pk}", lambda u=url: portal.get(u)))
        probes.append((f"htmx conversation turns {pk}", lambda u=url: portal.get(u, HTTP_HX_REQUEST="true")))
    for pk in _sample(rng, ids["conversation"], p.own_conversations):
        probes.append((f"portal delete conversation {pk}", lambda pk=pk: _portal_delete_unless_own(portal, p, pk)))
    for pk in ids["trace"]:
        form = {"trace": pk, "rating": "down", "citation": rng.choice(["", "1"])}
        probes.append((f"portal feedback on {pk}", lambda f=form: portal.post(reverse("portal:feedback"), f)))
        probes.append(
            (
                f"htmx feedback on {pk}",
                lambda f=form: portal.post(reverse("portal:feedback"), f, HTTP_HX_REQUEST="true"),
            )
        )
        n = rng.choice([1, 2])
        url = reverse("portal:citation-open", args=[pk, n])
        probes.append((f"portal citation link {url}", lambda u=url: portal.get(u)))
    for pk in ids["document"]:
        url = f"{reverse('portal:document', args=[pk])}?version=1&diff={rng.choice([1, 2])}"
        probes.append((f"htmx diff {url}", lambda u=url: portal.get(u, HTTP_HX_REQUEST="true")))
    for name in ids["source"]:
        form = {rng.choice(["preferred_sources", "muted_sources"]): [name], "about": "probe"}
        probes.append(
            (
                f"htmx profile save {form}",
                lambda f=form: portal.post(reverse("portal:profile"), f, HTTP_HX_REQUEST="true"),
            )
        )
    if p.who != "roamer":  # a member of one tenant cannot switch to another (the roamer may: both are theirs)
        for slug in ids["tenant"]:
            form = {"tenant": slug, "next": reverse("portal:sources")}
            probes.append(
                (
                    f"htmx switch to tenant {slug}",
                    lambda f=form: portal.post(reverse("portal:tenant-switch"), f, HTTP_HX_REQUEST="true"),
                )
            )
    return probes


def _portal_delete_unless_own(portal, p: Probe, pk: int):
    """The portal's delete of another's conversation must be a 404 (the user's own are kept)."""
    if pk in p.own_conversations:
        return portal.get(reverse("portal:conversation", args=[pk]))
    response = portal.post(reverse("portal:conversation-delete", args=[pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 404, (p.user.username, pk, response.status_code)
    return response


def admin_probes(p: Probe, ids: dict, worlds) -> list:
    portal = p.portal
    probes = []
    others = [w for w in worlds.values() if w is not p.world]
    # Words of the other tenant's titles and text, not their markers (the search box echoes the query).
    words = ["Cycling", "Board", "Private", "tyre", "handbook"]
    for model in admin.site._registry:
        opts = model._meta
        changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        probes.append((f"admin {changelist}", lambda u=changelist: portal.get(u)))
        probes.append((f"admin {changelist} search", lambda u=changelist: portal.get(u, {"q": p.rng.choice(words)})))
        # Every other tenant's row of this model, by id (change pages).
        rows = [row for row in model._default_manager.all()[:200] if _tenant_id(row) in {w.tenant.pk for w in others}]
        for row in p.rng.sample(rows, min(len(rows), 6)):
            url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[row.pk])
            probes.append((f"admin {url}", lambda u=url: portal.get(u, follow=True)))
    return probes


def _tenant_id(row):
    if isinstance(row, Tenant):
        return row.pk
    for path in ("tenant_id", "document.tenant_id", "membership.tenant_id", "trace.tenant_id"):
        value = row
        try:
            for part in path.split("."):
                value = getattr(value, part)
        except AttributeError:
            continue
        return value
    return None


def command_probes(p: Probe, worlds) -> list:
    def run(name, *args):
        out = io.StringIO()
        try:
            call_command(name, *args, stdout=out, stderr=io.StringIO())
        except CommandError as exc:
            return str(exc)
        return out.getvalue()

    probes = []
    for slug in worlds:
        question = p.rng.choice(QUESTIONS)
        mode = p.rng.choice(MODES)
        probes.append(
            (
                f"manage.py search --tenant {slug}",
                lambda s=slug, q=question, m=mode: run(
                    "search", q, "--tenant", s, "--mode", m, "-k", "50", "--json", "--user", p.user.username
                ),
            )
        )
        probes.append(
            (
                f"manage.py ask --tenant {slug}",
                lambda s=slug, q=question: run(
                    "ask", q, "--tenant", s, "--extractive", "--json", "--user", p.user.username
                ),
            )
        )
    return probes


def test_no_user_of_any_role_or_grant_sees_a_document_they_may_not_see_anywhere(worlds, capsys):
    seed = _seed()
    with capsys.disabled():
        print(f"\nisolation seed: {seed} (rerun with KB_ISOLATION_SEED={seed})")
    rng = random.Random(seed)
    ids = object_ids(worlds)
    users = [(slug, who) for slug, world in worlds.items() for who in world.users]
    rng.shuffle(users)
    total = 0
    for slug, who in users:
        probe = Probe(worlds, slug, who, rng)
        probes = (
            api_probes(probe, ids)
            + portal_probes(probe, ids)
            + admin_probes(probe, ids, worlds)
            + side_door_probes(probe, ids)
        )
        rng.shuffle(probes)
        for what, call in probes:
            probe.response(what, call())
        for what, call in command_probes(probe, worlds):
            probe.check(what, call())
        total += probe.checked
    with capsys.disabled():
        print(f"isolation: {total} responses of {len(users)} users checked, 0 leaks")
    assert total > 1000


@functools.cache
def _seed() -> int:
    """The run's seed (one per process: the worlds' drawn permissions and the probes' order)."""
    return int(os.environ.get("KB_ISOLATION_SEED") or random.SystemRandom().randrange(2**32))


@pytest.fixture
def tenant_filter_removed(monkeypatch, worlds):
    """A deliberately broken build: ``for_tenant`` keeps every tenant's rows, and the retrievers'
    SQL names the OTHER tenant wherever it names one (as ``tests/security/test_rls.py``)."""
    acme, bolt = (worlds[slug].tenant.pk for slug in ("acme", "bolt"))
    other = {acme: bolt, bolt: acme}
    monkeypatch.setattr(TenantScopedQuerySet, "for_tenant", lambda self, tenant: self)
    params = RetrievalFilter.params
    monkeypatch.setattr(
        RetrievalFilter, "params", lambda self: {**params(self), "filter_tenant": other.get(self.tenant_id, 0)}
    )


def test_with_the_tenant_filter_removed_row_level_security_alone_keeps_tenants_apart(
    worlds, tenant_filter_removed, capsys
):
    """The API and portal probes of users of every role in the broken build: not one document of
    the other tenant (access rules inside a tenant are the application's, not RLS's, so only other
    tenants' documents count here; a broken build may fail with a 500, never leak)."""
    seed = _seed()
    with capsys.disabled():
        print(f"\nisolation (tenant filter removed) seed: {seed} (rerun with KB_ISOLATION_SEED={seed})")
    rng = random.Random(seed)
    ids = object_ids(worlds)
    users = [(slug, who) for slug, world in worlds.items() for who in world.users if who != "roamer"]
    total = 0
    for slug, who in rng.sample(users, 6):
        probe = Probe(worlds, slug, who, rng, cross_tenant_only=True)
        probes = [
            (what, call)
            for what, call in api_probes(probe, ids) + portal_probes(probe, ids)
            if "naming tenant" not in what and "delete" not in what.lower()  # those assert status codes
        ]
        for what, call in probes:
            probe.response(what, call(), allow_errors=True)
        total += probe.checked
    with capsys.disabled():
        print(f"isolation (tenant filter removed): {total} responses checked, 0 leaks")
    assert total > 300


def test_the_broken_build_without_row_level_security_does_leak(worlds, tenant_filter_removed, settings):
    """The control: the build above is really broken, so the test before can fail."""
    settings.KB_RLS = False
    probe = Probe(worlds, "acme", "member", random.Random(0), cross_tenant_only=True)
    with pytest.raises(AssertionError, match="LEAK"):
        probe.response("documents", probe.api.get("/api/v1/documents/?limit=200"))


def test_the_probes_would_catch_a_leak(worlds):
    """The check is not vacuous: an owner of acme sees acme's board document, which a member may not."""
    member = Probe(worlds, "acme", "member", random.Random(0))
    owner = client_for(worlds["acme"].users["owner"])
    body = owner.get(f"/api/v1/documents/{worlds['acme'].documents['board'].pk}/").content
    with pytest.raises(AssertionError, match="LEAK"):
        member.check("owner's view", body)


def test_the_side_door_probes_would_catch_a_leak(worlds, monkeypatch):
    """The side doors are really closed by the guards: with the folder grants switched off, an
    admin's folder source at the other tenant's uploads shows that tenant's restricted text."""
    from knowledge.folder_grants import path_real
    from knowledge.services import sources as source_services

    monkeypatch.setattr(source_services, "folder_location_check", lambda *, tenant, location: path_real(location))
    monkeypatch.setattr(folder_connector, "folder_location_check", lambda *, tenant, location: path_real(location))
    monkeypatch.setattr(folder_grants, "path_in_data_dir", lambda path: False)
    probe = Probe(worlds, "acme", "admin", random.Random(0))
    bolt_uploads = next(f for f in object_ids(worlds)["side_doors"]["folders"] if f.endswith("/bolt"))
    with pytest.raises(AssertionError, match="LEAK"):
        probe.response(
            "folder at bolt's uploads",
            _side_door(probe.api, {"name": "door", "kind": "folder", "location": bolt_uploads}, "board handbook note"),
        )
