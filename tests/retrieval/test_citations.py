"""The citation safety net and the reader of the LLM's JSON reply (retrieval.stages.generate)."""

import json

import pytest

from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from retrieval.stages.generate.citations import (
    CITED_THRESHOLD,
    SUPPORT_THRESHOLD,
    citations_check,
    sentence_spans,
)
from retrieval.stages.generate.fields import FieldReader, fields_read
from retrieval.stages.pack import top_n


@pytest.fixture
def passages(corpus):
    """The pasta, bicycle and expenses passages, numbered 1..n by rank for the question."""
    return top_n(chunk_search(AnswerRequest(question="how long do I boil spaghetti", k=3), tenant=corpus).results, n=3)


def number_of(passages, document: str) -> int:
    return next(n for n, p in enumerate(passages, start=1) if p.document.external_id == document)


def test_a_sentence_without_a_citation_gets_the_passage_that_supports_it(corpus, passages):
    pasta = number_of(passages, "recipes/pasta")
    text = f"Cook the spaghetti for nine to eleven minutes until al dente. Drain the pasta [{pasta}]."

    checked = citations_check(text, passages, embedder=corpus.embedder)

    first, second = checked.sentences
    assert first["citations"] == [pasta] and first["added"] is True and first["supported"] is True
    assert second == {"text": "Drain the pasta.", "citations": [pasta], "supported": True, "added": False}
    assert (
        checked.text
        == f"Cook the spaghetti for nine to eleven minutes until al dente [{pasta}]. Drain the pasta [{pasta}]."
    )
    assert checked.coverage == 1.0 and checked.unsupported == []


def test_an_off_topic_sentence_stays_uncited_and_is_marked_unsupported(corpus, passages):
    pasta = number_of(passages, "recipes/pasta")
    text = f"Cook it for nine to eleven minutes [{pasta}]. Paris is the capital of France."

    checked = citations_check(text, passages, embedder=corpus.embedder)

    assert checked.sentences[1] == {
        "text": "Paris is the capital of France.",
        "citations": [],
        "supported": False,
        "added": False,
    }
    assert checked.unsupported == ["Paris is the capital of France."]
    assert checked.coverage == 0.5
    assert checked.text == text  # nothing is cited that no passage says


def test_a_cited_sentence_its_passage_does_not_support_is_marked_unsupported_but_keeps_its_citation(corpus, passages):
    bike = number_of(passages, "howto/bike-tyre")
    checked = citations_check(f"The capital of France is Paris [{bike}].", passages, embedder=corpus.embedder)
    assert checked.sentences[0]["citations"] == [bike] and checked.sentences[0]["supported"] is False
    assert checked.unsupported == ["The capital of France is Paris."]


def test_a_sentence_about_what_the_passages_lack_needs_no_citation(corpus, passages):
    checked = citations_check("The passages do not name the capital of Peru.", passages, embedder=corpus.embedder)
    assert checked.sentences[0]["citations"] == [] and checked.sentences[0]["supported"] is True
    assert checked.unsupported == [] and checked.coverage == 0.0


def test_numbers_outside_the_passages_are_no_citation_and_the_net_runs_one_embedding_call(corpus, passages):
    from knowledge.embedders import get_embedder

    class Counting:
        calls = 0

        def embed(self, texts):
            Counting.calls += 1
            return get_embedder(corpus.embedder).embed(texts)

    checked = citations_check("Boil salted water [9]. Cook the spaghetti.", passages, embedder=Counting())
    assert Counting.calls == 1
    assert all(sentence["added"] for sentence in checked.sentences)
    assert "[9]" in checked.text  # the text is left to the caller; the sentence cites a real passage


def test_without_an_embedder_only_the_models_own_citations_count():
    checked = citations_check("Boil water [1]. Cook it.", [object()], embedder=None)
    assert [s["supported"] for s in checked.sentences] == [True, False]
    assert checked.unsupported == ["Cook it."] and checked.coverage == 0.5


def test_the_thresholds_are_the_ones_measured_for_the_default_embedder():
    assert SUPPORT_THRESHOLD == 0.5 and CITED_THRESHOLD == 0.35


def test_sentence_spans_point_at_each_sentence_and_its_markers_in_the_text():
    text = "Boil it. [1] Drain it [2].\n- Serve hot."
    spans = sentence_spans(text)
    assert [(s.text, s.numbers) for s in spans] == [("Boil it.", [1]), ("Drain it.", [2]), ("Serve hot.", [])]
    assert [text[s.start : s.end] for s in spans] == ["Boil it. [1]", "Drain it [2].", "Serve hot."]


def test_the_reader_streams_only_the_explanation_decoded_from_json_split_anywhere():
    reply = json.dumps({"short_answer": 'The "30" days 😀', "answer": "Due in 30 days [1].\nLate ones\\wait [2]."})
    for size in (1, 2, 3, 7):
        reader = FieldReader("answer")
        streamed = "".join(reader.feed(reply[i : i + size]) for i in range(0, len(reply), size))
        assert streamed == "Due in 30 days [1].\nLate ones\\wait [2]."
        assert reader.fields["short_answer"] == 'The "30" days 😀'
        assert reader.closed == {"short_answer", "answer"} and reader.complete and not reader.raw


def test_the_reader_takes_a_reply_that_is_not_json_as_the_explanation_whole():
    reader = FieldReader("answer")
    streamed = "".join(reader.feed(piece) for piece in ["  Boil ", "it [1]", "."])
    assert streamed == "Boil it [1]." and reader.raw and reader.fields == {"answer": "Boil it [1]."}


def test_the_reader_keeps_what_a_cut_off_or_fenced_reply_holds():
    cut = fields_read('{"short_answer": "Ten minutes", "answer": "Boil the pasta for ten min')
    assert cut.fields == {"short_answer": "Ten minutes", "answer": "Boil the pasta for ten min"}
    assert cut.closed == {"short_answer"} and not cut.complete
    fenced = fields_read('```json\n{"answer": "Yes [1].", "short_answer": "Yes"}\n```')
    assert fenced.fields == {"answer": "Yes [1].", "short_answer": "Yes"} and not fenced.raw
