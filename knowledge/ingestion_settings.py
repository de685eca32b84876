"""The ingestion part of a tenant's settings: how its documents are processed when they arrive.

Stored in ``Tenant.retrieval_config`` beside the retrieval settings (one JSON object per tenant,
validated as a whole by ``retrieval.schema``), but read here, by ingestion: ``IngestionSettings``
is this part's schema (field metadata: allowed values and a one-line description, printed in
``docs/configuration.md``) and ``ingestion_settings_get`` reads a tenant's values.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from core.schema import part_build, setting

# Values of the ``summaries`` setting and ``KB_SUMMARIES``: off, auto (the LLM when one is
# configured, else extractive), extractive (never the LLM), llm (the LLM; without one, or when it
# fails, extractive, recorded as degraded).
SUMMARY_METHODS = ("off", "auto", "extractive", "llm")


@dataclass(frozen=True)
class IngestionSettings:
    """A tenant's ingestion settings; ``None`` means the deployment default (the ``KB_*`` variable)."""

    enrichment: bool | None = setting(
        None, switch=True, doc="enrich chunks with an LLM after ingestion (unset: `KB_ENRICHMENT`)"
    )
    summaries: str | None = setting(
        None, choices=SUMMARY_METHODS, doc="how per-document summaries are written (unset: `KB_SUMMARIES`)"
    )
    near_duplicate_threshold: float | None = setting(
        None, range=(0.5, 1.0), doc="Jaccard similarity of near-duplicates (unset: `KB_NEAR_DUPLICATE_THRESHOLD`)"
    )

    @property
    def enrichment_on(self) -> bool:
        """Whether chunks are enriched: the tenant's ``enrichment``, else ``KB_ENRICHMENT``."""
        return settings.KB_ENRICHMENT if self.enrichment is None else self.enrichment

    @property
    def summary_method(self) -> str:
        """The summary method: the tenant's ``summaries``, else ``KB_SUMMARIES``."""
        return settings.KB_SUMMARIES if self.summaries is None else self.summaries

    @property
    def jaccard_threshold(self) -> float:
        """The near-duplicate threshold: the tenant's, else ``KB_NEAR_DUPLICATE_THRESHOLD``."""
        if self.near_duplicate_threshold is None:
            return settings.KB_NEAR_DUPLICATE_THRESHOLD
        return self.near_duplicate_threshold


def ingestion_settings_get(tenant) -> IngestionSettings:
    """``tenant``'s ingestion settings from its ``retrieval_config`` (other keys ignored).

    ``InvalidInput`` naming the setting when a stored value breaks its rule.
    """
    return part_build(IngestionSettings, dict(tenant.retrieval_config or {}))
