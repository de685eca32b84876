"""Single sign-on in a real browser (Playwright driving Debian's chromium, headless): the login
page's button, the provider's own login form on another origin, and the redirects back, for the
portal (through the tenant's provider) and for the admin (a staff account: through the
installation's provider, since a tenant's provider never signs in staff)."""

import shutil

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.factories import MembershipFactory, UserFactory
from tests.portal.test_browser import CHROMIUM, db_read
from tests.sso.conftest import CLIENT_ID, CLIENT_SECRET, TENANT, USERS

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason=f"no chromium at {CHROMIUM} (apt-get install chromium)"
)


@pytest.fixture
def ann(acme):
    user = UserFactory(username="ann", email="ann@acme.example")
    MembershipFactory(user=user, tenant=acme, role="admin")
    return user


@pytest.fixture
def page(transactional_db, live_server, acme_sso, ann):
    """A page of a fresh headless chromium, launched once the database rows exist (Django refuses
    database calls from the test's thread while Playwright's event loop lives there)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser.new_page()
        browser.close()


def provider_login(page, idp) -> None:
    page.wait_for_url(f"{idp.url}/accounts/login/**")
    page.fill("input[name=username]", "ann")
    page.fill("input[name=password]", USERS["ann"]["password"])
    page.click("text=Log in at the provider")


def test_a_member_signs_in_to_the_portal_through_the_tenants_provider_in_chromium(page, live_server, idp, ann):
    page.goto(f"{live_server.url}/login/?tenant={TENANT}")
    page.click("text=Sign in with Acme IdP")
    provider_login(page, idp)

    page.wait_for_url(f"{live_server.url}/")
    expect(page.locator("header .user")).to_have_text("ann")
    role = db_read(lambda: ann.memberships.get().role)
    assert role == "editor"  # the provider's kb_roles claim: kb-editors -> editor


def test_a_staff_tenant_admin_signs_in_to_the_admin_through_the_installations_provider_in_chromium(
    page, live_server, idp, ann, settings
):
    db_read(lambda: type(ann).objects.filter(pk=ann.pk).update(is_staff=True))
    settings.KB_OIDC_ISSUER, settings.KB_OIDC_NAME = idp.issuer, "Company login"
    settings.KB_OIDC_CLIENT_ID, settings.KB_OIDC_CLIENT_SECRET = CLIENT_ID, CLIENT_SECRET
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.click("text=Sign in with Company login")
    provider_login(page, idp)

    page.wait_for_url(f"{live_server.url}/admin/")
    expect(page.locator("#user-tools")).to_contain_text("ann")
