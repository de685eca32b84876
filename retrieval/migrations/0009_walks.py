"""Walks kept beyond one answer (``retrieval.walks``): ``Walk``, its path (``WalkStep``) and its
facts as memory (``Fact``).

Besides the tables:

1. ``retrieval_fact.search_vector``: the fact's English full-text vector, a generated column with a
   GIN index, which the memory retriever's BM25 reads (``retrieval.walks.memory``).
2. Foreign keys with ON DELETE CASCADE to the fact's chunk and version: whatever deletes a chunk
   (retention, re-ingestion, a document deleted) takes its facts with it.
3. The trigger ``fact_retire_with_version`` (after each UPDATE statement on knowledge_chunk): a
   chunk that stops being current retires its live facts as ``superseded``; one that becomes
   current again brings them back. Facts a person marked wrong stay wrong.
4. Row-level security: ``kb_rls_enable()`` gives the three tables the tenant policy.
"""

import django.db.models.deletion
import pgvector.django.vector
from django.conf import settings
from django.db import migrations, models


SQL = """
ALTER TABLE retrieval_fact ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (to_tsvector('english', text)) STORED;
CREATE INDEX fact_search_vector_idx ON retrieval_fact USING gin (search_vector);
ALTER TABLE retrieval_fact
    ADD CONSTRAINT fact_chunk_fk FOREIGN KEY (chunk_id) REFERENCES knowledge_chunk (id) ON DELETE CASCADE
        DEFERRABLE INITIALLY DEFERRED,
    ADD CONSTRAINT fact_version_fk FOREIGN KEY (version_id) REFERENCES knowledge_documentversion (id)
        ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;
CREATE OR REPLACE FUNCTION kb_fact_retire_with_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE retrieval_fact f
    SET retired_reason = CASE WHEN n.is_current THEN '' ELSE 'superseded' END,
        retired_at = CASE WHEN n.is_current THEN NULL ELSE now() END
    FROM new_chunks n JOIN old_chunks o ON o.id = n.id
    WHERE o.is_current IS DISTINCT FROM n.is_current AND f.chunk_id = n.id AND f.tenant_id = n.tenant_id
      AND f.retired_reason = CASE WHEN n.is_current THEN 'superseded' ELSE '' END;
    RETURN NULL;
END
$$;
CREATE TRIGGER fact_retire_with_version AFTER UPDATE ON knowledge_chunk
    REFERENCING OLD TABLE AS old_chunks NEW TABLE AS new_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION kb_fact_retire_with_version();
SELECT kb_rls_enable();
"""
SQL_BACK = """
DROP TRIGGER IF EXISTS fact_retire_with_version ON knowledge_chunk;
DROP FUNCTION IF EXISTS kb_fact_retire_with_version();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0005_audit_log_stays_append_only"),
        ("knowledge", "0021_chunk_embedding_pending"),
        ("retrieval", "0008_tracestep_tenant"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Walk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("question", models.TextField()),
                ("pipeline", models.CharField(default="walkingrag", max_length=100)),
                ("status", models.CharField(default="running", max_length=10)),
                ("steered", models.BooleanField(default=False, help_text="Started through the walks API or portal.")),
                (
                    "pause_after",
                    models.PositiveIntegerField(blank=True, help_text="Pause after this round.", null=True),
                ),
                ("k", models.PositiveSmallIntegerField(default=5, help_text="Chunks read per query per round.")),
                ("pause_requested", models.BooleanField(default=False)),
                ("stop_requested", models.BooleanField(default=False)),
                ("round", models.PositiveIntegerField(default=0)),
                ("next_queries", models.JSONField(blank=True, default=list)),
                ("stop_reason", models.CharField(blank=True, max_length=30)),
                ("answer", models.JSONField(blank=True, default=dict)),
                ("error", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "tenant",
                    models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"),
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
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="Fact",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("round", models.PositiveIntegerField(default=1)),
                ("text", models.TextField()),
                ("relevance", models.TextField(blank=True)),
                ("next_sources", models.JSONField(blank=True, default=list)),
                ("entities", models.JSONField(blank=True, default=list)),
                ("embedder", models.CharField(blank=True, max_length=200)),
                ("embedding", pgvector.django.vector.VectorField(blank=True, null=True)),
                ("corrected", models.BooleanField(default=False, help_text="A person edited the text.")),
                ("retired_reason", models.CharField(blank=True, default="", max_length=10)),
                ("retired_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "chunk",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="facts",
                        to="knowledge.chunk",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"),
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
                (
                    "version",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="knowledge.documentversion",
                    ),
                ),
                (
                    "walk",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="facts",
                        to="retrieval.walk",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="WalkStep",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("round", models.PositiveIntegerField()),
                ("query", models.TextField()),
                ("origin", models.CharField(default="question", max_length=10)),
                ("led_by", models.JSONField(blank=True, default=list)),
                ("chunk_ids", models.JSONField(blank=True, default=list)),
                ("fact_count", models.PositiveIntegerField(default=0)),
                ("false_start", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "tenant",
                    models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="core.tenant"),
                ),
                (
                    "walk",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="steps", to="retrieval.walk"
                    ),
                ),
            ],
            options={
                "ordering": ["walk_id", "round", "id"],
            },
        ),
        migrations.AddIndex(
            model_name="walk",
            index=models.Index(fields=["tenant", "-created_at"], name="walk_tenant_created_idx"),
        ),
        migrations.AddConstraint(
            model_name="walk",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", ("running", "paused", "done", "failed", "stopped"))),
                name="walk_status_known",
            ),
        ),
        migrations.AddConstraint(
            model_name="walk",
            constraint=models.UniqueConstraint(fields=("id", "tenant"), name="walk_unique_id_tenant"),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(fields=["tenant", "-created_at"], name="fact_tenant_created_idx"),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(fields=["chunk"], name="fact_chunk_idx"),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(fields=["walk"], name="fact_walk_idx"),
        ),
        migrations.AddConstraint(
            model_name="fact",
            constraint=models.CheckConstraint(
                condition=models.Q(("retired_reason__in", ("", "wrong", "superseded"))),
                name="fact_retired_reason_known",
            ),
        ),
        migrations.AddConstraint(
            model_name="fact",
            constraint=models.CheckConstraint(
                condition=models.Q(("retired_reason", ""), ("retired_at__isnull", False), _connector="OR"),
                name="fact_retired_has_time",
            ),
        ),
        migrations.AddConstraint(
            model_name="fact",
            constraint=models.CheckConstraint(
                condition=models.Q(("text", ""), _negated=True), name="fact_text_not_empty"
            ),
        ),
        migrations.AddConstraint(
            model_name="walkstep",
            constraint=models.CheckConstraint(condition=models.Q(("round__gte", 1)), name="walkstep_round_positive"),
        ),
        migrations.AddConstraint(
            model_name="walkstep",
            constraint=models.CheckConstraint(
                condition=models.Q(("origin__in", ("question", "facts", "person"))), name="walkstep_origin_known"
            ),
        ),
        migrations.RunSQL(SQL, SQL_BACK),
    ]
