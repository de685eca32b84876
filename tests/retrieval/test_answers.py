"""The pack and generate stages and the answers pipelines give: citations, not-found, degradation."""

import pytest

from core.errors import InvalidInput
from llm import LLMClient, LLMTimeout
from retrieval.pipeline import pipeline_answer
from retrieval.search import chunk_search
from retrieval.stages.generate.cited import NOT_FOUND, answer_generate, cited_numbers
from retrieval.stages.generate.extractive import answer_extract
from retrieval.stages.pack import context_compose, top_n, window
from tests.retrieval.doubles import ScriptedLLM


def test_extractive_answers_cite_the_passage_each_sentence_comes_from(corpus):
    answer = pipeline_answer(tenant=corpus, question="How long should spaghetti cook?", use_llm=False).answer
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
    context = context_compose(passages, reverse_pack=True)
    assert context.rfind('<passage n="1"') > context.rfind('<passage n="3"')
    assert context_compose(passages, reverse_pack=False).startswith('<passage n="1"')


def test_llm_answers_keep_only_citations_that_exist_in_the_context(corpus):
    llm = ScriptedLLM(chat_reply="Boil it for nine to eleven minutes [1]. Serve hot [9].")
    run = pipeline_answer(tenant=corpus, question="How long do I boil spaghetti?", llm=llm, k=3)
    answer = run.answer
    assert answer.mode == "llm"
    assert "[9]" not in answer.text
    assert [c.n for c in answer.citations] == [1]
    assert answer.citations[0].as_dict()["document"] == "recipes/pasta"
    assert "The user's question: How long do I boil spaghetti?" in llm.calls[0][1][1]["content"]
    assert run.usage.llm_calls == 1 and run.degraded is False


def test_an_llm_that_finds_nothing_is_reported_as_not_found(corpus):
    run = pipeline_answer(tenant=corpus, question="What is the capital of Peru?", llm=ScriptedLLM(chat_reply=NOT_FOUND))
    assert run.answer.found is False
    assert run.answer.citations == []


def test_an_llm_that_times_out_degrades_to_a_cited_extractive_answer(corpus):
    llm = ScriptedLLM(chat_reply=LLMTimeout("The LLM endpoint did not answer within 1 s."))
    run = pipeline_answer(tenant=corpus, question="How long do I boil spaghetti?", llm=llm)
    assert run.degraded is True
    assert "generate" in run.degraded_reason and "did not answer" in run.degraded_reason
    assert run.answer.mode == "extractive" and run.answer.citations
    assert "LLM could not answer" in run.answer.text
    generate = next(step for step in run.steps if step.stage == "generate")
    assert generate.error and generate.summary["fallback"] is True


def test_bad_arguments_are_rejected(corpus):
    with pytest.raises(InvalidInput):
        pipeline_answer(tenant=corpus, question="pasta", strategy="sideways")
    with pytest.raises(InvalidInput):
        pipeline_answer(tenant=corpus, question="pasta", pipeline="telepathy")
    with pytest.raises(InvalidInput):
        pipeline_answer(tenant=corpus, question="   ")


def test_the_generate_stage_alone_writes_a_cited_answer_from_passages(corpus):
    passages = top_n(chunk_search(tenant=corpus, query="expense reports", k=2).results, n=2)
    answer, usage = answer_generate(
        "When are reports due?", passages, llm=ScriptedLLM(chat_reply="Within 30 days [1].")
    )
    assert [c.n for c in answer.citations] == [1] and usage.llm_calls == 1
    extractive = answer_extract("When are reports due?", passages, embedder=corpus.embedder)
    assert extractive.mode == "extractive" and extractive.citations


def test_the_real_local_llm_answers_from_the_context_end_to_end(corpus, local_llm_url):
    from llm.local import MODEL_ALIAS

    llm = LLMClient(MODEL_ALIAS, base_url=local_llm_url, api_key="local", timeout_s=600)
    run = pipeline_answer(tenant=corpus, question="How long do I boil spaghetti?", llm=llm, k=2, strategy="top_n")
    assert run.answer.mode == "llm", run.degraded_reason
    assert run.answer.text.strip()
    for citation in run.answer.citations:  # every citation the tiny model makes resolves to a passage
        assert 1 <= citation.n <= 2
