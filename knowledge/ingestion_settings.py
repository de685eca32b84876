"""The ingestion part of a tenant's settings: how its documents are processed when they arrive.

Stored in ``Tenant.retrieval_config`` beside the retrieval settings (one JSON object per tenant,
validated as a whole by ``retrieval.schema``), but read here, by ingestion: ``IngestionSettings``
is this part's schema (field metadata: allowed values and a one-line description, printed in
``docs/configuration.md``); ``ingestion_setting`` reads one of a tenant's values, checked, and
``enrichment_on``, ``enrichment_entities_on``, ``summary_method`` and ``jaccard_threshold`` apply
the deployment defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from core.schema import part_fields, setting, setting_check, tenant_settings

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
    enrichment_entities: bool | None = setting(
        None,
        switch=True,
        doc="add the chunks' named entities (spaCy) to their enrichment (unset: `KB_ENRICHMENT_ENTITIES`)",
    )
    summaries: str | None = setting(
        None, choices=SUMMARY_METHODS, doc="how per-document summaries are written (unset: `KB_SUMMARIES`)"
    )
    near_duplicate_threshold: float | None = setting(
        None, range=(0.5, 1.0), doc="Jaccard similarity of near-duplicates (unset: `KB_NEAR_DUPLICATE_THRESHOLD`)"
    )


def ingestion_setting(tenant, name: str):
    """``tenant``'s value of the ingestion setting ``name`` (a field of ``IngestionSettings``),
    checked alone, so a bad value of another key never stops this one; ``None`` when unset.

    ``InvalidInput`` naming the setting when the stored value breaks its rule.
    """
    return setting_check(_FIELDS[name], tenant_settings(tenant).get(name))


def enrichment_on(tenant) -> bool:
    """Whether ``tenant``'s chunks are enriched: its ``enrichment`` setting, else ``KB_ENRICHMENT``."""
    value = ingestion_setting(tenant, "enrichment")
    return settings.KB_ENRICHMENT if value is None else value


def enrichment_entities_on(tenant) -> bool:
    """Whether ``tenant``'s enrichment extracts named entities: its ``enrichment_entities``
    setting, else ``KB_ENRICHMENT_ENTITIES``."""
    value = ingestion_setting(tenant, "enrichment_entities")
    return settings.KB_ENRICHMENT_ENTITIES if value is None else value


def summary_method(tenant) -> str:
    """``tenant``'s summary method: its ``summaries`` setting, else ``KB_SUMMARIES``."""
    value = ingestion_setting(tenant, "summaries")
    return settings.KB_SUMMARIES if value is None else value


def jaccard_threshold(tenant) -> float:
    """``tenant``'s near-duplicate threshold: its setting, else ``KB_NEAR_DUPLICATE_THRESHOLD``."""
    value = ingestion_setting(tenant, "near_duplicate_threshold")
    return settings.KB_NEAR_DUPLICATE_THRESHOLD if value is None else value


_FIELDS = part_fields(IngestionSettings)
