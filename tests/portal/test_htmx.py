"""The portal with htmx (django-htmx): a request made by htmx (``HX-Request``) gets the fragment it
swaps in, any other request the full page, so every form also works without JavaScript."""

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse

from core.models import Membership
from knowledge.models import Document
from people.conversations import conversation_ask
from people.models import Conversation
from retrieval.request import AnswerRequest
from tests.factories import MembershipFactory

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def no_llm(monkeypatch):
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: None)


def is_fragment(response) -> bool:
    html = response.content.decode()
    return "<html" not in html and "<header" not in html


def test_every_page_loads_htmx_from_the_package_with_a_config_the_csp_allows(client, member, corpus):
    client.force_login(member)
    page = client.get(reverse("portal:ask"))
    html = page.content.decode()
    assert '<script src="/static/django_htmx/htmx-2.min.js" defer></script>' in html
    assert '"allowEval": false' in html and '"includeIndicatorStyles": false' in html
    assert "'unsafe-eval'" not in page["Content-Security-Policy"]
    assert finders.find("django_htmx/htmx-2.min.js")  # collected with the static files: no build step


def test_saving_the_profile_with_htmx_returns_the_form_saying_it_is_saved(client, member, corpus):
    client.force_login(member)
    response = client.post(reverse("portal:profile"), {"team": "Kitchen", "preferred_sources": ["handbook"]}, **HX)
    assert response.status_code == 200 and is_fragment(response)
    html = response.content.decode()
    assert html.startswith("<form") or 'id="profile-form"' in html
    assert "Your profile is saved." in html and 'value="Kitchen"' in html
    page = client.post(reverse("portal:profile"), {"team": "Bakery"})
    assert not is_fragment(page) and "Your profile is saved." in page.content.decode()  # no-JS: the page


def test_a_bad_profile_with_htmx_shows_the_error_in_the_form(client, member, corpus):
    client.force_login(member)
    response = client.post(reverse("portal:profile"), {"preferred_sources": ["no-such-source"]}, **HX)
    assert is_fragment(response)
    assert "errorlist" in response.content.decode() and "Your profile is saved." not in response.content.decode()


def test_a_conversation_unfolds_in_place_with_htmx_and_is_a_page_without(client, member, corpus):
    client.force_login(member)
    run = conversation_ask(AnswerRequest(question="How long should spaghetti cook?"), tenant=corpus, user=member)
    url = reverse("portal:conversation", args=[run.conversation_id])
    listing = client.get(reverse("portal:conversations")).content.decode()
    assert f'hx-get="{url}"' in listing and 'hx-trigger="toggle once"' in listing
    fragment = client.get(url, **HX)
    assert is_fragment(fragment) and "How long should spaghetti cook?" in fragment.content.decode()
    page = client.get(url)
    assert not is_fragment(page) and "How long should spaghetti cook?" in page.content.decode()


def test_deleting_a_conversation_with_htmx_removes_it_and_anothers_is_a_404(client, member, corpus):
    client.force_login(member)
    mine = conversation_ask(AnswerRequest(question="How long should spaghetti cook?"), tenant=corpus, user=member)
    someone = MembershipFactory(tenant=corpus).user
    theirs = conversation_ask(AnswerRequest(question="How long should spaghetti cook?"), tenant=corpus, user=someone)
    refused = client.post(reverse("portal:conversation-delete", args=[theirs.conversation_id]), **HX)
    assert refused.status_code == 404
    deleted = client.post(reverse("portal:conversation-delete", args=[mine.conversation_id]), **HX)
    assert deleted.status_code == 200 and deleted.content == b""
    assert list(Conversation.objects.values_list("pk", flat=True)) == [theirs.conversation_id]
    plain = conversation_ask(AnswerRequest(question="Which sauce?"), tenant=corpus, user=member)
    response = client.post(reverse("portal:conversation-delete", args=[plain.conversation_id]))
    assert response.status_code == 302 and response["Location"] == reverse("portal:conversations")


def test_switching_tenant_with_htmx_loads_the_target_page_anew(client, corpus, other_tenant_corpus):
    membership = MembershipFactory(tenant=corpus, role=Membership.Role.MEMBER)
    Membership.objects.create(user=membership.user, tenant=other_tenant_corpus, role=Membership.Role.MEMBER)
    client.force_login(membership.user)
    sources = reverse("portal:sources")
    response = client.post(reverse("portal:tenant-switch"), {"tenant": corpus.slug, "next": sources}, **HX)
    assert response["HX-Redirect"] == sources
    refused = client.post(reverse("portal:tenant-switch"), {"tenant": "nobody-s-tenant"}, **HX)
    assert refused.status_code == 403


def test_a_conversation_page_is_not_where_a_tenant_switch_lands(client, corpus, other_tenant_corpus):
    membership = MembershipFactory(tenant=corpus, role=Membership.Role.MEMBER)
    Membership.objects.create(user=membership.user, tenant=other_tenant_corpus, role=Membership.Role.MEMBER)
    client.force_login(membership.user)
    response = client.post(reverse("portal:tenant-switch"), {"tenant": corpus.slug, "next": "/conversations/7/"}, **HX)
    assert response["HX-Redirect"] == reverse("portal:ask")


def test_a_version_diff_loads_into_the_page_with_htmx(client, versioned, member):
    client.force_login(member)
    document = Document.objects.for_tenant(versioned).get(external_id="ref/databases")
    url = reverse("portal:document", args=[document.pk])
    page = client.get(url).content.decode()
    assert 'hx-get="?version=2&amp;diff=1" hx-target="#diff" hx-push-url="true"' in page
    fragment = client.get(f"{url}?version=2&diff=1", **HX)
    assert is_fragment(fragment) and "Changes from v1 to v2" in fragment.content.decode()
    assert "<ins>" in fragment.content.decode()
    restore = client.get(f"{url}?version=2&diff=1", HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HX)
    assert not is_fragment(restore)  # htmx restoring history needs the whole page


def test_an_htmx_request_after_the_session_ended_is_sent_to_sign_in_as_a_page(client, db):
    response = client.post(
        reverse("portal:feedback"), {"trace": 1, "rating": "up"}, HTTP_HX_CURRENT_URL="http://testserver/?x=1", **HX
    )
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith(reverse("portal:login") + "?next=/")
