"""Connectors: the folder, web and git sources a sync reads (``knowledge.services.sync``).

``base`` says what a connector gives; ``folder``, ``web`` and ``git`` are the kinds.
"""

from __future__ import annotations

from core.errors import InvalidInput
from knowledge.connectors.base import Connector, Item, SourceUnreachable, path_selected
from knowledge.connectors.folder import FolderConnector
from knowledge.connectors.git import GitConnector
from knowledge.connectors.web import WebConnector
from knowledge.models import Source

__all__ = [
    "Connector",
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
    """The connector of a folder, web or git ``source``; ``InvalidInput`` for a kind filled by hand."""
    try:
        return _BY_KIND[source.kind](source)
    except KeyError:
        raise InvalidInput(
            f"The source {source.name!r} is a {source.get_kind_display().lower()} source, which is filled by hand "
            "(ingest or upload), not synced.",
            code="not_synced",
        ) from None
