"""Answer metrics against gold answers, as pure functions over strings.

Extractive-QA scoring as in SQuAD (Rajpurkar et al. 2016) and HotpotQA (Yang et al. 2018): the
answer and the gold answer are normalized (``answer_normalize``: lower case, punctuation and the
articles a/an/the removed, whitespace squashed), then

- ``exact_match``: 1.0 when the normalized strings are equal, else 0.0;
- ``token_f1``: the F1 of the bags of normalized tokens (0.0 when either side has none; for
  yes/no/noanswer gold answers HotpotQA's official script asks for an exact match, and so does
  this);
- ``gold_in_answer``: 1.0 when the normalized gold answer occurs in the normalized answer on
  token boundaries (a long answer that says the right name counts).

BioASQ (Tsatsaronis et al. 2015; the Task b measures of Krithara et al. 2023):

- ``yes_no``: the answer's first "yes" or "no" word against ``exact_answer``; ``None`` when the
  answer says neither;
- ``factoid_lenient``: 1.0 when any synonym of any gold entity occurs in the answer (the lenient
  accuracy takes the top five candidates; an answer here is one text, so it is all of them);
- ``rouge_l``: ROUGE-L F-measure of the answer against the best of the ``ideal_answer`` texts
  (``rouge-score``, Google Research's implementation of Lin 2004, Porter stemming on).

All return floats in [0, 1] (``yes_no`` may return ``None``).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_CLOSED = frozenset({"yes", "no", "noanswer"})


def answer_normalize(text: str) -> str:
    """SQuAD normalization: lower case, no punctuation, no articles, single spaces."""
    text = (text or "").lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(answer: str, gold: str) -> float:
    """1.0 when ``answer`` and ``gold`` are equal after ``answer_normalize``, else 0.0."""
    return float(answer_normalize(answer) == answer_normalize(gold))


def token_f1(answer: str, gold: str) -> float:
    """Token F1 of ``answer`` against ``gold`` after normalization (HotpotQA's official rule:
    a yes/no/noanswer on either side scores only by exact match)."""
    predicted, truth = answer_normalize(answer), answer_normalize(gold)
    if (predicted in _CLOSED or truth in _CLOSED) and predicted != truth:
        return 0.0
    predicted_tokens, truth_tokens = predicted.split(), truth.split()
    common = Counter(predicted_tokens) & Counter(truth_tokens)
    same = sum(common.values())
    if not same:
        return 0.0
    precision, recall = same / len(predicted_tokens), same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_in_answer(answer: str, gold: str) -> float:
    """1.0 when the normalized ``gold`` occurs in the normalized ``answer`` on token boundaries."""
    needle = answer_normalize(gold)
    if not needle:
        return 0.0
    return float(f" {needle} " in f" {answer_normalize(answer)} ")


def yes_no(answer: str, gold: str) -> float | None:
    """1.0 / 0.0 when the first yes or no word of ``answer`` matches / differs from ``gold``
    ("yes" or "no"); ``None`` when the answer says neither."""
    match = _YES_NO.search(answer or "")
    if match is None:
        return None
    return float(match.group(1).lower() == (gold or "").strip().lower())


def _synonyms(exact_answer) -> Iterable[str]:
    """Every synonym of a BioASQ ``exact_answer``: a string, a list of strings, or a list of lists."""
    if isinstance(exact_answer, str):
        yield exact_answer
        return
    for item in exact_answer or []:
        yield from _synonyms(item)


def factoid_lenient(answer: str, exact_answer) -> float:
    """1.0 when any synonym of ``exact_answer`` (BioASQ's list of lists) occurs in ``answer``."""
    return float(any(gold_in_answer(answer, synonym) for synonym in _synonyms(exact_answer)))


@lru_cache(maxsize=1)
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(answer: str, references: Sequence[str] | str) -> float:
    """ROUGE-L F-measure of ``answer`` against the best of ``references`` (0.0 for an empty answer)."""
    if isinstance(references, str):
        references = [references]
    if not (answer or "").strip() or not references:
        return 0.0
    scorer = _rouge()
    return max(scorer.score(reference, answer)["rougeL"].fmeasure for reference in references)
