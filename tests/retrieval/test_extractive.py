"""The extractive answer: sentences chosen lexically (nothing embedded), short answers as typed spans."""

import pytest

from retrieval.request import AnswerRequest
from retrieval.search import chunk_search
from retrieval.stages.generate.extractive import (
    HEADLINE_MIN_CONFIDENCE,
    LABEL,
    answer_extract,
    headline_choose,
    headline_confidence,
    sentences_rank,
)
from retrieval.stages.generate.spans import Sentence, answer_type, question_kind, span_answer
from retrieval.stages.pack import top_n
from retrieval.types import Passage


def passages_of(*texts: str) -> list[Passage]:
    return [Passage(anchor=None, text=text, score=1.0) for text in texts]


SHIRLEY = passages_of(
    "Kiss and Tell is a 1945 American comedy film starring Shirley Temple as Corliss Archer. "
    "The film was released by Columbia Pictures in the autumn.",
    "Shirley Temple Black was an American actress and diplomat. "
    "Later in life she served as Chief of Protocol of the United States under President Gerald Ford.",
)


def test_the_extractive_answer_embeds_no_sentence_at_question_time(corpus, monkeypatch):
    passages = top_n(
        chunk_search(AnswerRequest(question="How long should spaghetti cook?", k=3), tenant=corpus).results, n=3
    )

    def refuse(*args, **kwargs):
        raise AssertionError("embedded at question time")

    monkeypatch.setattr("knowledge.embedders.LocalMiniLMEmbedder.embed", refuse)
    answer = answer_extract("How long should spaghetti cook?", passages, embedder=corpus.embedder)
    assert answer.text.startswith(LABEL) and "nine to eleven minutes" in answer.text
    assert answer.citation_coverage == 1.0 and answer.citations


def test_the_sentence_sharing_the_questions_rarer_terms_ranks_first():
    passages = passages_of(
        "The museum opens at nine in the morning every day of the week. "
        "The museum shop sells postcards, books and prints of the collection.",
        "The Vasa warship sank in Stockholm harbour in 1628 on its maiden voyage after a short sail.",
    )
    ranked = sentences_rank("When did the Vasa warship sink?", passages)
    assert ranked[0].n == 2 and "1628" in ranked[0].text


def test_among_equally_matching_sentences_the_better_ranked_passage_wins():
    sentence = "The harbour festival takes place every summer in the old town square."
    ranked = sentences_rank("When is the harbour festival?", passages_of(sentence, sentence))
    assert [c.n for c in ranked] == [1, 2] and ranked[0].score > ranked[1].score


def test_a_which_office_question_gets_the_office_as_short_answer_not_a_sentence():
    answer = answer_extract("Which office did Shirley Temple hold under President Gerald Ford?", SHIRLEY)
    assert answer.short_answer.startswith("Chief of Protocol")
    assert len(answer.short_answer.split()) < len(answer.sentences[0]["text"].split())


def test_a_how_many_question_gets_a_number_and_a_when_question_a_date():
    passages = passages_of(
        "The Androscoggin Bank Colisee is a multi-purpose arena in Lewiston, Maine, with 3,677 seats. "
        "The arena opened in 1958 and was renovated in 2005 after a long campaign."
    )
    assert answer_extract("How many seats does the Lewiston arena have?", passages).short_answer == "3,677 seats"
    assert answer_extract("When did the Lewiston arena open?", passages).short_answer == "1958"


def test_an_either_or_question_is_answered_with_one_of_its_two_options():
    passages = passages_of(
        "Annie Morton (born October 8, 1970) is an American model born in Pennsylvania.",
        "Terrence Richardson, known as Terry Richardson (born August 14, 1965), is an American photographer.",
    )
    older = answer_extract("Who is older, Annie Morton or Terry Richardson?", passages)
    younger = answer_extract("Who is younger, Annie Morton or Terry Richardson?", passages)
    assert (older.short_answer, younger.short_answer) == ("Terry Richardson", "Annie Morton")


def test_the_questions_own_names_are_never_its_short_answer():
    short = span_answer(
        "Who starred in Kiss and Tell as Corliss Archer?",
        [Sentence("Kiss and Tell stars Shirley Temple as Corliss Archer.", 1.0)],
    )
    assert short == "Shirley Temple"


def test_a_sentence_opening_with_a_pronoun_offers_its_passages_subject_as_the_answer():
    passages = passages_of(
        "Animorphs. Animorphs is a science fantasy series of young adult books by K. A. Applegate. "
        "It is told in first person, with six main characters taking turns narrating the books."
    )
    question = "What young adult series is told in first person by six narrating characters?"
    assert answer_extract(question, passages).short_answer == "Animorphs"


def test_an_extractive_answer_needs_passages():
    with pytest.raises(ValueError):
        answer_extract("Who?", [])


@pytest.mark.parametrize(
    "question",
    [
        "How do I write a custom model field?",
        "Why does the cache miss?",
        "What is a QuerySet and when is it evaluated?",
        "Were Scott Derrickson and Ed Wood of the same nationality?",
    ],
)
def test_how_to_why_definition_and_yes_no_questions_get_no_typed_span(question):
    assert answer_type(question) is None


@pytest.mark.parametrize(
    "question", ["How do I fix a flat bicycle tyre?", "Why does a bicycle tyre go flat?", "Explain fixing a tyre"]
)
def test_a_how_to_question_leads_with_the_best_passage_and_no_headline(corpus, question):
    passages = top_n(chunk_search(AnswerRequest(question=question, k=3), tenant=corpus).results, n=3)
    answer = answer_extract(question, passages, embedder=corpus.embedder)
    assert question_kind(question) == "explain"
    assert answer.short_answer == ""
    assert answer.lead["document"] == "howto/bike-tyre" and answer.lead["title"] == "Fixing a flat bicycle tyre"
    assert "puncture" in answer.lead["text"]
    assert answer.lead["n"] in {c.n for c in answer.citations}
    assert answer.as_dict()["lead"] == answer.lead


def test_a_fact_question_with_a_confident_sentence_gets_a_headline_and_no_lead(corpus):
    question = "How long should spaghetti cook?"
    passages = top_n(chunk_search(AnswerRequest(question=question, k=3), tenant=corpus).results, n=3)
    answer = answer_extract(question, passages, embedder=corpus.embedder)
    assert question_kind(question) == "fact"
    assert "nine to eleven minutes" in answer.short_answer
    assert answer.lead is None and answer.as_dict()["lead"] is None


def test_a_headline_never_shares_none_of_the_questions_key_terms():
    answer = answer_extract("Which museum holds the Vasa warship?", SHIRLEY)
    assert headline_confidence("Which museum holds the Vasa warship?", SHIRLEY[0].text, SHIRLEY[0]) == 0.0
    assert answer.short_answer == ""
    assert answer.lead is not None and answer.lead["text"]


def test_a_fact_headline_is_shown_only_at_the_measured_confidence():
    passages = passages_of(
        "The Vasa warship sank in Stockholm harbour in 1628 on its maiden voyage after a short sail.",
        "The museum opens at nine in the morning every day of the week, all year round.",
    )
    confident = headline_choose(
        "When did the Vasa warship sink?", passages, sentences_rank("When did the Vasa warship sink?", passages)
    )
    assert confident.shown and confident.text == "1628" and confident.confidence >= HEADLINE_MIN_CONFIDENCE
    vague = "When did the Vasa warship sink near the Danish island of Bornholm during the war?"
    weak = headline_choose(vague, passages, sentences_rank(vague, passages))
    assert weak.confidence < HEADLINE_MIN_CONFIDENCE and not weak.shown
