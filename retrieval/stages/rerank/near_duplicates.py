"""Signal reranker ``near_duplicates`` (see ``retrieval.stages.rerank``). Not built yet: never active."""

from __future__ import annotations


def active(run) -> bool:
    """Whether this reranker runs for ``run``."""
    return False


def rerank(run, results, *, k: int):
    """``results`` unchanged, and an empty summary."""
    return results, {}
