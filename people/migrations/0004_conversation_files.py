"""Files attached to conversations (``people.ConversationFile``), each linking a conversation to the
private document its file became (``knowledge.attachments``; the source kind ``conversation`` is
knowledge migration 0025). The new table has a ``tenant_id``: ``kb_rls_enable()`` (knowledge
migration 0011) gives it the tenant policy."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0006_runtime_role"),
        ("knowledge", "0025_source_kind_conversation"),
        ("people", "0003_membership_in_core"),
    ]

    operations = [
        migrations.CreateModel(
            name="ConversationFile",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=255)),
                ("size", models.PositiveBigIntegerField(help_text="Bytes of the file as attached.")),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "conversation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="files", to="people.conversation"
                    ),
                ),
                (
                    "document",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="conversation_file",
                        to="knowledge.document",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"),
                ),
            ],
            options={
                "ordering": ["created_at", "id"],
                "indexes": [models.Index(fields=["conversation", "created_at"], name="conversationfile_conv_idx")],
            },
        ),
        migrations.RunSQL("SELECT kb_rls_enable();", migrations.RunSQL.noop),
    ]
