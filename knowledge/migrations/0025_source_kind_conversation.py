"""The source kind ``conversation``: the hidden source of the files members attach to their
conversations (``knowledge.attachments``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0024_service_connectors"),
    ]

    operations = [
        migrations.AlterField(
            model_name="source",
            name="kind",
            field=models.CharField(
                choices=[
                    ("files", "Files"),
                    ("upload", "Upload"),
                    ("dataset", "Dataset"),
                    ("folder", "Folder"),
                    ("web", "Web site"),
                    ("git", "Git repository"),
                    ("slack", "Slack"),
                    ("confluence", "Confluence"),
                    ("gdrive", "Google Drive"),
                    ("github", "GitHub"),
                    ("jira", "Jira"),
                    ("notion", "Notion"),
                    ("conversation", "Conversation files"),
                ],
                default="files",
                max_length=20,
            ),
        ),
    ]
