"""A link of a provider account (``Identity``) belongs to the tenant whose provider made it (no
tenant: the installation's provider), and falls under row-level security like every table with a
``tenant_id`` (``kb_rls_enable()``, knowledge 0011); a tenant's provider signs in members of
other tenants only where the operator allows it (``TenantSso.allow_other_tenants_members``, off).

Existing links are given the tenant whose provider has their issuer when exactly one tenant's
does (and it is not the installation's issuer); the others stay without a tenant, so a tenant's
provider links its accounts again, by verified email, under the rules in ``docs/sso.md``.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def identities_bind(apps, schema_editor):
    Identity = apps.get_model("sso", "Identity")
    TenantSso = apps.get_model("sso", "TenantSso")
    installation = (getattr(settings, "KB_OIDC_ISSUER", "") or "").strip().rstrip("/")
    tenants_of: dict[str, list[int]] = {}
    for tenant_id, issuer in TenantSso.objects.exclude(issuer="").values_list("tenant_id", "issuer"):
        tenants_of.setdefault(issuer, []).append(tenant_id)
    for issuer, tenant_ids in tenants_of.items():
        if len(tenant_ids) == 1 and issuer != installation:
            Identity.objects.filter(issuer=issuer).update(tenant_id=tenant_ids[0])


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0005_audit_log_stays_append_only"),
        ("sso", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="identity",
            name="tenant",
            field=models.ForeignKey(
                blank=True,
                help_text="The tenant whose provider linked the account; empty: the installation's provider.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="sso_identities",
                to="core.tenant",
            ),
        ),
        migrations.RunPython(identities_bind, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name="identity",
            name="identity_unique_issuer_subject",
        ),
        migrations.AddConstraint(
            model_name="identity",
            constraint=models.UniqueConstraint(
                fields=("issuer", "subject", "tenant"),
                name="identity_unique_issuer_subject_tenant",
                nulls_distinct=False,
            ),
        ),
        migrations.AddField(
            model_name="tenantsso",
            name="allow_other_tenants_members",
            field=models.BooleanField(
                default=False,
                help_text="Let this provider sign in (and link by verified email) accounts that are also members of "
                "other tenants, e.g. several tenants of one organisation on one provider. Signed in this way they "
                "act in this tenant only. Off: such accounts sign in with their password or the installation's "
                "provider.",
            ),
        ),
        migrations.RunSQL(
            "SELECT kb_rls_enable();",
            "DROP POLICY IF EXISTS kb_tenant_isolation ON sso_identity;"
            " ALTER TABLE sso_identity DISABLE ROW LEVEL SECURITY;",
        ),
    ]
