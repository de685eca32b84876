import pytest

from quality.answer_metrics import (
    answer_normalize,
    exact_match,
    factoid_lenient,
    gold_in_answer,
    rouge_l,
    token_f1,
    yes_no,
)


def test_normalization_drops_case_punctuation_and_articles():
    assert answer_normalize("The  Eiffel Tower, Paris!") == "eiffel tower paris"


def test_exact_match_compares_normalized_strings():
    assert exact_match("the Beatles.", "Beatles") == 1.0
    assert exact_match("Beatles and Wings", "Beatles") == 0.0


def test_token_f1_is_the_harmonic_mean_of_token_precision_and_recall():
    # 2 shared tokens; precision 2/4, recall 2/3 -> F1 = 2*0.5*0.6667/1.1667 = 0.5714
    assert token_f1("Arthur Conan Doyle wrote", "Sir Arthur Doyle") == pytest.approx(0.5714, abs=1e-4)
    assert token_f1("", "Paris") == 0.0


def test_token_f1_scores_yes_and_no_only_by_exact_match():
    assert token_f1("no, it is not", "no") == 0.0
    assert token_f1("No.", "no") == 1.0


def test_gold_in_answer_matches_on_token_boundaries():
    assert gold_in_answer("It was written by Arthur Conan Doyle in 1887.", "Arthur Conan Doyle") == 1.0
    assert gold_in_answer("Parisian cafes", "Paris") == 0.0
    assert gold_in_answer("anything", "") == 0.0


def test_yes_no_reads_the_first_yes_or_no_word():
    assert yes_no("Yes, both are", "yes") == 1.0
    assert yes_no("No. It is not.", "yes") == 0.0
    assert yes_no("Both are American.", "yes") is None


def test_factoid_lenient_accepts_any_synonym_of_any_entity():
    gold = [["endometrial cancer", "uterine cancer"], ["ovarian cancer"]]
    assert factoid_lenient("Carriers risk uterine cancer.", gold) == 1.0
    assert factoid_lenient("Carriers risk colorectal cancer.", gold) == 0.0


def test_rouge_l_takes_the_best_reference():
    assert rouge_l("the cat sat on the mat", ["a dog ran", "the cat sat on the mat"]) == pytest.approx(1.0)
    assert rouge_l("", ["anything"]) == 0.0
