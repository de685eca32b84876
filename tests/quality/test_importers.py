import json
from pathlib import Path

import pytest

from core.errors import InvalidInput
from quality.importers import JudgedQuery, dataset_load, load_beir, load_bioasq, load_hotpotqa, load_rag4p
from tests.quality.conftest import write_jsonl

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
PUBMED = "http://www.ncbi.nlm.nih.gov/pubmed/"


def _snippet(pmid, text):
    return {"document": PUBMED + pmid, "text": text, "offsetInBeginSection": 0}


def test_bioasq_makes_one_document_per_pubmed_id_from_its_distinct_snippets(tmp_path):
    path = tmp_path / "bioasq.json"
    path.write_text(
        json.dumps(
            {
                "questions": [
                    {
                        "id": "a1",
                        "body": "What does concizumab treat?",
                        "type": "factoid",
                        "documents": [PUBMED + "111", PUBMED + "222"],
                        "snippets": [
                            _snippet("111", "First snippet."),
                            _snippet("222", "Other paper."),
                            _snippet("111", "Second snippet."),
                        ],
                    },
                    {
                        "id": "a2",
                        "body": "Is it approved?",
                        "type": "yesno",
                        "documents": [PUBMED + "111"],
                        "snippets": [_snippet("111", "First snippet."), _snippet("111", "Third snippet.")],
                    },
                ]
            }
        )
    )

    dataset = load_bioasq(path)

    texts = {d.external_id: d.text for d in dataset.documents}
    assert texts == {"111": "First snippet. Second snippet. Third snippet.", "222": "Other paper."}
    assert [(j.query_id, j.question) for j in dataset.judgments] == [
        ("a1", "What does concizumab treat?"),
        ("a2", "Is it approved?"),
    ]
    assert dataset.judgments[0].relevant == [{"document": "111", "grade": 1}, {"document": "222", "grade": 1}]
    assert dataset.splitter == "max_tokens"


def test_a_missing_or_malformed_bioasq_file_is_rejected_with_its_name(tmp_path):
    with pytest.raises(InvalidInput, match="no such file"):
        load_bioasq(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(InvalidInput, match="broken.json: not valid JSON"):
        load_bioasq(broken)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"questions": [{"id": "x", "body": "?", "snippets": [{"text": "t"}]}]}))
    with pytest.raises(InvalidInput, match="snippets\\[\\].document"):
        load_bioasq(wrong)


@pytest.mark.skipif(not (DATASETS / "bioasq").is_dir(), reason="shared datasets not available")
def test_the_real_bioasq_file_gives_170_questions_and_2601_documents():
    dataset = load_bioasq(DATASETS / "bioasq" / "bioasq-12b-dev.json")
    assert len(dataset.judgments) == 170
    assert len(dataset.documents) == 2601


def test_hotpotqa_makes_one_document_per_distinct_title_with_supporting_titles_relevant(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text(
        json.dumps(
            [
                {
                    "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
                    "answer": "yes",
                    "type": "comparison",
                    "level": "hard",
                    "supporting_facts": {"title": ["Scott Derrickson", "Ed Wood", "Ed Wood"], "sent_id": [0, 0, 1]},
                    "context": {
                        "title": ["Ed Wood", "Scott Derrickson"],
                        "sentences": [
                            ["Ed Wood was a filmmaker.", " He was American."],
                            ["Scott Derrickson is a director."],
                        ],
                    },
                },
                {
                    "question": "Who directed Sinister?",
                    "answer": "Scott Derrickson",
                    "type": "bridge",
                    "level": "easy",
                    "supporting_facts": {"title": ["Scott Derrickson"], "sent_id": [0]},
                    "context": {
                        "title": ["Scott Derrickson", "Sinister"],
                        "sentences": [["Scott Derrickson is a director."], ["Sinister is a film."]],
                    },
                },
            ]
        )
    )

    dataset = load_hotpotqa(path)

    assert {d.external_id: d.text for d in dataset.documents} == {
        "Ed Wood": "Ed Wood. Ed Wood was a filmmaker. He was American.",
        "Scott Derrickson": "Scott Derrickson. Scott Derrickson is a director.",
        "Sinister": "Sinister. Sinister is a film.",
    }
    assert dataset.judgments[0].query_id == "q1"
    assert [e["document"] for e in dataset.judgments[0].relevant] == ["Scott Derrickson", "Ed Wood"]


def test_hotpotqa_judgments_carry_the_gold_answer_and_the_question_type(tmp_path):
    path = tmp_path / "hotpot.json"
    context = {"title": ["Scott Derrickson"], "sentences": [["Scott Derrickson is a director."]]}
    facts = {"title": ["Scott Derrickson"], "sent_id": [0]}
    path.write_text(
        json.dumps(
            [
                {
                    "question": "Who?",
                    "answer": "Scott Derrickson",
                    "type": "bridge",
                    "supporting_facts": facts,
                    "context": context,
                },
                {"question": "Is he?", "supporting_facts": facts, "context": context},
            ]
        )
    )

    dataset = load_hotpotqa(path)

    assert [j.answers for j in dataset.judgments] == [{"answer": "Scott Derrickson", "type": "bridge"}, {}]


def test_bioasq_judgments_carry_the_type_exact_answer_and_ideal_answers(tmp_path):
    path = tmp_path / "bioasq.json"
    snippets = [_snippet("111", "Concizumab treats hemophilia.")]
    path.write_text(
        json.dumps(
            {
                "questions": [
                    {
                        "id": "y",
                        "body": "Is concizumab approved?",
                        "type": "yesno",
                        "exact_answer": "yes",
                        "ideal_answer": ["Yes, it is approved."],
                        "snippets": snippets,
                    },
                    {
                        "id": "f",
                        "body": "What does concizumab treat?",
                        "type": "factoid",
                        "exact_answer": [["hemophilia A", "haemophilia A"]],
                        "ideal_answer": "Hemophilia A.",
                        "snippets": snippets,
                    },
                    {"id": "s", "body": "Describe concizumab.", "type": "summary", "snippets": snippets},
                ]
            }
        )
    )

    dataset = load_bioasq(path)

    assert [j.answers for j in dataset.judgments] == [
        {"type": "yesno", "exact_answer": "yes", "ideal_answer": ["Yes, it is approved."]},
        {"type": "factoid", "exact_answer": [["hemophilia A", "haemophilia A"]], "ideal_answer": ["Hemophilia A."]},
        {"type": "summary"},
    ]


@pytest.mark.skipif(not (DATASETS / "hotpotqa").is_dir(), reason="shared datasets not available")
def test_every_real_hotpotqa_dev_question_has_a_gold_answer():
    dataset = load_hotpotqa(DATASETS / "hotpotqa" / "hotpotqa-distractor-dev50.json")
    assert all(j.answers.get("answer") and j.answers["type"] in {"bridge", "comparison"} for j in dataset.judgments)


def test_hotpotqa_rejects_context_titles_and_sentences_of_different_lengths(tmp_path):
    path = tmp_path / "hotpot.json"
    path.write_text(
        json.dumps(
            [
                {
                    "question": "?",
                    "supporting_facts": {"title": ["A"]},
                    "context": {"title": ["A", "B"], "sentences": [["a"]]},
                }
            ]
        )
    )
    with pytest.raises(InvalidInput, match="equally long"):
        load_hotpotqa(path)


def _rag4p_folder(tmp_path, csv_text):
    folder = tmp_path / "vasa"
    folder.mkdir()
    write_jsonl(
        folder / "vasa-timeline.jsonl",
        [
            {
                "title": "A faithful contract",
                "timerange": "1625",
                "body": "The king signs a contract. They are to build four new ships.",
            },
        ],
    )
    (folder / "questions_answers.csv").write_text(csv_text, encoding="utf-8")
    return folder


def test_rag4p_gives_chunk_level_judgments_matched_by_text(tmp_path):
    folder = _rag4p_folder(
        tmp_path,
        (
            "document,chunk,text,question\n"
            'a-faithful-contract,1,They are to build four new ships.,"How many ships, then?"\n'
        ),
    )

    dataset = load_rag4p(folder)

    assert [d.external_id for d in dataset.documents] == ["a-faithful-contract"]
    assert dataset.documents[0].metadata == {"timerange": "1625"}
    assert dataset.judgments == [
        JudgedQuery(
            "a-faithful-contract#1",
            "How many ships, then?",
            [{"document": "a-faithful-contract", "text": "They are to build four new ships.", "grade": 1}],
        )
    ]
    assert dataset.splitter == "sentence"


def test_rag4p_rejects_a_judgment_about_an_unknown_document_or_a_missing_csv(tmp_path):
    folder = _rag4p_folder(tmp_path, "document,chunk,text,question\nno-such-doc,0,Text.,Why?\n")
    with pytest.raises(InvalidInput, match="unknown document 'no-such-doc'"):
        load_rag4p(folder)
    (folder / "questions_answers.csv").unlink()
    with pytest.raises(InvalidInput, match="questions_answers.csv: no such file"):
        load_rag4p(folder)


def test_beir_keeps_graded_relevance_and_only_queries_with_qrels(beir_folder):
    dataset = load_beir(beir_folder)

    assert [d.external_id for d in dataset.documents] == ["pasta", "tyre", "expenses"]
    assert dataset.documents[0].title == "Cooking pasta"
    assert dataset.judgments == [
        JudgedQuery("q1", "how long should spaghetti boil", [{"document": "pasta", "grade": 2}]),
        JudgedQuery("q2", "repair a punctured bicycle inner tube", [{"document": "tyre", "grade": 1}]),
    ]


def test_beir_finds_a_single_qrels_file_with_another_name(beir_folder):
    (beir_folder / "qrels" / "test.tsv").rename(beir_folder / "qrels" / "dev.tsv")
    assert len(load_beir(beir_folder).judgments) == 2


def test_beir_rejects_a_malformed_qrels_line_and_a_missing_corpus(beir_folder):
    (beir_folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1 pasta 1\n")
    with pytest.raises(InvalidInput, match="line 2: expected query-id<TAB>corpus-id<TAB>score"):
        load_beir(beir_folder)
    (beir_folder / "corpus.jsonl").unlink()
    with pytest.raises(InvalidInput, match="corpus.jsonl: no such file"):
        load_beir(beir_folder)


def test_a_folder_dataset_takes_exactly_one_path(beir_folder):
    with pytest.raises(InvalidInput, match="exactly one folder"):
        dataset_load(name="beir", paths=[beir_folder, beir_folder])
