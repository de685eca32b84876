"""Sign-in throttling (django-axes) on the portal's and the admin's login forms.

The limit is KB_LOGIN_FAILURE_LIMIT (default 5) failures per username and IP address; the pair is
then locked out with HTTP 429 and a page saying so, even with the right password.
"""

import pytest
from django.conf import settings
from django.urls import reverse

PORTAL_LOGIN = reverse("portal:login")
ADMIN_LOGIN = reverse("admin:login")
ASK = reverse("portal:ask")


def sign_in(client, url, username, password, address="10.0.0.1"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def fail(client, url, username, times, address="10.0.0.1"):
    return [sign_in(client, url, username, "wrong-password", address).status_code for _ in range(times)]


def test_the_default_limit_is_five_failures_for_fifteen_minutes():
    assert settings.AXES_FAILURE_LIMIT == 5
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 15 * 60
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_five_failed_portal_sign_ins_lock_the_account_out_even_with_the_right_password(client, member):
    assert fail(client, PORTAL_LOGIN, member.username, 4) == [200] * 4  # the form again, with its error
    locked = sign_in(client, PORTAL_LOGIN, member.username, "wrong-password")
    assert locked.status_code == 429
    page = locked.content.decode()
    assert "Too many failed sign-in attempts" in page and "Try again in 15 minutes" in page

    response = sign_in(client, PORTAL_LOGIN, member.username, "pass-word-123")
    assert response.status_code == 429
    assert client.get(ASK).status_code == 302  # still signed out


def test_failed_admin_sign_ins_lock_the_account_out_too(client, admin_member):
    assert fail(client, ADMIN_LOGIN, admin_member.username, 4) == [200] * 4
    assert sign_in(client, ADMIN_LOGIN, admin_member.username, "wrong-password").status_code == 429
    response = sign_in(client, ADMIN_LOGIN, admin_member.username, "pass-word-123")
    assert response.status_code == 429
    assert b"Too many failed sign-in attempts" in response.content
    assert client.get(reverse("admin:index")).status_code == 302


def test_a_successful_sign_in_clears_the_earlier_failures(client, member):
    assert fail(client, PORTAL_LOGIN, member.username, 4) == [200] * 4
    assert sign_in(client, PORTAL_LOGIN, member.username, "pass-word-123").status_code == 302
    client.logout()

    assert fail(client, PORTAL_LOGIN, member.username, 4) == [200] * 4  # counting starts again
    assert sign_in(client, PORTAL_LOGIN, member.username, "pass-word-123").status_code == 302
    assert client.get(ASK).status_code == 200


def test_a_lockout_holds_one_username_from_one_address_only(client, member, admin_member):
    fail(client, PORTAL_LOGIN, member.username, 5, address="10.0.0.1")
    assert sign_in(client, PORTAL_LOGIN, member.username, "pass-word-123", "10.0.0.1").status_code == 429

    # The same user from another address, and another user from the same address, still get in.
    assert sign_in(client, PORTAL_LOGIN, member.username, "pass-word-123", "10.0.0.2").status_code == 302
    client.logout()
    assert sign_in(client, PORTAL_LOGIN, admin_member.username, "pass-word-123", "10.0.0.1").status_code == 302


@pytest.mark.parametrize("username", ["nobody-by-this-name", "x" * 300])
def test_failures_for_unknown_or_over_long_usernames_are_throttled_without_an_error(client, db, username):
    codes = fail(client, PORTAL_LOGIN, username, 6)
    assert codes == [200] * 4 + [429] * 2


@pytest.mark.parametrize("url", [PORTAL_LOGIN, ADMIN_LOGIN])
def test_a_username_with_a_nul_character_gets_the_form_again_not_an_error(client, db, url):
    assert fail(client, url, "nul\x00name", 6) == [200] * 6  # refused by the form, no password checked


def test_a_token_api_call_is_not_affected_by_a_locked_out_sign_in(client, corpus, member):
    from tests.api.conftest import client_for

    fail(client, PORTAL_LOGIN, member.username, 5)
    assert client_for(member).get("/api/v1/documents/").status_code == 200
