"""Single sign-on: each tenant's provider and claim mapping (``TenantSso``, under row-level
security like every tenant table: ``kb_rls_enable()``, knowledge 0011), and the links of
provider accounts to users (``Identity``, not tenant data)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("core", "0005_audit_log_stays_append_only"),
        ("knowledge", "0020_foldergrant"),  # kb_rls_enable() as core 0005 left it
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Identity",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("issuer", models.CharField(max_length=500)),
                ("subject", models.CharField(max_length=255)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("last_signed_in_at", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="sso_identities",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "identities",
                "constraints": [
                    models.UniqueConstraint(fields=("issuer", "subject"), name="identity_unique_issuer_subject")
                ],
            },
        ),
        migrations.CreateModel(
            name="TenantSso",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("enabled", models.BooleanField(default=True)),
                (
                    "name",
                    models.CharField(
                        blank=True,
                        help_text='The button reads "Sign in with <name>". Empty: the issuer\'s host.',
                        max_length=100,
                    ),
                ),
                (
                    "issuer",
                    models.CharField(
                        blank=True,
                        help_text="The provider's issuer URL (its discovery document is <issuer>/.well-known/openid-configuration). Empty: this tenant uses the installation's provider (KB_OIDC_ISSUER).",
                        max_length=500,
                    ),
                ),
                ("client_id", models.CharField(blank=True, max_length=255)),
                ("client_secret", models.CharField(blank=True, max_length=1000)),
                (
                    "scopes",
                    models.CharField(
                        default="openid email profile",
                        help_text="Space-separated; must include openid.",
                        max_length=255,
                    ),
                ),
                (
                    "role_claim",
                    models.CharField(
                        blank=True,
                        help_text="The claim holding the user's roles or groups at the provider (a dotted path such as realm_access.roles). Empty: new memberships get the default role and existing ones keep theirs.",
                        max_length=100,
                    ),
                ),
                (
                    "role_values",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text='Claim values to roles, e.g. {"kb-admins": "admin", "kb-editors": "editor"}; the highest role matched wins, none matched gives the default role.',
                    ),
                ),
                (
                    "default_role",
                    models.CharField(
                        choices=[
                            ("owner", "Owner"),
                            ("admin", "Admin"),
                            ("editor", "Editor"),
                            ("member", "Member"),
                            ("viewer", "Viewer"),
                        ],
                        default="member",
                        max_length=10,
                    ),
                ),
                (
                    "groups_claim",
                    models.CharField(
                        blank=True,
                        help_text="The claim listing the user's groups: at each sign-in the user is put in the tenant's access groups of those names and taken out of the others. Empty: access groups are left alone.",
                        max_length=100,
                    ),
                ),
                (
                    "create_memberships",
                    models.BooleanField(
                        default=False,
                        help_text="Give a membership (and, if needed, an account) to whoever signs in through this provider without one. Off: only existing members may sign in.",
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "tenant",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="sso", to="core.tenant"
                    ),
                ),
            ],
            options={
                "verbose_name": "tenant single sign-on",
                "verbose_name_plural": "tenant single sign-on",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("issuer", ""), models.Q(("client_id", ""), _negated=True), _connector="OR"),
                        name="tenantsso_own_provider_has_client",
                        violation_error_message="A provider of the tenant's own needs a client id.",
                    )
                ],
            },
        ),
        migrations.RunSQL("SELECT kb_rls_enable();", migrations.RunSQL.noop),
    ]
