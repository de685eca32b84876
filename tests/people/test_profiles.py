"""Member profiles (service, API, portal, admin) and the portal's sources page."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from core.errors import InvalidInput
from people.models import Profile
from people.services import profile_get, profile_update
from tests.api.conftest import client_for
from tests.factories import SourceFactory


@pytest.fixture
def sources(corpus, source):
    """The corpus tenant's sources: ``handbook`` (three documents) and an empty ``howto``."""
    return {"handbook": source, "howto": SourceFactory(tenant=corpus, name="howto")}


def test_a_member_gets_an_empty_profile_on_first_use(corpus, member):
    profile = profile_get(user=member)
    assert (profile.title, profile.expertise, profile.membership.user) == ("", "", member)
    assert profile_get(user=member).pk == profile.pk


def test_updating_a_profile_changes_only_the_fields_given(sources, member):
    profile_update(user=member, title="Support engineer", team="Payments", preferred_sources=["howto"])
    profile = profile_update(user=member, expertise="expert", language="nl")
    assert (profile.title, profile.team, profile.expertise, profile.language) == (
        "Support engineer",
        "Payments",
        "expert",
        "nl",
    )
    assert list(profile.preferred_sources.values_list("name", flat=True)) == ["howto"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"preferred_sources": ["nowhere"]}, "unknown source"),
        ({"preferred_sources": ["howto"], "muted_sources": ["howto"]}, "both preferred and muted"),
        ({"expertise": "guru"}, "expertise must be one of"),
        ({"language": "xx-nope"}, "unknown language code"),
        ({"about": "x" * 2001}, "limit is 2000"),
        ({"team": "a\x00b"}, "NUL"),
        ({"salary": 1}, "Unknown profile field"),
    ],
)
def test_a_bad_profile_change_is_refused_and_nothing_changes(sources, member, changes, message):
    profile_update(user=member, title="Before")
    with pytest.raises(InvalidInput, match=message):
        profile_update(user=member, title="After", **changes)
    profile = Profile.objects.get()
    assert profile.title == "Before" and not profile.preferred_sources.exists()


def test_another_tenants_source_cannot_be_preferred(sources, member, other_tenant_corpus):
    with pytest.raises(InvalidInput, match="unknown source"):
        profile_update(user=member, preferred_sources=["secret"])  # the other tenant's source


def test_the_api_reads_and_patches_the_callers_profile(sources, member):
    api = client_for(member)
    response = api.patch(
        reverse("api:profile"), {"team": "Docs", "muted_sources": ["handbook"], "expertise": "beginner"}, format="json"
    )
    assert response.status_code == 200, response.content
    body = api.get(reverse("api:profile")).json()
    assert (body["team"], body["muted_sources"], body["expertise"]) == ("Docs", ["handbook"], "beginner")


def test_the_api_refuses_a_bad_profile_with_a_400_naming_the_field(sources, member):
    response = client_for(member).patch(reverse("api:profile"), {"preferred_sources": "howto"}, format="json")
    assert response.status_code == 400
    assert "preferred_sources" in response.content.decode()


def test_the_portal_profile_page_saves_the_form(client, sources, member):
    client.force_login(member)
    page = client.get(reverse("portal:profile")).content.decode()
    assert 'value="howto"' in page and 'value="handbook"' in page
    response = client.post(
        reverse("portal:profile"),
        {
            "title": "Analyst",
            "team": "",
            "expertise": "intermediate",
            "language": "",
            "preferred_sources": ["handbook"],
        },
    )
    assert "Your profile is saved." in response.content.decode()
    profile = Profile.objects.get()
    assert profile.title == "Analyst" and list(profile.preferred_sources.values_list("name", flat=True)) == ["handbook"]


def test_the_portal_profile_page_shows_why_a_change_was_refused(client, sources, member):
    client.force_login(member)
    response = client.post(reverse("portal:profile"), {"preferred_sources": ["howto"], "muted_sources": ["howto"]})
    assert "cannot be both preferred and muted" in response.content.decode()


def test_the_sources_page_counts_documents_and_chunks_and_shows_freshness(client, sources, member):
    client.force_login(member)
    page = client.get(reverse("portal:sources")).content.decode()
    handbook = page[page.index('<th scope="row">handbook</th>') :].split("</tr>")[0]
    assert '<td data-label="Documents" class="num">3</td>' in handbook  # three documents
    assert "undated" in handbook and "never" not in handbook
    howto = page[page.index('<th scope="row">howto</th>') :].split("</tr>")[0]
    assert '<td data-label="Documents" class="num">0</td>' in howto and "never" in howto


def test_the_sources_page_shows_only_the_members_tenant(client, sources, member, other_tenant_corpus):
    client.force_login(member)
    assert "secret" not in client.get(reverse("portal:sources")).content.decode()


def test_a_tenant_admin_picks_profile_sources_of_their_tenant_only(client, sources, admin_member, other_tenant_corpus):
    admin_member.user_permissions.add(*Permission.objects.filter(codename__in=["change_profile", "view_profile"]))
    client.force_login(admin_member)
    profile = profile_get(user=admin_member)
    page = client.get(reverse("admin:people_profile_change", args=[profile.pk])).content.decode()
    assert ">howto<" in page or "howto" in page
    assert "secret" not in page


def test_a_restricted_source_the_member_may_not_see_reads_as_unknown(sources, member, corpus):
    from knowledge.access import access_group_save, access_rule_grant
    from tests.factories import MembershipFactory

    insider = MembershipFactory(tenant=corpus, role="member").user
    from knowledge.ingestion.readers import ReadDocument
    from knowledge.services import documents_ingest

    secret = SourceFactory(tenant=corpus, name="board-minutes")
    minutes = ReadDocument(external_id="board/1", title="Board minutes", text="The board met and agreed.")
    documents_ingest(tenant=corpus, source=secret, documents=[minutes])
    access_rule_grant(
        tenant=corpus, source=secret, group=access_group_save(tenant=corpus, name="board", members=[insider])
    )
    with pytest.raises(InvalidInput, match="unknown source"):
        profile_update(user=member, preferred_sources=["board-minutes"])
    profile = profile_update(user=insider, preferred_sources=["board-minutes"])
    assert [s.name for s in profile.preferred_sources.all()] == ["board-minutes"]
