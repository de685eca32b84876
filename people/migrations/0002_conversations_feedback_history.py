"""Conversations, turns, feedback and opened citations move from ``retrieval`` to ``people``.

Their tables stay as they are (``retrieval_feedback``, ``retrieval_conversation``,
``retrieval_turn``, ``retrieval_citationopen``: the models name them with ``db_table``), so this
migration changes the migration state only; ``retrieval.0007_people_models_moved`` drops them
from retrieval's state. The models' content types (and with them their permissions and admin
log entries) are relabelled from ``retrieval`` to ``people``.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = ("feedback", "conversation", "turn", "citationopen")


def relabel_content_types(old_label: str, new_label: str):
    def relabel(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        db = schema_editor.connection.alias
        for model in MOVED:
            if ContentType.objects.using(db).filter(app_label=new_label, model=model).exists():
                continue
            ContentType.objects.using(db).filter(app_label=old_label, model=model).update(app_label=new_label)

    return relabel


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("knowledge", "0004_remove_chunk_search_vector"),
        ("people", "0001_initial"),
        ("core", "0001_initial"),
        ("retrieval", "0006_tenant_in_core"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Feedback",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "citation",
                            models.PositiveSmallIntegerField(
                                blank=True, help_text="[n] of the answer; empty: the answer.", null=True
                            ),
                        ),
                        ("rating", models.SmallIntegerField(choices=[(1, "Helpful"), (-1, "Not helpful")])),
                        ("comment", models.TextField(blank=True, max_length=2000)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "document",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="knowledge.document",
                            ),
                        ),
                        (
                            "source",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="knowledge.source",
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="feedback",
                                to="core.tenant",
                            ),
                        ),
                        (
                            "trace",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="feedback",
                                to="retrieval.trace",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="feedback",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "retrieval_feedback",
                        "ordering": ["-created_at", "-id"],
                        "indexes": [models.Index(fields=["tenant", "-created_at"], name="feedback_tenant_created_idx")],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("rating__in", [1, -1])), name="feedback_rating_up_or_down"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("citation__isnull", True), ("citation__gte", 1), _connector="OR"),
                                name="feedback_citation_positive",
                            ),
                            models.UniqueConstraint(
                                condition=models.Q(("citation__isnull", True), ("user__isnull", False)),
                                fields=("trace", "user"),
                                name="feedback_one_per_user_answer",
                            ),
                            models.UniqueConstraint(
                                condition=models.Q(("citation__isnull", False), ("user__isnull", False)),
                                fields=("trace", "user", "citation"),
                                name="feedback_one_per_user_citation",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Conversation",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("title", models.CharField(max_length=200)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="conversations",
                                to="core.tenant",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="conversations",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "retrieval_conversation",
                        "ordering": ["-updated_at", "-id"],
                    },
                ),
                migrations.CreateModel(
                    name="Turn",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("order", models.PositiveIntegerField()),
                        ("question", models.TextField()),
                        ("query", models.TextField(blank=True)),
                        ("answer", models.TextField(blank=True)),
                        ("citations", models.JSONField(blank=True, default=list)),
                        ("pipeline", models.CharField(max_length=100)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "conversation",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="turns",
                                to="people.conversation",
                            ),
                        ),
                        (
                            "trace",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="retrieval.trace",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "retrieval_turn",
                        "ordering": ["conversation_id", "order"],
                    },
                ),
                migrations.AddIndex(
                    model_name="conversation",
                    index=models.Index(fields=["tenant", "user", "-updated_at"], name="conversation_user_recent_idx"),
                ),
                migrations.AddConstraint(
                    model_name="turn",
                    constraint=models.UniqueConstraint(
                        fields=("conversation", "order"), name="turn_unique_order_per_conversation"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="turn",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("order__gte", 1)), name="turn_order_from_one"
                    ),
                ),
                migrations.CreateModel(
                    name="CitationOpen",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("citation", models.PositiveSmallIntegerField(help_text="[n] of the answer.")),
                        ("opens", models.PositiveIntegerField(default=1)),
                        ("opened_at", models.DateTimeField(auto_now=True)),
                        (
                            "document",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="knowledge.document",
                            ),
                        ),
                        (
                            "source",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="knowledge.source",
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="citation_opens",
                                to="core.tenant",
                            ),
                        ),
                        (
                            "trace",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="citation_opens",
                                to="retrieval.trace",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="citation_opens",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "retrieval_citationopen",
                        "ordering": ["-opened_at", "-id"],
                        "indexes": [models.Index(fields=["tenant", "user"], name="citationopen_tenant_user_idx")],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(citation__gte=1), name="citationopen_citation_positive"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(opens__gte=1), name="citationopen_opens_positive"
                            ),
                            models.UniqueConstraint(
                                fields=("trace", "user", "citation"), name="citationopen_one_per_user_citation"
                            ),
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(
            relabel_content_types("retrieval", "people"), relabel_content_types("people", "retrieval"), elidable=False
        ),
    ]
