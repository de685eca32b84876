"""Connectors: the sources a sync reads (``knowledge.services.sync``), all on one contract.

``base`` holds the contract (``Connector``) and what connectors give (``Item``, ``Permission``,
``SourceGroup``); ``folder``, ``web`` and ``git`` are the file kinds (``FileConnector``),
``services`` the service kinds (Slack, Confluence, Google Drive, GitHub, Jira, Notion), which
also say who may see each document.
"""

from __future__ import annotations

from core.errors import InvalidInput
from knowledge.connectors.base import Connector, FileConnector, Item, SourceUnreachable, path_selected
from knowledge.connectors.folder import FolderConnector
from knowledge.connectors.git import GitConnector
from knowledge.connectors.web import WebConnector
from knowledge.models import Source

__all__ = [
    "Connector",
    "FileConnector",
    "FolderConnector",
    "GitConnector",
    "Item",
    "SourceUnreachable",
    "WebConnector",
    "connector_for",
    "path_selected",
]

_BY_KIND = {Source.Kind.FOLDER: FolderConnector, Source.Kind.WEB: WebConnector, Source.Kind.GIT: GitConnector}


def connector_for(source: Source) -> Connector:
    """The connector of a synced ``source``; ``InvalidInput`` for a kind filled by hand.

    A service source's connector needs its secret (``SourceUnreachable`` when it has none).
    """
    if source.is_service:
        from knowledge.connectors.services import service_connector

        return service_connector(source)
    try:
        return _BY_KIND[source.kind](source)
    except KeyError:
        raise InvalidInput(
            f"The source {source.name!r} is a {source.get_kind_display().lower()} source, which is filled by hand "
            "(ingest or upload), not synced.",
            code="not_synced",
        ) from None
