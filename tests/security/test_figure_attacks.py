"""Figures' pictures across the tenant boundary: the portal's
``/documents/<id>/versions/<n>/figures/<index>.png`` and the API's
``/api/v1/documents/<id>/versions/<n>/figures/<index>.png`` (token, ``Bearer``, session).

The world: tenant ``victim`` (the ``corpus`` tenant) holds a .docx whose red chart is kept as its
figure 0; tenant ``other`` (the attacker) holds a .docx of its own whose blue chart is its figure 0,
so a test that reaches a picture can tell whose it got. Another tenant's member, by every way in,
gets for the victim's picture exactly the 404 it gets for a document that does not exist (the
same status and, but for the id it named, the same body); a member the access rules hide the
document from gets that 404 too; naming the victim's tenant (``X-Tenant``, the portal's tenant
switch, a membership token of another tenant) is a 403 that reads the same whether the tenant
exists or not; and no version or index number, however large, is a 500.
"""

from __future__ import annotations

import io
import re

import pytest
from django.urls import reverse
from PIL import Image
from rest_framework.test import APIClient

from core.memberships import membership_token_create
from core.models import Membership
from knowledge.access import access_rule_grant
from knowledge.figures import figure_path
from knowledge.ingestion.readers import read_bytes
from knowledge.models import Document
from knowledge.originals import tenant_originals_folder
from knowledge.services import documents_ingest
from tests.api.conftest import client_for
from tests.factories import MembershipFactory, SourceFactory, TenantFactory

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RED, BLUE = (200, 30, 30), (30, 30, 200)


@pytest.fixture(autouse=True)
def no_ocr(settings):
    """Pictures keep their alternative text: no OCR engine is needed."""
    settings.KB_OCR_ENGINE = "off"


def chart_docx(colour: tuple[int, int, int], words: str) -> bytes:
    """A .docx: a sentence of ``words``, then an 800 x 400 chart of ``colour`` bars on white
    (alternative text "Chart of <words>") with a caption paragraph under it."""
    import docx
    from docx.shared import Inches

    chart = Image.new("RGB", (800, 400), "white")
    for number in range(4):
        chart.paste(colour, (60 + number * 180, 100, 180 + number * 180, 380))
    png = io.BytesIO()
    chart.save(png, format="PNG")
    document = docx.Document()
    document.add_paragraph(f"The {words} are charted below.")
    document.add_picture(io.BytesIO(png.getvalue()), width=Inches(5))
    for description in document.element.body.xpath(".//wp:docPr"):
        description.set("descr", f"Chart of {words}")
    document.add_paragraph(f"Figure 1: {words}", style="Caption")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def ingested(tenant, data: bytes, name: str, capture) -> Document:
    """``data`` read by the real .docx reader and ingested into ``tenant`` (its picture kept on commit)."""
    with capture(execute=True):
        documents_ingest(
            tenant=tenant, source=SourceFactory(tenant=tenant, name="reports"), documents=read_bytes(data, name=name)
        )
    return Document.objects.for_tenant(tenant).get(external_id=name)


@pytest.fixture
def victim_chart(corpus, django_capture_on_commit_callbacks):
    return ingested(corpus, chart_docx(RED, "vault deposits"), "vault.docx", django_capture_on_commit_callbacks)


@pytest.fixture
def attacker_chart(other_tenant_corpus, django_capture_on_commit_callbacks):
    data = chart_docx(BLUE, "bicycle sales")
    return ingested(other_tenant_corpus, data, "bikes.docx", django_capture_on_commit_callbacks)


def portal_url(document_id: int, number: int = 1, index: int = 0) -> str:
    return reverse("portal:document-figure", args=[document_id, number, index])


def api_url(document_id: int, number: int = 1, index: int = 0) -> str:
    return f"/api/v1/documents/{document_id}/versions/{number}/figures/{index}.png"


def missing_id() -> int:
    """A document id no tenant has."""
    return (Document.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1000


def colour_of(response) -> tuple[int, int, int]:
    """The colour of the picture's bars: the pixel in the middle of its first bar."""
    picture = Image.open(io.BytesIO(response.content)).convert("RGB")
    return picture.getpixel((picture.width * 120 // 800, picture.height * 240 // 400))


def masked(response, named: int | str) -> tuple[int, str]:
    """The status and body, the id (or slug) it named and any per-response token masked."""
    body = response.content.decode("utf-8", "replace").replace(str(named), "<named>")
    return response.status_code, re.sub(r'(nonce|csrfmiddlewaretoken|value)="[^"]*"', r'\1="-"', body)


def attacker_clients(attacker) -> dict[str, tuple[object, callable]]:
    """Every way ``attacker`` (a membership) may ask for a picture: the portal's session, and the
    API's session, user token, membership token (``Token`` and ``Bearer``); each with its URL."""
    portal = APIClient()
    portal.force_login(attacker.user)
    api_session = APIClient()
    api_session.force_login(attacker.user)
    key = membership_token_create(membership=attacker, name="figures")[1]
    token, bearer = APIClient(), APIClient()
    token.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return {
        "portal session": (portal, portal_url),
        "api session": (api_session, api_url),
        "api user token": (client_for(attacker.user), api_url),
        "api membership token": (token, api_url),
        "api bearer": (bearer, api_url),
    }


ROLES = [Membership.Role.VIEWER, Membership.Role.MEMBER, Membership.Role.ADMIN, Membership.Role.OWNER]


@pytest.mark.parametrize("role", ROLES)
def test_another_tenants_member_gets_for_the_victims_picture_the_404_of_a_missing_document(
    victim_chart, attacker_chart, role
):
    attacker = MembershipFactory(tenant=attacker_chart.tenant, role=role)
    absent = missing_id()
    for way, (client, url) in attacker_clients(attacker).items():
        own = client.get(url(attacker_chart.pk))
        assert own.status_code == 200 and colour_of(own) == BLUE, way  # the way in works

        stolen = client.get(url(victim_chart.pk))
        missing = client.get(url(absent))

        assert stolen.status_code == 404, (way, stolen.status_code)
        assert PNG_SIGNATURE not in stolen.content and b"vault" not in stolen.content.lower()
        assert masked(stolen, victim_chart.pk) == masked(missing, absent), way


def test_the_victims_picture_is_on_disk_where_the_attackers_request_resolves_nothing(victim_chart, attacker_chart):
    """The picture's path is built from the caller's tenant and the ids, never from the document's:
    asking for the victim's document id reads the attacker's tenant folder, where nothing lies."""
    kept = figure_path(tenant_id=victim_chart.tenant_id, document_id=victim_chart.pk, number=1, index=0)
    assert kept.is_file()
    steered = figure_path(tenant_id=attacker_chart.tenant_id, document_id=victim_chart.pk, number=1, index=0)
    assert steered.is_relative_to(tenant_originals_folder(attacker_chart.tenant_id)) and not steered.exists()
    attacker = MembershipFactory(tenant=attacker_chart.tenant)
    for way, (client, url) in attacker_clients(attacker).items():
        for number, index in [(1, 0), (1, 1), (2, 0), (0, 0)]:
            response = client.get(url(victim_chart.pk, number, index))
            assert response.status_code == 404 and PNG_SIGNATURE not in response.content, (way, number, index)
    assert not steered.exists()


@pytest.mark.parametrize(
    "ids", [("0", "1", "0"), ("1", "0", "0"), ("1", "1", "4711")], ids=["document 0", "v0", "index"]
)
def test_ids_the_victim_may_have_are_404_to_another_tenant_whatever_they_name(victim_chart, attacker_chart, ids):
    attacker = MembershipFactory(tenant=attacker_chart.tenant)
    document = str(victim_chart.pk) if ids[0] == "1" else ids[0]
    for way, (client, url) in attacker_clients(attacker).items():
        response = client.get(url(document, ids[1], ids[2]))
        assert response.status_code == 404 and PNG_SIGNATURE not in response.content, way


def test_a_member_the_access_rules_hide_the_document_from_gets_the_404_of_a_missing_one(
    corpus, victim_chart, member, client
):
    reader = MembershipFactory(tenant=corpus).user
    access_rule_grant(tenant=corpus, document=victim_chart, user=reader)  # restricted to the reader
    hidden = MembershipFactory(tenant=corpus, role=Membership.Role.EDITOR)
    absent = missing_id()
    for way, (hider, url) in attacker_clients(hidden).items():
        response = hider.get(url(victim_chart.pk))
        assert response.status_code == 404 and PNG_SIGNATURE not in response.content, way
        assert masked(response, victim_chart.pk) == masked(hider.get(url(absent)), absent), way
    allowed = client_for(reader).get(api_url(victim_chart.pk))
    assert allowed.status_code == 200 and colour_of(allowed) == RED  # the rule, not a broken picture


@pytest.mark.parametrize("role", [Membership.Role.VIEWER, Membership.Role.ADMIN])
def test_naming_the_victims_tenant_in_x_tenant_is_a_403_that_reads_as_for_a_tenant_that_does_not_exist(
    victim_chart, attacker_chart, role
):
    attacker = MembershipFactory(tenant=attacker_chart.tenant, role=role)
    victim_slug = victim_chart.tenant.slug
    for way, (client, url) in attacker_clients(attacker).items():
        named = client.get(url(victim_chart.pk), HTTP_X_TENANT=victim_slug)
        nowhere = client.get(url(victim_chart.pk), HTTP_X_TENANT="no-such-tenant")
        assert named.status_code == nowhere.status_code == 403, (way, named.status_code)
        assert PNG_SIGNATURE not in named.content
        assert masked(named, victim_slug) == masked(nowhere, "no-such-tenant"), way


def test_switching_the_portal_to_the_victims_tenant_is_refused_and_the_picture_stays_hidden(
    victim_chart, attacker_chart, client
):
    attacker = MembershipFactory(tenant=attacker_chart.tenant, role=Membership.Role.VIEWER)
    client.force_login(attacker.user)

    switched = client.post(reverse("portal:tenant-switch"), {"tenant": victim_chart.tenant.slug})

    assert switched.status_code == 403
    assert client.session.get("kb_tenant") != victim_chart.tenant.slug
    assert client.get(portal_url(victim_chart.pk)).status_code == 404


def test_a_membership_token_of_one_tenant_never_reaches_the_other_tenant_of_a_user_in_both(
    corpus, victim_chart, attacker_chart
):
    """A user who belongs to both tenants hands out a token of the attacker's tenant only: the
    token acts there, whatever it names."""
    both = MembershipFactory(tenant=attacker_chart.tenant)
    MembershipFactory(tenant=corpus, user=both.user)
    key = membership_token_create(membership=both, name="bikes only")[1]
    for keyword in ("Token", "Bearer"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"{keyword} {key}")
        assert client.get(api_url(attacker_chart.pk)).status_code == 200
        assert client.get(api_url(victim_chart.pk)).status_code == 404
        named = client.get(api_url(victim_chart.pk), HTTP_X_TENANT=corpus.slug)
        assert named.status_code == 403 and PNG_SIGNATURE not in named.content


HUGE = ["2", "2147483648", "9223372036854775808", "9" * 40, "9" * 4300, "9" * 5000, "00000000000000000001"]


@pytest.mark.parametrize("number", HUGE, ids=lambda n: f"{len(n)} digits {n[:6]}")
def test_enumerating_versions_and_indexes_is_a_404_never_a_500(victim_chart, member, number):
    """The member's own document: any version or index it lacks is a plain 404 (the test client
    re-raises a view's exception, so a 500 fails here)."""
    portal = APIClient()
    portal.force_login(member)
    api = client_for(member)
    document = str(victim_chart.pk)
    probes = [(document, number, "0"), (document, "1", number), (number, "1", "0"), (number, number, number)]
    for client, url in ((portal, portal_url), (api, api_url)):
        for ids in probes:
            response = client.get(url(*ids))
            expected = 200 if ids in [(document, "00000000000000000001", "0")] else 404
            assert response.status_code == expected, (url.__name__, ids, response.status_code)
            if expected == 404:
                assert PNG_SIGNATURE not in response.content and b"Traceback" not in response.content


@pytest.mark.parametrize(
    "tail",
    [
        "-1/versions/1/figures/0.png",
        "{id}/versions/-1/figures/0.png",
        "{id}/versions/1/figures/-1.png",
        "{id}/versions/1/figures/0.png/..",
        "{id}/versions/1/figures/..%2f0.png",
        "%2e%2e/{id}/versions/1/figures/0.png",
        "{id}/versions/1/figures/0.PNG",
        "{id}/versions/1/figures/0.png.png",
        "{id}/versions/1.0/figures/0.png",
        "{id}/versions/+1/figures/0.png",
        "{id}/versions/\u0661/figures/0.png",
    ],
)
def test_a_figure_url_that_is_not_plain_digits_is_not_routed(victim_chart, attacker_chart, tail):
    attacker = MembershipFactory(tenant=attacker_chart.tenant)
    for way, (client, _url) in attacker_clients(attacker).items():
        prefix = "/api/v1/documents/" if way.startswith("api") else "/documents/"
        response = client.get(prefix + tail.format(id=victim_chart.pk))
        assert response.status_code == 404, (way, tail, response.status_code)
        assert PNG_SIGNATURE not in response.content


def test_a_signed_out_caller_gets_no_picture(victim_chart):
    anonymous = APIClient()
    assert anonymous.get(api_url(victim_chart.pk)).status_code == 401
    portal = anonymous.get(portal_url(victim_chart.pk))
    assert portal.status_code == 302 and "/login" in portal["Location"]
    for keyword in ("Token", "Bearer"):
        forged = APIClient()
        forged.credentials(HTTP_AUTHORIZATION=f"{keyword} kbm_forged-key")
        assert forged.get(api_url(victim_chart.pk)).status_code == 401


def test_a_tenant_without_figures_of_its_own_sees_none_of_the_victims(victim_chart):
    stranger = MembershipFactory(tenant=TenantFactory(slug="stranger"), role=Membership.Role.OWNER)
    for way, (caller, url) in attacker_clients(stranger).items():
        assert caller.get(url(victim_chart.pk)).status_code == 404, way
