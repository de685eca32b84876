"""The retrieve and fuse stages' settings (``SearchConfig``) and the limits every request obeys.

Defaults, then ``KB_FUSION``, then a tenant's ``Tenant.retrieval_config``, then a request's
overrides. Every key is checked against its field (``core.schema``): an unknown key or a bad
value raises ``InvalidInput`` naming it, so a broken tenant setting is a clear 400, never a 500.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.conf import settings

from core.errors import InvalidInput
from core.schema import part_fields, setting, setting_check, tenant_settings

MODES = ("hybrid", "lexical", "dense")
FUSIONS = ("rrf", "weighted", "tm2c2", "dbsf")
MAX_QUERY_CHARS = 2000


def _search(default, **rule):
    return setting(default, label="Search setting", **rule)


@dataclass(frozen=True)
class SearchConfig:
    """How the retrievers and the fusion run (the ``retrieve`` and ``fuse`` stages).

    ``fusion`` is one of ``FUSIONS``; ``candidates`` is how many chunks each retriever brings
    (and the HNSW ``ef_search`` floor). The defaults (min-max weighted fusion, 0.7 dense / 0.3
    BM25, k1 = 1.2, b = 0.75) won on all three shared datasets
    (``benchmarks/retrieval_quality.py --variants``; README, "Retrieval quality").
    """

    fusion: str = _search("weighted", choices=FUSIONS, doc="how the two candidate lists fuse (default: `KB_FUSION`)")
    rrf_k: int = _search(60, range=(1, 1000), integer=True, doc="k of reciprocal rank fusion")
    dense_weight: float = _search(0.7, range=(0.0, 1.0), doc="weight of the dense list in weighted fusions")
    lexical_weight: float = _search(0.3, range=(0.0, 1.0), doc="weight of the BM25 list in weighted fusions")
    candidates: int = _search(100, range=(1, 1000), integer=True, doc="chunks each retriever brings")
    ef_search: int = _search(100, range=(1, 1000), integer=True, doc="HNSW search breadth (at least `candidates`)")
    bm25_k1: float = _search(1.2, range=(0.0, 10.0), doc="BM25 term-frequency saturation")
    bm25_b: float = _search(0.75, range=(0.0, 1.0), doc="BM25 length normalization")
    # Default by measurement (benchmarks/enrichment_quality.py, docs/enrichment.md).
    enrichment_weight: float = _search(
        0.0, range=(0.0, 2.0), doc="weight of the enrichment field's BM25 added to the body's (0 = off)"
    )
    # The memory field: chunks ranked by the facts walks kept from them (retrieval.walks.memory).
    # Off by default; on per tenant where benchmarks/walk_memory.py measures it better.
    memory_weight: float = _search(
        0.0, range=(0.0, 2.0), doc="weight of the memory field (facts kept by walks) in the fusion (0 = off)"
    )

    @classmethod
    def for_tenant(cls, tenant, **overrides) -> SearchConfig:
        """The tenant's configuration with ``overrides`` on top (``None`` values are ignored).

        Keys of ``tenant.retrieval_config`` that are not search settings (e.g. ``pipeline``)
        are left to ``retrieval.schema``. ``InvalidInput`` for a bad value.
        """
        stored = tenant_settings(tenant, keys=_FIELDS)
        given = {k: v for k, v in overrides.items() if v is not None}
        return cls.from_dict({"fusion": settings.KB_FUSION, **stored, **given})

    @classmethod
    def from_dict(cls, values: dict) -> SearchConfig:
        """A validated config from ``values`` (search keys only); ``InvalidInput`` naming a bad key."""
        unknown = sorted(set(values) - set(_FIELDS))
        if unknown:
            raise InvalidInput(f"Unknown search setting(s): {', '.join(unknown)}.")
        return cls(**{name: search_check(name, value) for name, value in values.items()})

    def as_dict(self) -> dict:
        return asdict(self)


_FIELDS = part_fields(SearchConfig)


def search_check(name: str, value):
    """``value`` checked (and coerced int -> float) for the search setting ``name``."""
    if name == "fusion" and value not in FUSIONS:
        raise InvalidInput(f"Unknown fusion {value!r}; use one of {', '.join(FUSIONS)}.")
    return setting_check(_FIELDS[name], value)
