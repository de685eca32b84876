import pytest
from django.db import IntegrityError, transaction

from core.errors import InvalidInput
from knowledge.ingestion.readers import ReadDocument
from knowledge.services import documents_ingest
from quality.models import EvaluationRun, Judgment, JudgmentList
from quality.services import config_diff, evaluation_compare, evaluation_run, judgment_list_import
from tests.factories import EvaluationRunFactory
from tests.retrieval.doubles import ScriptedLLM

OBVIOUS = [
    ("pasta", "How long do I boil spaghetti?", [{"document": "recipes/pasta", "grade": 1}]),
    ("bike", "How do I patch a punctured inner tube?", [{"document": "howto/bike-tyre", "grade": 1}]),
    ("expenses", "When must travel expense reports be submitted?", [{"document": "finance/expenses"}]),
]


def test_importing_a_judgment_list_stores_every_judgment_with_grades(tenant):
    judgment_list = judgment_list_import(tenant=tenant, name="handbook", origin="manual", judgments=OBVIOUS)

    judgments = Judgment.objects.for_tenant(tenant).filter(judgment_list=judgment_list).order_by("pk")
    assert [j.query_id for j in judgments] == ["pasta", "bike", "expenses"]
    assert judgments[2].relevant == [{"document": "finance/expenses", "grade": 1}]


def test_imported_judgments_keep_their_gold_answers_and_lists_without_them_get_none(tenant):
    gold = {"answer": "nine to eleven minutes", "type": "bridge"}
    judgments = [(*OBVIOUS[0], gold), OBVIOUS[1]]

    judgment_list = judgment_list_import(tenant=tenant, name="gold", origin="hotpotqa", judgments=judgments)

    stored = dict(Judgment.objects.filter(judgment_list=judgment_list).values_list("query_id", "answers"))
    assert stored == {"pasta": gold, "bike": {}}


@pytest.mark.parametrize(
    "answers",
    [["yes"], {"answer": ""}, {"answer": 3}, {"exact_answer": [[]]}, {"ideal_answer": [""]}, {"type": ["yesno"]}],
)
def test_malformed_gold_answers_store_nothing(tenant, answers):
    with pytest.raises(InvalidInput):
        judgment_list_import(
            tenant=tenant,
            name="bad",
            origin="manual",
            judgments=[*OBVIOUS, ("q", "A question?", [{"document": "a"}], answers)],
        )
    assert not JudgmentList.objects.for_tenant(tenant).exists()


def test_the_database_refuses_gold_answers_that_are_not_an_object(tenant):
    judgment_list = judgment_list_import(tenant=tenant, name="handbook", origin="manual", judgments=OBVIOUS)
    with pytest.raises(IntegrityError), transaction.atomic():
        Judgment.objects.filter(judgment_list=judgment_list, query_id="pasta").update(answers=["yes"])


def test_importing_a_list_twice_under_one_name_is_rejected(tenant):
    judgment_list_import(tenant=tenant, name="handbook", origin="manual", judgments=OBVIOUS)
    with pytest.raises(InvalidInput, match="already has a judgment list"):
        judgment_list_import(tenant=tenant, name="handbook", origin="manual", judgments=OBVIOUS)
    assert JudgmentList.objects.for_tenant(tenant).count() == 1


@pytest.mark.parametrize(
    "relevant",
    [[], [{"grade": 1}], [{"document": "a", "grade": -1}], [{"document": "a"}, {"document": "b", "text": "x"}]],
)
def test_a_malformed_relevant_list_stores_nothing(tenant, relevant):
    with pytest.raises(InvalidInput):
        judgment_list_import(
            tenant=tenant, name="bad", origin="manual", judgments=[*OBVIOUS, ("q", "A question?", relevant)]
        )
    assert not JudgmentList.objects.for_tenant(tenant).exists()


def test_obvious_questions_find_their_document_first(corpus):
    judgment_list = judgment_list_import(tenant=corpus, name="handbook", origin="manual", judgments=OBVIOUS)

    run = evaluation_run(judgment_list=judgment_list, mode="hybrid", splitter="max_tokens")

    assert run.metrics["hit@1"] == 1.0
    assert run.metrics["mrr@10"] == 1.0
    assert run.metrics["queries"] == 3
    assert {"ndcg@10", "recall@10", "recall@100", "precision@10", "p50_ms", "p95_ms"} <= set(run.metrics)
    assert run.per_query[0]["top"][0] == "recipes/pasta"
    assert run.config["splitter"] == "max_tokens" and run.config["search"]["fusion"] in ("rrf", "weighted")
    assert run.pipeline == "simple" and run.config["name"] == "simple"
    assert EvaluationRun.objects.for_tenant(corpus).get() == run


def test_a_run_through_an_llm_pipeline_adds_up_the_llm_usage(corpus, monkeypatch):
    llm = ScriptedLLM(chat_reply="Spaghetti boils in salted water for about ten minutes until al dente.")
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: llm)
    judgment_list = judgment_list_import(tenant=corpus, name="handbook", origin="manual", judgments=OBVIOUS)

    run = evaluation_run(judgment_list=judgment_list, pipeline="hyde")

    assert run.pipeline == "hyde" and run.config["rewrites"] == ["hyde"] and run.mode == "hybrid"
    assert len(llm.calls) == 3
    assert (run.metrics["llm_calls"], run.metrics["tokens_in"], run.metrics["tokens_out"]) == (3, 300, 30)
    assert run.metrics["cost_usd"] == 0.0 and run.metrics["degraded"] == 0
    assert run.metrics["p50_ms"] > 0 and run.metrics["p95_ms"] >= run.metrics["p50_ms"]
    assert run.per_query[0]["usage"]["llm_calls"] == 1


def test_overrides_and_mode_change_what_a_run_measures_and_records(corpus):
    judgment_list = judgment_list_import(tenant=corpus, name="handbook", origin="manual", judgments=OBVIOUS)

    run = evaluation_run(judgment_list=judgment_list, overrides={"fusion": "rrf", "rrf_k": 10}, mode="lexical")

    assert run.mode == "lexical" and run.config["mode"] == "lexical"
    assert run.config["search"]["fusion"] == "rrf" and run.config["search"]["rrf_k"] == 10
    assert corpus.retrieval_config == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"pipeline": "magic"}, "Unknown pipeline"), ({"overrides": {"rrf_k": 0}}, "rrf_k"), ({"mode": "x"}, "mode")],
)
def test_a_run_with_a_bad_pipeline_or_setting_stores_nothing(corpus, kwargs, message):
    judgment_list = judgment_list_import(tenant=corpus, name="handbook", origin="manual", judgments=OBVIOUS)
    with pytest.raises(InvalidInput, match=message):
        evaluation_run(judgment_list=judgment_list, **kwargs)
    assert not EvaluationRun.objects.exists()


def test_chunk_level_judgments_need_the_chunk_that_contains_the_text(corpus):
    judgment_list = judgment_list_import(
        tenant=corpus,
        name="chunks",
        origin="rag4p",
        judgments=[
            (
                "boil",
                "How long do I boil spaghetti?",
                [{"document": "recipes/pasta", "text": "Cook for nine to eleven  minutes until al dente."}],
            ),
            (
                "never",
                "How long do I boil spaghetti?",
                [{"document": "recipes/pasta", "text": "A sentence that no chunk contains."}],
            ),
        ],
    )

    run = evaluation_run(judgment_list=judgment_list, mode="lexical")

    by_id = {q["query_id"]: q["metrics"] for q in run.per_query}
    assert by_id["boil"]["hit@1"] == 1.0
    assert by_id["never"]["recall@100"] == 0.0
    assert run.dataset == "rag4p"


def test_a_document_stored_as_a_duplicate_is_found_through_its_twins_chunks(tenant, source):
    text = "Dolphins sleep with one half of the brain at a time."
    documents_ingest(
        tenant=tenant,
        source=source,
        documents=[
            ReadDocument(external_id="original", title="Dolphins", text=text),
            ReadDocument(external_id="copy", title="Dolphins", text=text),
        ],
    )
    judgment_list = judgment_list_import(
        tenant=tenant,
        name="dups",
        origin="manual",
        judgments=[
            ("sleep", "How do dolphins sleep?", [{"document": "copy"}]),
        ],
    )

    run = evaluation_run(judgment_list=judgment_list, mode="lexical")

    assert run.metrics["recall@10"] == 1.0


def test_comparing_runs_gives_metric_deltas_and_the_queries_that_changed(db):
    run_a = EvaluationRunFactory(ndcg=0.5, query_ndcg=[("q1", 1.0), ("q2", 0.0), ("q3", 0.5)])
    run_b = EvaluationRunFactory(ndcg=0.6, query_ndcg=[("q1", 0.5), ("q2", 0.8), ("q3", 0.5)])

    comparison = evaluation_compare(run_a=run_a, run_b=run_b)

    assert comparison["metrics"]["ndcg@10"] == {"a": 0.5, "b": 0.6, "delta": 0.1}
    assert [row["query_id"] for row in comparison["better"]] == ["q2"]
    assert [(row["query_id"], row["delta"]) for row in comparison["worse"]] == [("q1", -0.5)]
    assert comparison["unchanged"] == 1


def test_comparing_runs_of_two_pipelines_lists_the_settings_that_differ(db):
    search = {"fusion": "weighted", "rrf_k": 60}
    run_a = EvaluationRunFactory(config={"name": "simple", "rewrites": [], "search": search, "k": 100})
    run_b = EvaluationRunFactory(
        pipeline="expand",
        config={"name": "expand", "rewrites": ["expand"], "search": {**search, "fusion": "rrf"}, "k": 100},
    )

    comparison = evaluation_compare(run_a=run_a, run_b=run_b)

    assert comparison["config"] == {
        "name": {"a": "simple", "b": "expand"},
        "pipeline": {"a": "simple", "b": "expand"},
        "rewrites": {"a": [], "b": ["expand"]},
        "search.fusion": {"a": "weighted", "b": "rrf"},
    }


def test_a_setting_present_on_one_side_only_is_a_difference():
    assert config_diff({"a": 1}, {"a": 1, "b": 2}) == {"b": {"a": None, "b": 2}}
