"""``LLMUsage`` leaves the retrieval app for ``knowledge`` (state only: the table
``retrieval_llmusage`` stays, with its row-level-security policy; ``knowledge.0026`` adds it to
the knowledge app)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0026_quotas_in_knowledge"),
        ("retrieval", "0011_llm_usage"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="LLMUsage")]),
    ]
