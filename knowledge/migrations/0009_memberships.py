# A user may belong to several tenants: Membership.user becomes a ForeignKey with one membership
# per (user, tenant), existing rows kept; API tokens of one membership (knowledge.tokens).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0008_near_duplicates"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="membership",
            name="user",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="memberships",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddConstraint(
            model_name="membership",
            constraint=models.UniqueConstraint(fields=("user", "tenant"), name="membership_unique_user_tenant"),
        ),
        migrations.CreateModel(
            name="MembershipToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "name",
                    models.CharField(blank=True, help_text="What the token is for (a script, a bot).", max_length=100),
                ),
                ("digest", models.CharField(editable=False, max_length=64, unique=True)),
                (
                    "prefix",
                    models.CharField(
                        editable=False, help_text="The key's first characters, to recognize it.", max_length=12
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "membership",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tokens",
                        to="knowledge.membership",
                    ),
                ),
            ],
        ),
    ]
