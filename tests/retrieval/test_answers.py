import socket
import subprocess

import pytest
from django.conf import settings

from knowledge.errors import InvalidInput
from retrieval.answers import NOT_FOUND, cited_numbers, compose_context, question_answer
from retrieval.llm import OpenAIChatModel
from retrieval.search import chunk_search
from retrieval.strategies import top_n, window


class ScriptedChatModel:
    """A chat-model double that records the prompt and replies with a fixed text."""

    name = "scripted"

    def __init__(self, reply: str):
        self.reply = reply
        self.messages = None

    def complete(self, messages, *, max_tokens=512):
        self.messages = messages
        return self.reply


def test_extractive_answers_cite_the_passage_each_sentence_comes_from(corpus):
    answer = question_answer(tenant=corpus, question="How long should spaghetti cook?", use_llm=False)
    assert answer.mode == "extractive"
    assert answer.text.startswith("Extractive answer")
    assert "nine to eleven minutes" in answer.text
    numbers = cited_numbers(answer.text, limit=10)
    assert numbers and {c.n for c in answer.citations} == set(numbers)
    cited = {c.n: c.as_dict() for c in answer.citations}
    line = next(line for line in answer.text.splitlines() if "nine to eleven" in line)
    n = cited_numbers(line, limit=10)[0]
    assert cited[n]["document"] == "recipes/pasta"
    assert "nine to eleven minutes" in cited[n]["text"]


def test_the_window_strategy_adds_the_neighbouring_chunks_of_the_same_version(tenant, source):
    from knowledge.ingestion.readers import ReadDocument
    from knowledge.ingestion.splitters import SentenceSplitter
    from knowledge.services import documents_ingest

    text = "Alpha opens the story. Bravo follows next. Charlie mentions the golden key. Delta closes. Echo ends."
    documents_ingest(
        tenant=tenant,
        source=source,
        splitter=SentenceSplitter(),
        documents=[ReadDocument(external_id="story", title="Story", text=text)],
    )
    results = chunk_search(tenant=tenant, query="golden key", k=1).results
    assert results[0].chunk.text == "Charlie mentions the golden key."
    [passage] = window(tenant, results, n=1, size=1)
    assert passage.text == "Bravo follows next. Charlie mentions the golden key. Delta closes."
    assert passage.chunks == [1, 2, 3]
    assert top_n(results, n=1)[0].text == "Charlie mentions the golden key."


def test_reverse_packing_puts_the_best_passage_last_but_keeps_its_number(corpus):
    passages = top_n(chunk_search(tenant=corpus, query="boil spaghetti", k=3).results, n=3)
    context = compose_context(passages, reverse_pack=True)
    assert context.rfind("[1]") > context.rfind("[3]")
    assert compose_context(passages, reverse_pack=False).startswith("[1]")


def test_llm_answers_keep_only_citations_that_exist_in_the_context(corpus):
    model = ScriptedChatModel("Boil it for nine to eleven minutes [1]. Serve hot [9].")
    answer = question_answer(tenant=corpus, question="How long do I boil spaghetti?", chat_model=model, k=3)
    assert answer.mode == "llm"
    assert "[9]" not in answer.text
    assert [c.n for c in answer.citations] == [1]
    assert answer.citations[0].as_dict()["document"] == "recipes/pasta"
    assert "Question: How long do I boil spaghetti?" in model.messages[1]["content"]


def test_an_llm_that_finds_nothing_is_reported_as_not_found(corpus):
    answer = question_answer(
        tenant=corpus, question="What is the capital of Peru?", chat_model=ScriptedChatModel(NOT_FOUND)
    )
    assert answer.found is False
    assert answer.citations == []


def test_bad_arguments_are_rejected(corpus):
    with pytest.raises(InvalidInput):
        question_answer(tenant=corpus, question="pasta", strategy="sideways")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def local_llm_url():
    """The real local LLM server (llama.cpp + Gemma 3 270M) for end-to-end tests."""
    from retrieval.local_llm import local_llm_start

    port = _free_port()
    process = local_llm_start(settings.KB_DATA_DIR, port=port)
    yield f"http://127.0.0.1:{port}/v1"
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def test_the_real_local_llm_answers_from_the_context_end_to_end(corpus, local_llm_url):
    from retrieval.local_llm import MODEL_ALIAS

    model = OpenAIChatModel(MODEL_ALIAS, base_url=local_llm_url, api_key="local")
    answer = question_answer(
        tenant=corpus, question="How long do I boil spaghetti?", chat_model=model, k=2, strategy="top_n"
    )
    assert answer.mode == "llm"
    assert answer.text.strip()
    for citation in answer.citations:  # every citation the tiny model makes resolves to a passage
        assert 1 <= citation.n <= 2
