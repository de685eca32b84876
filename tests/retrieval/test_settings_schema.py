"""The tenant-settings schema: one rule per key, validated in one place, documented from itself."""

from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from core.errors import InvalidInput
from retrieval.pipeline import PIPELINE_NAMES, PIPELINES, pipeline_retrieve, pipeline_spec
from retrieval.request import AnswerRequest
from retrieval.schema import PipelineSpec, setting_keys, settings_table, settings_validate
from retrieval.stages.base import StageProtocol


def test_the_committed_configuration_docs_are_the_schema_s_own_output():
    committed = (Path(settings.BASE_DIR) / "docs" / "configuration.md").read_text()
    assert committed == settings_table(PIPELINE_NAMES)
    call_command("settings_docs", "--check")


def test_every_key_is_documented_once():
    table = settings_table(PIPELINE_NAMES)
    for key in setting_keys():
        assert table.count(f"| `{key}` |") == 1, key


@pytest.mark.parametrize(
    "values, message",
    [
        ({"window_size": 11}, "Setting 'window_size' must be an integer between 0 and 10, not 11."),
        ({"diversity": "lots"}, "Setting 'diversity' must be one of off, caps, mmr, not 'lots'."),
        ({"collapse_near_duplicates": "yes"}, "Setting 'collapse_near_duplicates' must be true or false, not 'yes'."),
        ({"enrichment": 1}, "Setting 'enrichment' must be true or false, not 1."),
        ({"bm25_b": 2}, "Search setting 'bm25_b' must be a number between 0.0 and 1.0, not 2."),
        ({"colour": "blue", "size": 3}, "Unknown retrieval setting(s): colour, size."),
    ],
)
def test_a_bad_value_is_refused_with_a_message_naming_the_key_and_its_rule(values, message):
    with pytest.raises(InvalidInput) as raised:
        settings_validate(values)
    assert str(raised.value) == message


def test_a_spec_reads_and_replaces_any_setting_by_its_key(tenant):
    tenant.retrieval_config = {"themes": "on", "rrf_k": 20, "summaries": "off"}
    spec = pipeline_spec(tenant=tenant)
    assert (spec.setting("themes"), spec.setting("rrf_k"), spec.setting("summaries")) == ("on", 20, "off")
    changed = spec.with_settings(window_size=3, mode="lexical")
    assert (changed.setting("window_size"), changed.mode, spec.setting("window_size")) == (3, "lexical", 1)
    config = changed.as_config()
    assert config["window_size"] == 3 and config["search"]["rrf_k"] == 20 and config["themes"] == "on"


def test_the_flat_trace_config_holds_every_key_of_the_schema():
    config = PipelineSpec().as_config()
    assert set(setting_keys()) - {"pipeline"} <= set(config) | set(config["search"])


def test_every_pipeline_is_a_row_of_stages_of_one_shape(tenant):
    for name, stages in PIPELINES.items():
        assert stages and all(isinstance(stage, StageProtocol) for stage in stages), name
        assert pipeline_spec(tenant=tenant, name=name).name == name


def test_a_reranker_another_app_names_in_the_settings_runs_in_the_chain_with_its_own_settings(corpus):
    chain = list(settings.KB_SIGNAL_RERANKERS)
    chain.insert(chain.index("retrieval.stages.rerank.diversity"), "tests.retrieval.reverse_reranker")
    plain = pipeline_retrieve(AnswerRequest(question="fix a flat tyre", k=3), tenant=corpus)
    with pytest.raises(InvalidInput, match="reverse_top"):
        pipeline_spec(tenant=corpus, overrides={"reverse_top": 2})
    with override_settings(KB_SIGNAL_RERANKERS=chain):
        run = pipeline_retrieve(
            AnswerRequest(question="fix a flat tyre", k=3), tenant=corpus, overrides={"reverse_top": 2}
        )
        assert [s.stage for s in run.steps] == ["scope", "retrieve", "fuse", "reverse"]
        assert run.steps[-1].summary == {"reversed": 2}
        ids = [r.chunk.pk for r in plain.results]
        assert [r.chunk.pk for r in run.results] == [ids[1], ids[0], ids[2]]
        assert "reverse_top" in settings_table(PIPELINE_NAMES)
    with pytest.raises(InvalidInput, match="reverse_top"):
        pipeline_spec(tenant=corpus, overrides={"reverse_top": 2})
