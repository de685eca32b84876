"""The portal's tenant switcher: a user of several tenants picks one, kept in the session, and
every page (and the admin) acts in it; a tenant one does not belong to is never chosen."""

import pytest
from django.urls import reverse

from core.memberships import SESSION_KEY
from core.models import Membership
from knowledge.models import Document, Source
from tests.factories import MembershipFactory, TenantFactory

ASK = reverse("portal:ask")
SOURCES = reverse("portal:sources")
SWITCH = reverse("portal:tenant-switch")


@pytest.fixture
def both(corpus, other_tenant_corpus):
    """A member of ``corpus`` (slug ``tenant-N``) and of ``other``; ``other`` comes first by slug."""
    membership = MembershipFactory(tenant=corpus, role=Membership.Role.MEMBER)
    Membership.objects.create(user=membership.user, tenant=other_tenant_corpus, role=Membership.Role.MEMBER)
    return membership.user


def source_names(response) -> list[str]:
    return [s.name for s in response.context["sources"]]


def test_every_portal_page_shows_a_switcher_listing_the_users_tenants(client, both, corpus):
    client.force_login(both)
    for url in (ASK, SOURCES, reverse("portal:profile"), reverse("portal:conversations")):
        page = client.get(url).content.decode()
        assert '<label for="tenant-switch">Tenant</label>' in page, url
        assert f'<option value="{corpus.slug}"' in page and '<option value="other" selected>' in page, url


def test_a_user_of_one_tenant_sees_its_name_and_no_switcher(client, member, tenant):
    client.force_login(member)
    page = client.get(ASK).content.decode()
    assert "tenant-switch" not in page
    assert f'<span class="muted tenant-current" title="Your tenant">{tenant.name}</span>' in page


def test_until_they_switch_a_user_of_several_tenants_acts_in_the_first_by_slug(client, both):
    client.force_login(both)
    assert source_names(client.get(SOURCES)) == ["secret"]


def test_switching_keeps_the_choice_in_the_session_and_pages_show_that_tenant_only(client, both, corpus):
    client.force_login(both)
    response = client.post(SWITCH, {"tenant": corpus.slug, "next": SOURCES})
    assert response.status_code == 302 and response["Location"] == SOURCES
    assert client.session[SESSION_KEY] == corpus.slug
    page = client.get(SOURCES)
    assert source_names(page) == ["handbook"]
    assert '<option value="other">' in page.content.decode()  # still offered, not selected
    secret = Document.objects.for_tenant(Source.objects.get(name="secret").tenant).get()
    assert client.get(reverse("portal:document", args=[secret.pk])).status_code == 404
    client.post(SWITCH, {"tenant": "other"})
    assert client.get(reverse("portal:document", args=[secret.pk])).status_code == 200


def test_the_ask_page_answers_from_the_chosen_tenant(client, both, corpus):
    client.force_login(both)
    question = {"question": "How do I patch a bicycle tyre puncture?", "pipeline": "simple"}
    client.post(SWITCH, {"tenant": "other"})
    cited = {c["title"] for c in client.post(ASK, question).context["citations"]}
    assert cited == {"Secret bicycle tyre notes"}
    client.post(SWITCH, {"tenant": corpus.slug})
    cited = {c["title"] for c in client.post(ASK, question).context["citations"]}
    assert "Secret bicycle tyre notes" not in cited and "Fixing a flat bicycle tyre" in cited


def test_switching_to_a_tenant_one_is_not_a_member_of_is_a_403_and_changes_nothing(client, both, corpus):
    TenantFactory(slug="third")
    client.force_login(both)
    client.post(SWITCH, {"tenant": corpus.slug})
    for slug in ("third", "nowhere", ""):
        response = client.post(SWITCH, {"tenant": slug})
        assert response.status_code == 403
        assert client.session[SESSION_KEY] == corpus.slug
    assert source_names(client.get(SOURCES)) == ["handbook"]


def test_switching_never_redirects_off_site_or_to_the_left_tenants_objects(client, both, corpus):
    client.force_login(both)
    for target in ("https://evil.example/", "//evil.example/", "/documents/1/", "/?conversation=3"):
        assert client.post(SWITCH, {"tenant": corpus.slug, "next": target})["Location"] == ASK, target


def test_switching_is_a_post_and_needs_sign_in(client, both, corpus):
    assert client.post(SWITCH, {"tenant": corpus.slug})["Location"].startswith(reverse("portal:login"))
    client.force_login(both)
    assert client.get(SWITCH, {"tenant": corpus.slug}).status_code == 405


def test_a_removed_membership_falls_back_to_another_tenant(client, both, corpus):
    client.force_login(both)
    client.post(SWITCH, {"tenant": corpus.slug})
    Membership.objects.filter(user=both, tenant=corpus).delete()
    assert source_names(client.get(SOURCES)) == ["secret"]
    assert SESSION_KEY not in client.session


def test_the_profile_page_edits_the_profile_of_the_chosen_tenant(client, both, corpus):
    from people.models import Profile

    client.force_login(both)
    client.post(SWITCH, {"tenant": corpus.slug})
    client.post(reverse("portal:profile"), {"title": "Cook", "preferred_sources": ["handbook"]})
    profiles = {p.membership.tenant.slug: p.title for p in Profile.objects.filter(membership__user=both)}
    assert profiles == {corpus.slug: "Cook"}


# --- The admin follows the same choice -----------------------------------------------------------


@pytest.fixture
def admin_of_both(both, corpus):
    """Staff, admin of both tenants (with the knowledge permissions the demo grants)."""
    from django.contrib.auth.models import Permission

    Membership.objects.filter(user=both).update(role=Membership.Role.ADMIN)
    both.is_staff = True
    both.save()
    both.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["core", "knowledge"]))
    return both


def admin_sources(client) -> set[str]:
    response = client.get(reverse("admin:knowledge_source_changelist"))
    assert response.status_code == 200
    return {s.name for s in response.context["cl"].result_list}


def test_an_admin_of_two_tenants_administers_the_tenant_chosen_in_the_portal(client, admin_of_both, corpus):
    client.force_login(admin_of_both)
    assert admin_sources(client) == {"secret"}
    client.post(SWITCH, {"tenant": corpus.slug})
    assert admin_sources(client) == {"handbook"}
    secret = Source.objects.get(name="secret")
    assert client.get(reverse("admin:knowledge_source_change", args=[secret.pk])).status_code == 302  # not found


def test_choosing_a_tenant_where_one_is_only_a_member_does_not_open_its_admin(client, admin_of_both, corpus):
    Membership.objects.filter(user=admin_of_both, tenant=corpus).update(role=Membership.Role.MEMBER)
    client.force_login(admin_of_both)
    client.post(SWITCH, {"tenant": corpus.slug})
    assert admin_sources(client) == {"secret"}  # still the tenant they administer


def test_a_superuser_edits_a_users_memberships_on_the_user_page(client, both, corpus):
    from tests.factories import UserFactory

    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    page = client.get(reverse("admin:auth_user_change", args=[both.pk]))
    assert page.status_code == 200
    formset = next(f for f in page.context["inline_admin_formsets"] if f.formset.model is Membership)
    assert {form.instance.tenant.slug for form in formset.formset.forms if form.instance.pk} == {corpus.slug, "other"}
