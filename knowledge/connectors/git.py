"""The git connector (being written)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from knowledge.connectors.base import Item
from knowledge.models import Source


class GitConnector:
    def __init__(self, source: Source):
        self.source = source

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        raise NotImplementedError
