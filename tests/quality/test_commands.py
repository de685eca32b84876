import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.models import Tenant
from quality.models import EvaluationRun


def test_evaluate_prints_one_json_object_and_removes_its_tenant(beir_folder, db):
    out, err = StringIO(), StringIO()

    call_command(
        "evaluate",
        "--dataset",
        "beir",
        "--path",
        str(beir_folder),
        "--mode",
        "hybrid",
        "--json",
        stdout=out,
        stderr=err,
    )

    result = json.loads(out.getvalue())
    assert set(result) == {"dataset", "mode", "metrics", "run_id", "config", "tenant"}
    assert {"ndcg@10", "recall@10", "recall@100", "mrr@10", "hit@1", "p50_ms", "p95_ms", "queries"} <= set(
        result["metrics"]
    )
    assert result["metrics"]["queries"] == 2
    assert result["metrics"]["hit@1"] == 1.0
    assert result["config"]["splitter"] == "max_tokens"
    assert "Ingesting" in err.getvalue()
    assert not Tenant.objects.filter(slug__startswith="eval-").exists()
    run = EvaluationRun.objects.get(pk=result["run_id"])
    assert run.tenant is None and run.judgment_list is None


def test_evaluate_with_keep_leaves_the_tenant_for_inspection(beir_folder, db):
    out = StringIO()
    call_command(
        "evaluate",
        "--dataset",
        "beir",
        "--path",
        str(beir_folder),
        "--mode",
        "lexical",
        "--keep",
        "--json",
        stdout=out,
        stderr=StringIO(),
    )

    result = json.loads(out.getvalue())
    assert Tenant.objects.get(slug=result["tenant"]).evaluation_runs.get().pk == result["run_id"]


def test_evaluate_on_a_missing_path_fails_with_a_clear_message(tmp_path, db):
    with pytest.raises(CommandError, match="No such file or folder"):
        call_command("evaluate", "--dataset", "beir", "--path", str(tmp_path / "absent"), stderr=StringIO())
    assert not Tenant.objects.exists()


def test_evaluate_on_malformed_data_fails_and_creates_no_tenant(beir_folder, db):
    (beir_folder / "queries.jsonl").write_text("{broken\n")
    with pytest.raises(CommandError, match="queries.jsonl, line 1: malformed JSON"):
        call_command("evaluate", "--dataset", "beir", "--path", str(beir_folder), stderr=StringIO())
    assert not Tenant.objects.exists()


def test_evaluate_with_pipelines_ingests_once_and_prints_one_run_per_pipeline(beir_folder, db):
    out, err = StringIO(), StringIO()

    call_command(
        "evaluate",
        "--dataset",
        "beir",
        "--path",
        str(beir_folder),
        "--pipeline",
        "simple,expand",
        "--mode",
        "lexical",
        "--keep",
        "--json",
        stdout=out,
        stderr=err,
    )

    result = json.loads(out.getvalue())
    assert set(result) == {"dataset", "tenant", "mode", "runs"}
    assert result["dataset"] == "beir" and result["mode"] == "lexical"
    assert list(result["runs"]) == ["simple", "expand"]
    for name, entry in result["runs"].items():
        assert entry["pipeline"] == name and entry["config"]["mode"] == "lexical"
        assert {"ndcg@10", "recall@10", "hit@1", "queries", "p50_ms", "p95_ms"} <= set(entry["metrics"])
        assert {"llm_calls", "tokens_in", "tokens_out", "cost_usd"} <= set(entry["metrics"])
        assert entry["metrics"]["queries"] == 2
    assert result["runs"]["expand"]["config"]["rewrites"] == ["expand"]
    assert err.getvalue().count("Ingesting") == 1
    tenant = Tenant.objects.get(slug=result["tenant"])
    runs = EvaluationRun.objects.for_tenant(tenant).order_by("pk")
    assert [r.pk for r in runs] == [e["run_id"] for e in result["runs"].values()]
    assert len({r.judgment_list_id for r in runs}) == 1


def test_evaluate_with_an_unknown_pipeline_names_the_valid_ones_and_ingests_nothing(beir_folder, db):
    with pytest.raises(CommandError, match="magic.*simple, rephrase, expand, hyde, advanced"):
        call_command(
            "evaluate", "--dataset", "beir", "--path", str(beir_folder), "--pipeline", "simple,magic", stderr=StringIO()
        )
    assert not Tenant.objects.exists()
    assert not EvaluationRun.objects.exists()
