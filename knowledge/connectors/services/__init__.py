"""The service connectors: Slack, Confluence, Google Drive, GitHub, Jira and Notion.

Each module holds one kind's ``Connector`` (``knowledge.connectors.base``), built on the
vendor's official or most-used client library, pointed at ``source.location`` (the cloud API by
default, or a self-hosted server's), every request through ``knowledge.connectors.http``.
``docs/connectors.md`` says per kind the scopes it needs, what it syncs and how permissions map.
"""

from __future__ import annotations

from importlib import import_module

from core.errors import InvalidInput
from core.secrets import secret_readable
from knowledge.connectors.base import Connector, SourceUnreachable
from knowledge.models import Source

# kind -> "module:class"; imported on first use, so a worker loads only the clients it needs.
_CLASSES = {
    Source.Kind.SLACK: "knowledge.connectors.services.slack:SlackConnector",
    Source.Kind.CONFLUENCE: "knowledge.connectors.services.confluence:ConfluenceConnector",
    Source.Kind.GDRIVE: "knowledge.connectors.services.gdrive:DriveConnector",
    Source.Kind.GITHUB: "knowledge.connectors.services.github:GitHubConnector",
    Source.Kind.JIRA: "knowledge.connectors.services.jira:JiraConnector",
    Source.Kind.NOTION: "knowledge.connectors.services.notion:NotionConnector",
}

# The public API of each service, when ``--location`` is not given. Confluence and Jira Cloud
# live on each organisation's own site, so they have none.
DEFAULT_LOCATIONS = {
    Source.Kind.SLACK: "https://slack.com/api/",
    Source.Kind.GDRIVE: "https://www.googleapis.com/",
    Source.Kind.GITHUB: "https://api.github.com/",
    Source.Kind.NOTION: "https://api.notion.com/",
}

LOCATION_HINTS = {
    Source.Kind.CONFLUENCE: "your site, e.g. https://example.atlassian.net/wiki (Cloud) or https://confluence.example.com",
    Source.Kind.JIRA: "your site, e.g. https://example.atlassian.net (Cloud) or https://jira.example.com",
}


def connector_class(kind: str) -> type:
    """The ``Connector`` class of ``kind``; ``KeyError`` for a kind that is not a service."""
    module, name = _CLASSES[kind].split(":")
    return getattr(import_module(module), name)


def service_connector(source: Source) -> Connector:
    """The connector of service ``source``, with its decrypted secret.

    ``InvalidInput`` for a kind that is not a service; ``SourceUnreachable`` when the source has
    no secret or the stored secret cannot be decrypted (a key was dropped from ``KB_SECRET_KEYS``).
    """
    if source.kind not in _CLASSES:
        raise InvalidInput(f"The source {source.name!r} is not read from a service.", code="not_a_service")
    secret = source.secret
    if not secret_readable(secret):
        raise SourceUnreachable(
            f"The token of {source.name!r} cannot be decrypted with any key of KB_SECRET_KEYS (was the key that "
            "encrypted it removed before `manage.py rotatekeys`?).",
            code="secret_unreadable",
        )
    if not secret:
        raise SourceUnreachable(
            f"The source {source.name!r} has no token or key: set one (`manage.py source update --secret-env VAR`).",
            code="secret_missing",
        )
    return connector_class(source.kind)(source, secret)
