"""Retrieval confidence: how likely the top chunk of a ``simple`` run answers the question.

A logistic model of two features of the fused ranking, the top score and its margin over the
second, fitted on the shared dev sets (BioASQ dev, HotpotQA dev50, Vasa; 307 questions, label:
the top chunk is relevant) by ``benchmarks/confidence_calibration.py``, whose output
(``benchmarks/results/confidence_calibration.json``) these weights come from: Brier score 0.060
against 0.075 for a constant. Below 0.8, 8.8 % of the dev questions escalate, and their hit@1 is
0.63 against 0.95 for those kept. The features assume the default min-max weighted fusion
(scores in [0, 1]); under another fusion the confidence is only a rough guide.
"""

from __future__ import annotations

import math

from retrieval.types import SearchResult

WEIGHTS = {"bias": -11.131, "top_score": 14.3759, "margin": 2.7522}
DEFAULT_THRESHOLD = 0.8


def retrieval_confidence(results: list[SearchResult]) -> float:
    """P(the first result is relevant) in [0, 1] from the fused scores; 0.0 for no results."""
    if not results:
        return 0.0
    top = results[0].score
    second = results[1].score if len(results) > 1 else 0.0
    z = WEIGHTS["bias"] + WEIGHTS["top_score"] * top + WEIGHTS["margin"] * (top - second)
    return 1.0 / (1.0 + math.exp(-z))
