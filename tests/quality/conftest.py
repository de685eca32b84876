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
