"""Tiny dataset files in each evaluation dataset's format."""

import json

import pytest


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.fixture
def beir_folder(tmp_path):
    """A BEIR-format folder: three documents, three queries, graded qrels (q3 has none)."""
    folder = tmp_path / "tiny-beir"
    (folder / "qrels").mkdir(parents=True)
    write_jsonl(
        folder / "corpus.jsonl",
        [
            {
                "_id": "pasta",
                "title": "Cooking pasta",
                "text": "Boil the spaghetti in salted water for nine to eleven minutes until al dente.",
            },
            {
                "_id": "tyre",
                "title": "Fixing a flat bicycle tyre",
                "text": "Patch the punctured inner tube with glue and a rubber patch, then inflate the tyre.",
            },
            {
                "_id": "expenses",
                "title": "Expense reports",
                "text": "Submit travel expense reports within thirty days and attach every receipt.",
            },
        ],
    )
    write_jsonl(
        folder / "queries.jsonl",
        [
            {"_id": "q1", "text": "how long should spaghetti boil"},
            {"_id": "q2", "text": "repair a punctured bicycle inner tube"},
            {"_id": "q3", "text": "a question nobody judged"},
        ],
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\tpasta\t2\nq1\texpenses\t0\nq2\ttyre\t1\n", encoding="utf-8"
    )
    return folder


@pytest.fixture
def hotpotqa_file(tmp_path):
    """A HotpotQA-format file: a bridge question and a yes/no comparison, with gold answers."""
    path = tmp_path / "tiny-hotpot.json"
    derrickson = [
        "Scott Derrickson is an American film director who directed the horror film Sinister in 2012.",
        " He was born in Denver, Colorado, and studied film at the University of Southern California.",
    ]
    wood = [
        "Ed Wood was an American filmmaker who made low budget science fiction films in Hollywood.",
        " His film Plan 9 from Outer Space is often called the worst film ever made.",
    ]
    pasta = ["Boil the spaghetti in plenty of salted water for nine to eleven minutes until al dente."]
    context = {"title": ["Scott Derrickson", "Ed Wood", "Pasta"], "sentences": [derrickson, wood, pasta]}
    path.write_text(
        json.dumps(
            [
                {
                    "question": "Which director of the horror film Sinister was born in Denver?",
                    "answer": "Scott Derrickson",
                    "type": "bridge",
                    "level": "easy",
                    "supporting_facts": {"title": ["Scott Derrickson"], "sent_id": [0]},
                    "context": context,
                },
                {
                    "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
                    "answer": "yes",
                    "type": "comparison",
                    "level": "hard",
                    "supporting_facts": {"title": ["Scott Derrickson", "Ed Wood"], "sent_id": [0, 0]},
                    "context": context,
                },
            ]
        ),
        encoding="utf-8",
    )
    return path
