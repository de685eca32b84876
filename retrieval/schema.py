"""A tenant's settings: one schema composed of the stages' settings parts, validated in one place.

``Tenant.retrieval_config`` is one flat JSON object. Each key belongs to one settings part: the
pipeline's own (``PipelineSpec``: ``mode``, ``include_summaries``), a stage's (its frozen config
dataclass: ``PackConfig``, ``ExpandConfig``, ... and each registered signal reranker's
``Config``), the retrieve and fuse stages' ``SearchConfig``, or the ingestion part that
``knowledge`` reads (``IngestionSettings``). ``settings_validate`` checks a whole object against
the parts' field rules (``core.schema``), ``PipelineSpec`` holds the result, and
``settings_table`` prints the schema as the configuration docs (``manage.py settings_docs``
writes ``docs/configuration.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from core.errors import InvalidInput
from core.schema import part_fields, part_rows, setting, setting_check
from knowledge.ingestion_settings import IngestionSettings
from retrieval.config import MODES, SearchConfig, search_check
from retrieval.registry import registry_configured
from retrieval.stages.adaptive import AdaptiveConfig
from retrieval.stages.generate import GenerateConfig
from retrieval.stages.pack import PackConfig
from retrieval.stages.rewrite.expand import ExpandConfig
from retrieval.stages.rewrite.hyde import HydeConfig
from retrieval.stages.superrag import SuperRAGConfig
from retrieval.stages.themes import ThemesConfig
from retrieval.walks.config import WalkConfig

PIPELINE_KEY = "pipeline"


@dataclass(frozen=True)
class PipelineSpec:
    """A pipeline and the tenant's settings it runs with. ``as_config()`` is what runs and traces record.

    ``name`` is the pipeline (``retrieval.pipeline.PIPELINES``), ``kind`` "standard" or the
    composite stage it runs (superrag, walkingrag, adaptive), ``rewrites`` its rewrite stages in
    order. ``mode`` and ``include_summaries`` are the pipeline's own settings, ``search`` the
    retrieve and fuse stages', ``parts`` every other part by its class (``of(part)``; a part not
    given holds its defaults).
    """

    name: str = "simple"
    kind: str = "standard"
    rewrites: tuple[str, ...] = ()
    mode: str = setting("hybrid", choices=MODES, doc="retrieval mode: BM25 and dense fused, or one of them")
    include_summaries: bool = setting(
        True, switch=True, doc="summary chunks compete in retrieval (a request's `summaries` overrides)"
    )
    search: SearchConfig = field(default_factory=SearchConfig)
    parts: dict = field(default_factory=dict)

    def of(self, part: type) -> Any:
        """The settings part ``part`` (a config dataclass) of this spec."""
        found = self.parts.get(part)
        if found is None:
            found = _DEFAULTS.get(part)
            if found is None:
                found = _DEFAULTS[part] = part()
        return found

    def setting(self, key: str) -> Any:
        """The value of the setting ``key`` (a ``Tenant.retrieval_config`` key); ``KeyError`` for an unknown key."""
        part = owners()[key][0]
        holder = self if part is PipelineSpec else self.search if part is SearchConfig else self.of(part)
        return getattr(holder, key)

    def with_settings(self, **values) -> PipelineSpec:
        """This spec with the settings ``values`` (``retrieval_config`` keys) replaced, each checked;
        ``InvalidInput`` naming a bad key or value."""
        spec = self
        for part, checked in settings_validate(values).items():
            if part is PipelineSpec:
                spec = replace(spec, **checked)
            elif part is SearchConfig:
                spec = replace(spec, search=replace(spec.search, **checked))
            else:
                spec = replace(spec, parts={**spec.parts, part: replace(spec.of(part), **checked)})
        return spec

    def as_config(self) -> dict:
        """Every setting, flat (as stored), plus ``name``, ``kind``, ``rewrites`` and ``search`` (a dict)."""
        data: dict = {"name": self.name, "kind": self.kind, "rewrites": list(self.rewrites), "mode": self.mode}
        for part in settings_parts():
            holder = self.of(part)
            data.update({name: getattr(holder, name) for name in part_fields(part)})
        data["include_summaries"] = self.include_summaries
        data["search"] = self.search.as_dict()
        return data


_DEFAULTS: dict[type, Any] = {}


def settings_parts() -> list[type]:
    """The stages' and ingestion's settings parts, in the docs' order (the pipeline's own fields
    and ``SearchConfig`` come first and are not listed)."""
    return [
        PackConfig,
        ExpandConfig,
        HydeConfig,
        SuperRAGConfig,
        WalkConfig,
        AdaptiveConfig,
        ThemesConfig,
        GenerateConfig,
        *(module.Config for module in registry_configured().signal_rerankers),
        IngestionSettings,
    ]


_owners: dict[tuple, dict[str, tuple[type, Any]]] = {}


def owners() -> dict[str, tuple[type, Any]]:
    """Every setting key -> (its part, its field); built once per set of registered rerankers."""
    key = registry_configured().reranker_paths
    found = _owners.get(key)
    if found is None:
        found = {}
        for part in (PipelineSpec, SearchConfig, *settings_parts()):
            for name, f in part_fields(part).items():
                assert name not in found, f"setting {name!r} is declared twice"
                found[name] = (part, f)
        _owners[key] = found
    return found


def setting_keys() -> tuple[str, ...]:
    """Every key ``Tenant.retrieval_config`` accepts."""
    return (PIPELINE_KEY, *owners())


def settings_validate(values: dict) -> dict[type, dict]:
    """``values`` (``retrieval_config`` keys; ``pipeline`` is left to the caller) checked and
    grouped by part: ``{part: {key: value}}``. ``InvalidInput`` for an unknown key, naming the
    keys, or for a bad value, naming the key and its rule."""
    known = owners()
    unknown = sorted(k for k in values if k not in known and k != PIPELINE_KEY)
    if unknown:
        raise InvalidInput(f"Unknown retrieval setting(s): {', '.join(unknown)}.")
    grouped: dict[type, dict] = {}
    for key, value in values.items():
        if key == PIPELINE_KEY:
            continue
        part, f = known[key]
        grouped.setdefault(part, {})[key] = (
            search_check(key, value) if part is SearchConfig else setting_check(f, value)
        )
    return grouped


def _table(rows) -> list[str]:
    lines = ["| key | default | allowed | what it does |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return lines


def settings_table(pipelines: tuple[str, ...]) -> str:
    """The configuration docs (Markdown): one table per settings part, generated from the schema."""
    out = [
        "# Configuration: a tenant's settings",
        "",
        "Generated from the settings schema (`retrieval/schema.py`) by `python manage.py settings_docs`;",
        "a test keeps this page equal to its output. Each key is stored in `Tenant.retrieval_config`",
        "(one JSON object per tenant; the admin's tenant form and the quality gate validate it as a",
        "whole). Settings layer as defaults < `KB_FUSION` < the tenant's values < a request's",
        "overrides. An unknown key or a value outside its range is refused with a message naming it.",
        "",
        "## Pipeline",
        "",
        *_table(
            [
                (
                    f"`{PIPELINE_KEY}`",
                    "unset",
                    ", ".join(pipelines),
                    "the pipeline a question runs through (unset: `KB_PIPELINE`)",
                )
            ]
            + part_rows(PipelineSpec)
        ),
        "",
        "## Retrieve and fuse (`SearchConfig`)",
        "",
        *_table(part_rows(SearchConfig)),
    ]
    for part in settings_parts():
        title = (part.__doc__ or part.__name__).strip().splitlines()[0].rstrip(".")
        out += ["", f"## {title} (`{part.__module__}.{part.__name__}`)", "", *_table(part_rows(part))]
    return "\n".join(out) + "\n"


__all__ = [
    "PipelineSpec",
    "owners",
    "setting_keys",
    "settings_parts",
    "settings_table",
    "settings_validate",
]
