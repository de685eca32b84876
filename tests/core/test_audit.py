"""The audit log: append-only in the database, the recorder and its context, sign-ins, memberships
and tokens as users change them (portal, admin, CLI), and the read-only admin page of the log."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.http import HttpResponse
from django.test import RequestFactory
from django.urls import reverse
from rest_framework.authtoken.models import Token

from core.audit import OPERATOR_CLI, SYSTEM, AuditContextMiddleware, audit_actor, audit_record
from core.errors import NotFound
from core.memberships import (
    membership_remove,
    membership_token_authenticate,
    membership_token_create,
    membership_token_revoke,
)
from core.models import AuditEvent, Membership, MembershipToken
from core.rls import tenant_context
from core.services import membership_create
from tests.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "pass-word-123"  # tests.factories.UserFactory's


def events(action: str, **filters) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, **filters).order_by("id"))


@pytest.fixture
def event(tenant):
    return audit_record(action="source.created", tenant=tenant, object_type="source", object_id="7")


@pytest.fixture
def tenant_admin(client, admin_member):
    """A staff admin of ``tenant`` (not a superuser) holding the core app's model permissions."""
    admin_member.user_permissions.set(Permission.objects.filter(content_type__app_label="core"))
    client.force_login(admin_member)
    return admin_member


@pytest.fixture
def superuser(client):
    user = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


# ---- append-only, enforced by the database ------------------------------------------------------


def refused(statement) -> str:
    """Run ``statement`` in a savepoint; the database's refusal message (the test fails if it runs)."""
    with pytest.raises(DatabaseError) as refusal, transaction.atomic():
        statement()
    return str(refusal.value)


def test_an_event_cannot_be_changed_or_deleted_through_the_orm(event):
    def save_changed():
        event.action = "source.deleted"
        event.save()

    assert "append-only" in refused(save_changed)
    assert "append-only" in refused(lambda: AuditEvent.objects.filter(pk=event.pk).update(action="x"))
    assert "append-only" in refused(lambda: AuditEvent.objects.get(pk=event.pk).delete())
    assert "append-only" in refused(lambda: AuditEvent.objects.filter(pk=event.pk).delete())
    assert AuditEvent.objects.get(pk=event.pk).action == "source.created"


def test_the_tables_owner_cannot_change_or_delete_an_event_with_raw_sql(event):
    def run(sql):
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user = tableowner FROM pg_tables WHERE tablename = 'core_auditevent'")
            assert cursor.fetchone() == (True,)  # really the owner, to whom row-level security does not apply
            cursor.execute(sql, [event.pk])

    assert "append-only" in refused(lambda: run("UPDATE core_auditevent SET action = 'x' WHERE id = %s"))
    assert "append-only" in refused(lambda: run("DELETE FROM core_auditevent WHERE id = %s"))
    assert AuditEvent.objects.filter(pk=event.pk, action="source.created").exists()


def as_app_role(tenant, sql, params=()):
    """Run ``sql`` as the app role ``kb_app`` bound to ``tenant`` (as a request does); its rows."""
    with tenant_context(tenant.pk), connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone() == ("kb_app",)
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else None


def test_the_app_role_may_read_and_add_events_but_not_change_delete_or_truncate_them(event, tenant):
    assert as_app_role(tenant, "SELECT id FROM core_auditevent") == [(event.pk,)]
    with transaction.atomic():
        assert as_app_role(
            tenant,
            "INSERT INTO core_auditevent (tenant_id, actor_label, action, object_type, object_id, object_repr,"
            " changes, created_at) VALUES (%s, 'x', 'test.inserted', '', '', '', '{}', now()) RETURNING id",
            [tenant.pk],
        )
    update = refused(lambda: as_app_role(tenant, "UPDATE core_auditevent SET action = 'x' WHERE id = %s", [event.pk]))
    delete = refused(lambda: as_app_role(tenant, "DELETE FROM core_auditevent WHERE id = %s", [event.pk]))
    assert "append-only" in update or "permission denied" in update
    assert "append-only" in delete or "permission denied" in delete
    assert "permission denied" in refused(lambda: as_app_role(tenant, "TRUNCATE core_auditevent"))
    assert AuditEvent.objects.filter(pk=event.pk, action="source.created").exists()


def test_the_app_role_holds_no_update_or_delete_privilege_on_the_log():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT has_table_privilege('kb_app', 'core_auditevent', 'UPDATE'),"
            " has_table_privilege('kb_app', 'core_auditevent', 'DELETE')"
        )
        assert cursor.fetchone() == (False, False)


def test_an_event_outlives_the_user_who_acted():
    user = UserFactory()
    user_id, username = user.pk, user.username
    recorded = audit_record(action="token.created", actor=user)
    user.delete()
    recorded = AuditEvent.objects.get(pk=recorded.pk)
    assert (recorded.actor_id, recorded.actor_label) == (user_id, username)


# ---- the recorder and its context ----------------------------------------------------------------


def test_an_event_in_a_request_names_the_signed_in_user_and_the_client_address(tenant, member):
    request = RequestFactory().get("/", REMOTE_ADDR="203.0.113.9")
    request.user = member
    recorded = []

    def view(request):
        recorded.append(audit_record(action="document.deleted", tenant=tenant, object_type="document", object_id=3))
        return HttpResponse()

    AuditContextMiddleware(view)(request)
    assert (recorded[0].actor_id, recorded[0].actor_label, recorded[0].client_ip) == (
        member.pk,
        member.username,
        "203.0.113.9",
    )
    assert recorded[0].object_id == "3"


def test_an_event_outside_a_request_and_command_is_by_the_system_and_without_an_address(tenant):
    recorded = audit_record(action="source.synced", tenant=tenant)
    assert (recorded.actor_id, recorded.actor_label, recorded.client_ip) == (None, SYSTEM, None)


def test_a_request_served_inside_a_command_is_by_its_user_not_the_operator(tenant, member):
    request = RequestFactory().get("/", REMOTE_ADDR="198.51.100.1")
    request.user = member
    with audit_actor(OPERATOR_CLI):
        AuditContextMiddleware(lambda r: HttpResponse(audit_record(action="x.y", tenant=tenant).actor_label))(request)
    assert AuditEvent.objects.get(action="x.y").actor_label == member.username


def test_an_address_that_is_not_an_ip_is_left_out(tenant, member):
    request = RequestFactory().get("/", REMOTE_ADDR="unix:/run/gunicorn.sock")
    request.user = member
    assert audit_record(action="x.y", tenant=tenant, request=request).client_ip is None


def test_changes_that_json_cannot_hold_are_written_as_text(tenant, member):
    when = dt.datetime(2025, 5, 1, 12, tzinfo=dt.UTC)
    recorded = audit_record(action="x.y", tenant=tenant, changes={"at": when, "user": member, "n": [1, 2]})
    recorded.refresh_from_db()
    assert recorded.changes == {"at": "2025-05-01T12:00:00Z", "user": member.username, "n": [1, 2]}


# ---- sign-ins ------------------------------------------------------------------------------------


def test_a_portal_sign_in_is_recorded_in_each_tenant_of_the_user(client):
    first, second = TenantFactory(), TenantFactory()
    user = MembershipFactory(tenant=first).user
    MembershipFactory(tenant=second, user=user)

    response = client.post(reverse("portal:login"), {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302

    signed_in = events("signin.succeeded")
    assert {e.tenant_id for e in signed_in} == {first.pk, second.pk}
    assert {(e.actor_id, e.actor_label, e.client_ip, e.object_id) for e in signed_in} == {
        (user.pk, user.username, "127.0.0.1", str(user.pk))
    }


def test_an_admin_sign_in_is_recorded(client, admin_member, tenant):
    response = client.post(reverse("admin:login"), {"username": admin_member.username, "password": PASSWORD})
    assert response.status_code == 302
    assert [(e.tenant_id, e.actor_label) for e in events("signin.succeeded")] == [(tenant.pk, admin_member.username)]


def test_a_failed_sign_in_is_recorded_in_the_tenants_of_the_account_tried(client, member, tenant):
    response = client.post(reverse("portal:login"), {"username": member.username, "password": "wrong"})
    assert response.status_code == 200

    [failed] = events("signin.failed")
    assert (failed.tenant_id, failed.actor_id, failed.actor_label) == (tenant.pk, None, "anonymous")
    assert (failed.object_type, failed.object_id, failed.client_ip) == ("user", str(member.pk), "127.0.0.1")
    assert failed.changes == {"username": member.username}
    assert not events("signin.succeeded")


def test_a_failed_admin_sign_in_of_an_unknown_username_is_recorded_with_no_tenant(client, tenant):
    client.post(reverse("admin:login"), {"username": "mallory", "password": "guess"})
    [failed] = events("signin.failed")
    assert (failed.tenant_id, failed.object_id, failed.object_repr) == (None, "", "mallory")


def test_sign_in_attempts_refused_by_the_lockout_are_still_recorded(client, member, tenant, settings):
    settings.AXES_FAILURE_LIMIT = 2
    login = reverse("portal:login")
    for _ in range(2):
        client.post(login, {"username": member.username, "password": "wrong"})
    locked = client.post(login, {"username": member.username, "password": PASSWORD})
    assert locked.status_code == 429

    failed = events("signin.failed", tenant=tenant)
    assert len(failed) == 3
    assert failed[-1].changes == {"username": member.username, "locked_out": True}
    assert not events("signin.succeeded")


# ---- memberships ---------------------------------------------------------------------------------


def test_a_membership_added_in_the_admin_is_recorded(client, tenant, superuser):
    newcomer = UserFactory()
    response = client.post(
        reverse("admin:core_membership_add"), {"user": newcomer.pk, "tenant": tenant.pk, "role": "editor"}
    )
    assert response.status_code == 302
    membership = Membership.objects.get(user=newcomer)

    [created] = events("membership.created")
    assert (created.tenant_id, created.actor_label, created.object_id) == (
        tenant.pk,
        superuser.username,
        str(membership.pk),
    )
    assert created.changes == {
        "user": [None, newcomer.username],
        "tenant": [None, tenant.slug],
        "role": [None, "editor"],
    }


def test_a_role_changed_and_a_membership_removed_by_a_tenant_admin_are_recorded(client, tenant, tenant_admin):
    membership = MembershipFactory(tenant=tenant, role="editor")
    user = membership.user
    membership_token_create(membership=membership, name="bot")
    change = reverse("admin:core_membership_change", args=[membership.pk])
    client.post(change, {"user": user.pk, "tenant": tenant.pk, "role": "admin"})
    client.post(change, {"user": user.pk, "tenant": tenant.pk, "role": "admin"})  # nothing changed
    client.post(reverse("admin:core_membership_delete", args=[membership.pk]), {"post": "yes"})
    assert not Membership.objects.filter(user=user).exists()

    recorded = AuditEvent.objects.filter(action__startswith="membership.").order_by("id")
    assert [(e.action, e.changes) for e in recorded] == [
        ("membership.role_changed", {"role": ["editor", "admin"]}),
        ("membership.removed", {"role": ["admin", None], "tokens_revoked": 1}),
    ]
    assert {(e.tenant_id, e.actor_label, e.object_id) for e in recorded} == {
        (tenant.pk, tenant_admin.username, str(membership.pk))
    }


def test_a_role_changed_on_the_user_page_is_recorded(client, tenant, superuser):
    membership = MembershipFactory(tenant=tenant, role="member")
    user = membership.user
    response = client.post(
        reverse("admin:auth_user_change", args=[user.pk]),
        {
            "username": user.username,
            "is_active": "on",
            "date_joined_0": "2025-01-01",
            "date_joined_1": "00:00:00",
            "memberships-TOTAL_FORMS": "1",
            "memberships-INITIAL_FORMS": "1",
            "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000",
            "memberships-0-id": membership.pk,
            "memberships-0-user": user.pk,
            "memberships-0-tenant": tenant.pk,
            "memberships-0-role": "owner",
        },
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    [changed] = events("membership.role_changed")
    assert (changed.tenant_id, changed.actor_label, changed.changes) == (
        tenant.pk,
        superuser.username,
        {"role": ["member", "owner"]},
    )


def test_a_membership_made_by_a_command_is_by_the_operator(tenant):
    with audit_actor(OPERATOR_CLI):
        membership_create(tenant=tenant, username="carol", password=PASSWORD, role="viewer")
    membership_create(tenant=tenant, username="carol", password=PASSWORD, role="viewer")  # unchanged: no event
    [created] = events("membership.created")
    assert (created.tenant_id, created.actor_label, created.changes) == (
        tenant.pk,
        OPERATOR_CLI,
        {"role": [None, "viewer"]},
    )


def test_the_membership_services_record_removals_only_of_the_tenants_own_memberships(tenant):
    other_membership = MembershipFactory(tenant=TenantFactory(slug="other"))
    with pytest.raises(NotFound):
        membership_remove(tenant=tenant, membership_id=other_membership.pk)
    membership = MembershipFactory(tenant=tenant, role="viewer")
    membership_remove(tenant=tenant, membership_id=membership.pk)

    [removed] = AuditEvent.objects.filter(action__startswith="membership.")
    assert (removed.action, removed.tenant_id, removed.object_id, removed.changes) == (
        "membership.removed",
        tenant.pk,
        str(membership.pk),
        {"role": ["viewer", None], "tokens_revoked": 0},
    )


# ---- tokens --------------------------------------------------------------------------------------


def test_a_membership_token_made_with_the_command_is_recorded_by_the_operator_without_its_key(tenant, member, capsys):
    call_command("membershiptoken", tenant.slug, member.username, "--name", "ci bot")
    key = capsys.readouterr().out.strip()
    token = MembershipToken.objects.get()

    [created] = events("token.created")
    assert (created.tenant_id, created.actor_id, created.actor_label) == (tenant.pk, None, OPERATOR_CLI)
    assert (created.object_type, created.object_id) == ("membershiptoken", str(token.pk))
    assert created.changes == {"user": member.username, "name": "ci bot"}
    assert key not in f"{created.object_repr} {created.changes}"


def test_a_membership_token_revoked_in_the_admin_is_recorded(client, tenant, member, tenant_admin):
    token, _ = membership_token_create(membership=Membership.objects.get(user=member), name="script")
    response = client.post(reverse("admin:core_membershiptoken_delete", args=[token.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert not MembershipToken.objects.exists()

    [revoked] = events("token.revoked")
    assert (revoked.tenant_id, revoked.actor_label, revoked.object_id) == (
        tenant.pk,
        tenant_admin.username,
        str(token.pk),
    )
    assert revoked.changes == {"user": member.username, "name": "script"}


def test_revoking_a_token_records_it_and_its_key_stops_working(tenant, member):
    token, key = membership_token_create(membership=Membership.objects.get(user=member), name="script")
    with pytest.raises(NotFound):
        membership_token_revoke(tenant=TenantFactory(), token_id=token.pk)
    membership_token_revoke(tenant=tenant, token_id=token.pk)

    assert membership_token_authenticate(key) is None
    assert [(e.action, e.object_id) for e in AuditEvent.objects.filter(action__startswith="token.").order_by("id")] == [
        ("token.created", str(token.pk)),
        ("token.revoked", str(token.pk)),
    ]


def test_a_drf_token_created_and_revoked_in_the_admin_is_recorded_in_the_users_tenants(
    client, tenant, member, superuser
):
    client.post(reverse("admin:authtoken_tokenproxy_add"), {"user": member.pk})
    key = Token.objects.get(user=member).key
    client.post(reverse("admin:authtoken_tokenproxy_delete", args=[member.pk]), {"post": "yes"})
    assert not Token.objects.filter(user=member).exists()

    recorded = AuditEvent.objects.filter(action__startswith="token.").order_by("id")
    assert [(e.action, e.tenant_id, e.object_type, e.object_id) for e in recorded] == [
        ("token.created", tenant.pk, "token", str(member.pk)),
        ("token.revoked", tenant.pk, "token", str(member.pk)),
    ]
    assert all(key not in f"{e.object_repr} {e.changes}" for e in recorded)


# ---- reading the log in the admin ----------------------------------------------------------------


def test_a_tenant_admin_reads_only_their_tenants_events_and_may_not_change_them(client, tenant, tenant_admin):
    other = TenantFactory(slug="other")
    ours = audit_record(action="source.created", tenant=tenant, object_repr="ours")
    theirs = audit_record(action="source.created", tenant=other, object_repr="theirs")
    audit_record(action="signin.failed", object_repr="nobody")

    changelist = client.get(reverse("admin:core_auditevent_changelist"))
    assert changelist.status_code == 200
    assert {e.pk for e in changelist.context["cl"].queryset} >= {ours.pk}
    assert {e.tenant_id for e in changelist.context["cl"].queryset} == {tenant.pk}
    assert client.get(reverse("admin:core_auditevent_change", args=[ours.pk])).status_code == 200
    assert client.get(reverse("admin:core_auditevent_change", args=[theirs.pk])).status_code == 302

    assert client.get(reverse("admin:core_auditevent_add")).status_code == 403
    assert client.post(reverse("admin:core_auditevent_delete", args=[ours.pk]), {"post": "yes"}).status_code == 403
    client.post(reverse("admin:core_auditevent_change", args=[ours.pk]), {"action": "x"})
    assert AuditEvent.objects.get(pk=ours.pk).action == "source.created"


def test_a_staff_member_who_is_not_a_tenant_admin_cannot_read_the_log(client, tenant, member):
    member.is_staff = True
    member.save()
    member.user_permissions.set(Permission.objects.filter(content_type__app_label="core"))
    client.force_login(member)
    assert client.get(reverse("admin:core_auditevent_changelist")).status_code == 403


def test_a_superuser_reads_every_tenants_events_but_may_not_delete_them(client, tenant, superuser):
    other = TenantFactory(slug="other")
    audit_record(action="source.created", tenant=tenant)
    audit_record(action="source.created", tenant=other)
    audit_record(action="signin.failed")
    changelist = client.get(reverse("admin:core_auditevent_changelist"))
    assert {tenant.pk, other.pk, None} <= {e.tenant_id for e in changelist.context["cl"].queryset}
    assert changelist.context["action_form"] is None  # no "delete selected" action
    some = AuditEvent.objects.filter(tenant=other).first()
    assert client.post(reverse("admin:core_auditevent_delete", args=[some.pk]), {"post": "yes"}).status_code == 403


def test_a_superuser_making_an_account_staff_in_the_admin_is_recorded_in_its_tenants(client, tenant, member):
    from django.contrib.auth import get_user_model

    operator = get_user_model().objects.create_superuser("root", "root@example.com", "pass-word-123")
    client.force_login(operator)
    page = client.get(f"/admin/auth/user/{member.pk}/change/")
    form = {
        key: value
        for key, value in page.context["adminform"].form.initial.items()
        if value is not None and not isinstance(value, list)
    }
    form.update(
        {
            "username": member.username,
            "is_active": "on",
            "is_staff": "on",
            "date_joined_0": "2024-01-01",
            "date_joined_1": "00:00:00",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        }
    )
    form.pop("password", None)
    form.pop("last_login", None)

    response = client.post(f"/admin/auth/user/{member.pk}/change/", form)

    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else response
    event = AuditEvent.objects.get(action="user.changed", object_id=str(member.pk))
    assert event.tenant_id == tenant.pk and event.actor_label == "root"
    assert event.changes["is_staff"] == [False, True]
