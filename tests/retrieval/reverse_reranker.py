"""A signal reranker registered from outside ``retrieval`` (by ``test_settings_schema``): it reverses the top results."""

from dataclasses import dataclass

from core.schema import setting

NAME = "reverse"


@dataclass(frozen=True)
class Config:
    """Settings of the ``reverse`` test reranker."""

    reverse_top: int = setting(0, range=(0, 10), integer=True, doc="results reversed at the top (0 = off)")


def active(state) -> bool:
    return state.spec.of(Config).reverse_top > 0


def rerank(state, results, *, k: int):
    n = state.spec.of(Config).reverse_top
    results = list(reversed(results[:n])) + results[n:]
    for rank, result in enumerate(results, 1):
        result.rank = rank
    return results, {"reversed": n}
