"""Readers of the evaluation datasets: each returns documents to ingest and judgments.

The corpus construction follows ``../shared/datasets/README.md`` exactly, so numbers compare
with the reference figures there. Every reader validates its input and raises ``InvalidInput``
with the file and the problem for a missing file or malformed content.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from core.errors import InvalidInput
from knowledge.ingestion.readers import ReadDocument, normalize_text


class JudgedQuery(NamedTuple):
    """A question, its relevant entries and its gold answers, when the dataset has them
    (see ``quality.models.Judgment.relevant`` and ``Judgment.answers``; ``{}`` = none)."""

    query_id: str
    question: str
    relevant: list[dict]
    answers: dict = {}  # shared default, never mutated: each reader builds its own dicts


@dataclass
class Dataset:
    """Documents to ingest, judged questions and the splitter the dataset is evaluated with."""

    name: str
    documents: list[ReadDocument] = field(default_factory=list)
    judgments: list[JudgedQuery] = field(default_factory=list)
    splitter: str = "max_tokens"


DATASETS = ("bioasq", "hotpotqa", "rag4p", "beir")


def dataset_load(*, name: str, paths: list[Path]) -> Dataset:
    """Load the dataset ``name`` from ``paths``: one or more JSON files for bioasq and hotpotqa,
    one folder for rag4p and beir."""
    if name not in DATASETS:
        raise InvalidInput(f"Unknown dataset {name!r}; use one of {', '.join(DATASETS)}.")
    if not paths:
        raise InvalidInput("Give at least one path.")
    if name == "bioasq":
        return load_bioasq(paths)
    if name == "hotpotqa":
        return load_hotpotqa(paths)
    if len(paths) != 1:
        raise InvalidInput(f"{name} takes exactly one folder, got {len(paths)} paths.")
    return load_rag4p(paths[0]) if name == "rag4p" else load_beir(paths[0])


# --- helpers ---------------------------------------------------------------------------------


def _paths(path: Path | str | Iterable[Path | str]) -> list[Path]:
    if isinstance(path, (str, Path)):
        return [Path(path)]
    return [Path(p) for p in path]


def _file(path: Path) -> Path:
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file.", code="not_found")
    return path


def _folder(path: Path) -> Path:
    if not Path(path).is_dir():
        raise InvalidInput(f"{path}: no such folder.", code="not_found")
    return Path(path)


def _json(path: Path):
    try:
        return json.loads(_file(path).read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not valid JSON ({exc}).", code="malformed_dataset") from exc


def _malformed(where: str, problem: str) -> InvalidInput:
    return InvalidInput(f"{where}: {problem}", code="malformed_dataset")


def _string(value, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _malformed(where, f"{key!r} must be a non-empty string.")
    return value


def _jsonl(path: Path) -> list[dict]:
    rows = []
    try:
        lines = _file(path).read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise _malformed(str(path), f"not UTF-8 text ({exc}).") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _malformed(f"{path}, line {number}", f"malformed JSON ({exc.msg}).") from exc
        if not isinstance(row, dict):
            raise _malformed(f"{path}, line {number}", "expected a JSON object.")
        rows.append(row)
    if not rows:
        raise _malformed(str(path), "the file is empty.")
    return rows


# --- BioASQ ----------------------------------------------------------------------------------


def load_bioasq(path: Path | str | Iterable[Path | str]) -> Dataset:
    """BioASQ golden JSON (one file, or several read as one in order).

    A document per PubMed id with at least one snippet; its text is its distinct snippet texts
    in order of first appearance, joined by a space; its id is the PubMed number (last part of
    the url). A question's relevant documents are its snippets' PubMed ids (grade 1). Its gold
    answers (``Judgment.answers``) are its ``type``, ``exact_answer`` and ``ideal_answer`` (a
    single string becomes a one-item list), those it has.
    """
    texts: dict[str, list[str]] = {}
    judgments: list[JudgedQuery] = []
    for file in _paths(path):
        data = _json(file)
        questions = data.get("questions") if isinstance(data, dict) else None
        if not isinstance(questions, list):
            raise _malformed(str(file), 'expected {"questions": [...]}.')
        for number, question in enumerate(questions, start=1):
            where = f"{file}, question {number}"
            if not isinstance(question, dict):
                raise _malformed(where, "expected a JSON object.")
            query_id = _string(question.get("id"), where, "id")
            body = _string(question.get("body"), where, "body")
            snippets = question.get("snippets")
            if not isinstance(snippets, list):
                raise _malformed(where, "'snippets' must be a list.")
            relevant: list[str] = []
            for snippet in snippets:
                if not isinstance(snippet, dict):
                    raise _malformed(where, "a snippet is not a JSON object.")
                url = _string(snippet.get("document"), where, "snippets[].document")
                text = _string(snippet.get("text"), where, "snippets[].text")
                pmid = url.rstrip("/").rsplit("/", 1)[-1]
                seen = texts.setdefault(pmid, [])
                if text not in seen:
                    seen.append(text)
                if pmid not in relevant:
                    relevant.append(pmid)
            if relevant:
                judgments.append(
                    JudgedQuery(
                        query_id,
                        body,
                        [{"document": p, "grade": 1} for p in relevant],
                        _bioasq_answers(question, where),
                    )
                )
    _unique_query_ids(judgments, "BioASQ")
    documents = [
        ReadDocument(
            external_id=pmid,
            title=f"PubMed {pmid}",
            text=normalize_text(" ".join(snippet_texts)),
            uri=f"http://www.ncbi.nlm.nih.gov/pubmed/{pmid}",
        )
        for pmid, snippet_texts in texts.items()
    ]
    return Dataset("bioasq", documents, judgments, splitter="max_tokens")


def _bioasq_answers(question: dict, where: str) -> dict:
    """The gold answers of one BioASQ question: ``{"type", "exact_answer", "ideal_answer"}``, those it has."""
    answers: dict = {}
    kind = question.get("type")
    if kind is not None:
        answers["type"] = _string(kind, where, "type")
    exact = question.get("exact_answer")
    if exact not in (None, "", []):
        if not isinstance(exact, (str, list)):
            raise _malformed(where, "'exact_answer' must be a string or a list.")
        answers["exact_answer"] = exact
    ideal = question.get("ideal_answer")
    if isinstance(ideal, str):
        ideal = [ideal]
    if ideal not in (None, []):
        if not isinstance(ideal, list) or not all(isinstance(text, str) for text in ideal):
            raise _malformed(where, "'ideal_answer' must be a string or a list of strings.")
        if any(text.strip() for text in ideal):
            answers["ideal_answer"] = [text for text in ideal if text.strip()]
    return answers


def _unique_query_ids(judgments: list[JudgedQuery], name: str) -> None:
    ids = [j.query_id for j in judgments]
    if len(set(ids)) != len(ids):
        raise InvalidInput(f"{name}: two questions share an id.", code="malformed_dataset")


# --- HotpotQA --------------------------------------------------------------------------------


def load_hotpotqa(path: Path | str | Iterable[Path | str]) -> Dataset:
    """HotpotQA (distractor) JSON: a list of questions with their context paragraphs.

    One document per distinct context title across all questions (first occurrence wins), text
    = title + ". " + the sentences joined (HotpotQA sentences carry their own leading spaces,
    so they are concatenated as they are); relevant documents = the ``supporting_facts`` titles.
    Questions have no id in this file: ``query_id`` is their 1-based position ("q1", "q2", ...).
    A question's gold answers (``Judgment.answers``) are its ``answer`` and ``type`` ("bridge" or
    "comparison"), those it has.
    """
    documents: dict[str, ReadDocument] = {}
    judgments: list[JudgedQuery] = []
    for file in _paths(path):
        data = _json(file)
        if not isinstance(data, list):
            raise _malformed(str(file), "expected a JSON list of questions.")
        for item in data:
            number = len(judgments) + 1
            where = f"{file}, question {number}"
            if not isinstance(item, dict):
                raise _malformed(where, "expected a JSON object.")
            question = _string(item.get("question"), where, "question")
            context, facts = item.get("context"), item.get("supporting_facts")
            if not isinstance(context, dict) or not isinstance(facts, dict):
                raise _malformed(where, "'context' and 'supporting_facts' must be objects.")
            titles, paragraphs = context.get("title"), context.get("sentences")
            if not isinstance(titles, list) or not isinstance(paragraphs, list) or len(titles) != len(paragraphs):
                raise _malformed(where, "context needs equally long 'title' and 'sentences' lists.")
            for title, sentences in zip(titles, paragraphs, strict=True):
                title = _string(title, where, "context.title[]")
                if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
                    raise _malformed(where, "context.sentences must be lists of strings.")
                if title not in documents:
                    documents[title] = ReadDocument(
                        external_id=title,
                        title=title,
                        text=normalize_text(title + ". " + "".join(sentences)),
                    )
            supporting = facts.get("title")
            if not isinstance(supporting, list) or not supporting:
                raise _malformed(where, "supporting_facts.title must be a non-empty list.")
            relevant = list(dict.fromkeys(_string(t, where, "supporting_facts.title[]") for t in supporting))
            answers = {
                key: _string(item[key], where, key) for key in ("answer", "type") if item.get(key) not in (None, "")
            }
            judgments.append(
                JudgedQuery(f"q{number}", question, [{"document": t, "grade": 1} for t in relevant], answers)
            )
    return Dataset("hotpotqa", list(documents.values()), judgments, splitter="max_tokens")


# --- RAG4p -----------------------------------------------------------------------------------


def rag4p_document_id(title: str) -> str:
    """RAG4p's id of a Vasa document: its title lowercased with spaces as dashes."""
    return title.strip().lower().replace(" ", "-")


def load_rag4p(folder: Path | str) -> Dataset:
    """The RAG4p Vasa corpus: ``vasa-timeline.jsonl`` and ``questions_answers.csv``.

    Documents are the timeline entries (title, body; ``timerange`` kept as metadata). Each CSV
    row (document, chunk, text, question) is a chunk-level judgment: a retrieved chunk is
    relevant when it contains ``text``. Evaluated with the sentence splitter.
    """
    folder = _folder(Path(folder))
    timeline, answers = folder / "vasa-timeline.jsonl", folder / "questions_answers.csv"
    documents: list[ReadDocument] = []
    for number, row in enumerate(_jsonl(timeline), start=1):
        where = f"{timeline}, line {number}"
        title = _string(row.get("title"), where, "title")
        body = _string(row.get("body"), where, "body")
        documents.append(
            ReadDocument(
                external_id=rag4p_document_id(title),
                title=title,
                text=normalize_text(body),
                metadata={"timerange": row.get("timerange", "")},
            )
        )
    if len({d.external_id for d in documents}) != len(documents):
        raise _malformed(str(timeline), "two documents share a title.")
    try:
        with _file(answers).open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = {"document", "chunk", "text", "question"} - set(reader.fieldnames or [])
            if missing:
                raise _malformed(str(answers), f"missing column(s) {', '.join(sorted(missing))}.")
            rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise _malformed(str(answers), f"unreadable CSV ({exc}).") from exc
    known = {d.external_id for d in documents}
    judgments = []
    for number, row in enumerate(rows, start=2):
        where = f"{answers}, line {number}"
        document = _string(row.get("document"), where, "document")
        if document not in known:
            raise _malformed(where, f"unknown document {document!r}.")
        judgments.append(
            JudgedQuery(
                f"{document}#{_string(row.get('chunk'), where, 'chunk')}",
                _string(row.get("question"), where, "question"),
                [{"document": document, "text": _string(row.get("text"), where, "text"), "grade": 1}],
            )
        )
    if not judgments:
        raise _malformed(str(answers), "no judgments.")
    _unique_query_ids(judgments, str(answers))
    return Dataset("rag4p", documents, judgments, splitter="sentence")


# --- BEIR ------------------------------------------------------------------------------------


def _beir_qrels_file(folder: Path, split: str) -> Path:
    preferred = folder / "qrels" / f"{split}.tsv"
    if preferred.is_file():
        return preferred
    candidates = sorted((folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
    candidates = candidates or sorted(folder.glob("*.tsv"))
    if len(candidates) != 1:
        raise InvalidInput(
            f"{folder}: expected qrels/{split}.tsv or exactly one qrels .tsv file, found {len(candidates)}.",
            code="not_found" if not candidates else "malformed_dataset",
        )
    return candidates[0]


def load_beir(folder: Path | str, *, split: str = "test") -> Dataset:
    """A BEIR dataset folder: ``corpus.jsonl`` (_id, title, text), ``queries.jsonl`` (_id, text)
    and ``qrels/<split>.tsv`` (or the one qrels .tsv): query-id, corpus-id, score, with a header.

    Graded relevance (score > 0 is relevant); only queries with a relevant document are kept.
    A document's title becomes its title (and so its chunks' heading); a document with neither
    title nor text is left out (it could never be retrieved).
    """
    folder = _folder(Path(folder))
    corpus_file, queries_file = folder / "corpus.jsonl", folder / "queries.jsonl"
    documents: dict[str, ReadDocument] = {}
    for number, row in enumerate(_jsonl(corpus_file), start=1):
        where = f"{corpus_file}, line {number}"
        doc_id = row.get("_id")
        if not isinstance(doc_id, (str, int)) or str(doc_id) == "":
            raise _malformed(where, "'_id' is missing.")
        title, text = row.get("title") or "", row.get("text") or ""
        if not isinstance(title, str) or not isinstance(text, str):
            raise _malformed(where, "'title' and 'text' must be strings.")
        if str(doc_id) in documents:
            raise _malformed(where, f"duplicate _id {doc_id!r}.")
        body = normalize_text(text) or normalize_text(title)
        if body:
            documents[str(doc_id)] = ReadDocument(external_id=str(doc_id), title=title.strip()[:500], text=body)
    queries: dict[str, str] = {}
    for number, row in enumerate(_jsonl(queries_file), start=1):
        where = f"{queries_file}, line {number}"
        query_id = row.get("_id")
        if not isinstance(query_id, (str, int)) or str(query_id) == "":
            raise _malformed(where, "'_id' is missing.")
        queries[str(query_id)] = _string(row.get("text"), where, "text")
    qrels_file = _beir_qrels_file(folder, split)
    relevant: dict[str, dict[str, int]] = {}
    try:
        lines = qrels_file.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise _malformed(str(qrels_file), f"not UTF-8 text ({exc}).") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip() or number == 1:  # the header: query-id corpus-id score
            continue
        parts = line.split("\t")
        where = f"{qrels_file}, line {number}"
        if len(parts) != 3:
            raise _malformed(where, "expected query-id<TAB>corpus-id<TAB>score.")
        try:
            grade = int(float(parts[2]))
        except ValueError as exc:
            raise _malformed(where, f"score {parts[2]!r} is not a number.") from exc
        query_id, doc_id = parts[0].strip(), parts[1].strip()
        if query_id not in queries:
            raise _malformed(where, f"unknown query {query_id!r}.")
        if grade > 0:
            relevant.setdefault(query_id, {})[doc_id] = grade
    if not relevant:
        raise _malformed(str(qrels_file), "no relevant judgments.")
    judgments = [
        JudgedQuery(query_id, queries[query_id], [{"document": d, "grade": g} for d, g in grades.items()])
        for query_id, grades in relevant.items()
    ]
    return Dataset("beir", list(documents.values()), judgments, splitter="max_tokens")
