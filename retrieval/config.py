"""Retrieval settings (``SearchConfig``) and their validation.

Defaults, then ``KB_FUSION``, then a tenant's ``Tenant.retrieval_config``, then a request's
overrides. Every key is checked: an unknown key or a bad value raises ``InvalidInput`` naming it,
so a broken tenant setting is a clear 400, never a 500.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from django.conf import settings

from core.errors import InvalidInput

MODES = ("hybrid", "lexical", "dense")
FUSIONS = ("rrf", "weighted", "tm2c2", "dbsf")
MAX_QUERY_CHARS = 2000


@dataclass(frozen=True)
class SearchConfig:
    """How the retrievers and the fusion run.

    ``fusion`` is one of ``FUSIONS``; ``candidates`` is how many chunks each retriever brings
    (and the HNSW ``ef_search`` floor). The defaults (min-max weighted fusion, 0.7 dense / 0.3
    BM25, k1 = 1.2, b = 0.75) won on all three shared datasets
    (``benchmarks/retrieval_quality.py --variants``; README, "Retrieval quality").
    """

    fusion: str = "weighted"
    rrf_k: int = 60
    dense_weight: float = 0.7
    lexical_weight: float = 0.3
    candidates: int = 100
    ef_search: int = 100
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    # Weight of the enrichment field's BM25 added to the body's (retrieval.stages.retrieve.enrichment);
    # 0 = off. Default by measurement (benchmarks/enrichment_quality.py, docs/enrichment.md).
    enrichment_weight: float = 0.0

    @classmethod
    def for_tenant(cls, tenant, **overrides) -> SearchConfig:
        """The tenant's configuration with ``overrides`` on top (``None`` values are ignored).

        Keys of ``tenant.retrieval_config`` that are not search settings (e.g. ``pipeline``)
        are left to ``retrieval.pipeline``. ``InvalidInput`` for a bad value.
        """
        stored = {k: v for k, v in (tenant.retrieval_config or {}).items() if k in _FIELDS}
        given = {k: v for k, v in overrides.items() if v is not None}
        return cls.from_dict({"fusion": settings.KB_FUSION, **stored, **given})

    @classmethod
    def from_dict(cls, values: dict) -> SearchConfig:
        """A validated config from ``values`` (search keys only); ``InvalidInput`` naming a bad key."""
        unknown = sorted(set(values) - set(_FIELDS))
        if unknown:
            raise InvalidInput(f"Unknown search setting(s): {', '.join(unknown)}.")
        checked = {name: _check(name, value) for name, value in values.items()}
        return cls(**checked)

    def as_dict(self) -> dict:
        return asdict(self)


_FIELDS = {f.name: f for f in fields(SearchConfig)}
_RANGES = {
    "rrf_k": (1, 1000),
    "dense_weight": (0.0, 1.0),
    "lexical_weight": (0.0, 1.0),
    "candidates": (1, 1000),
    "ef_search": (1, 1000),
    "bm25_k1": (0.0, 10.0),
    "bm25_b": (0.0, 1.0),
    "enrichment_weight": (0.0, 2.0),
}


def _check(name: str, value):
    """``value`` checked (and coerced int -> float) for the search setting ``name``."""
    if name == "fusion":
        if value not in FUSIONS:
            raise InvalidInput(f"Unknown fusion {value!r}; use one of {', '.join(FUSIONS)}.")
        return value
    low, high = _RANGES[name]
    wants_int = _FIELDS[name].type in ("int", int)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (wants_int and not isinstance(value, int)):
        kind = "an integer" if wants_int else "a number"
        raise InvalidInput(f"Search setting {name!r} must be {kind}, not {value!r}.")
    if not low <= value <= high:
        raise InvalidInput(f"Search setting {name!r} must be between {low} and {high}, not {value!r}.")
    return value if wants_int else float(value)
