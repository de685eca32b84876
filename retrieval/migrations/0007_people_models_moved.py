"""Conversations, turns, feedback and opened citations now belong to ``people``
(``people.0002_conversations_feedback_history``): drop them from retrieval's migration state.
Their tables stay (the ``people`` models name them).
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("people", "0002_conversations_feedback_history"),
        ("retrieval", "0006_tenant_in_core"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name="Turn"),
                migrations.DeleteModel(name="Conversation"),
                migrations.DeleteModel(name="CitationOpen"),
                migrations.DeleteModel(name="Feedback"),
            ],
        ),
    ]
