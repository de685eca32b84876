"""Calibrate the retrieval confidence that decides adaptive escalation.

Usage: python benchmarks/confidence_calibration.py [--datasets bioasq hotpotqa rag4p]
For every judged question of the dev sets (their ``bench-<dataset>`` tenants, as in
``retrieval_quality.py``), the ``simple`` pipeline's fused scores give two features: the top
score and its margin over the second. A logistic regression (Newton's method, numpy) maps them
to P(the top chunk is relevant) (hit@1). Prints JSON: the coefficients to paste into
``retrieval/stages/confidence.py``, the Brier score and, per threshold, the share of questions
that would escalate and hit@1 of those that would not and of those that would.
"""

import argparse
import json

import numpy as np
from _setup import django_setup
from _toolkit import log, tenant_for
from retrieval_quality import DATASETS


def logistic_fit(x: np.ndarray, y: np.ndarray, *, l2: float = 1e-3, steps: int = 50) -> np.ndarray:
    """Weights (bias first) of an L2-regularized logistic regression, by Newton's method."""
    design = np.hstack([np.ones((len(x), 1)), x])
    weights = np.zeros(design.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-design @ weights))
        gradient = design.T @ (p - y) + l2 * weights
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + l2 * np.eye(len(weights))
        weights -= np.linalg.solve(hessian, gradient)
    return weights


def main() -> None:
    django_setup()
    from quality.importers import dataset_load
    from quality.models import Judgment
    from quality.services.runs import _duplicate_documents, _judged_ranking
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    args = parser.parse_args()
    rows, labels, names = [], [], []
    for name in args.datasets:
        dataset = dataset_load(name=name, paths=DATASETS[name])
        tenant, judgment_list, _ = tenant_for(dataset, name=name)
        duplicates = _duplicate_documents(tenant)
        for judgment in Judgment.objects.filter(judgment_list=judgment_list).order_by("pk"):
            run = pipeline_retrieve(
                AnswerRequest(question=judgment.question[:2000], pipeline="simple", k=10), tenant=tenant
            )
            scores = [r.score for r in run.results] + [0.0, 0.0]
            ranking, grades, _ = _judged_ranking(run.results, judgment.relevant, duplicates)
            rows.append([scores[0], scores[0] - scores[1]])
            labels.append(1.0 if ranking and grades.get(ranking[0], 0) > 0 else 0.0)
            names.append(name)
        log(f"{name}: {sum(1 for n in names if n == name)} questions")
    x, y = np.array(rows), np.array(labels)
    weights = logistic_fit(x, y)
    p = 1 / (1 + np.exp(-(weights[0] + x @ weights[1:])))
    output = {
        "features": ["top_score", "margin"],
        "weights": {
            "bias": round(float(weights[0]), 4),
            "top_score": round(float(weights[1]), 4),
            "margin": round(float(weights[2]), 4),
        },
        "questions": len(y),
        "hit@1": round(float(y.mean()), 4),
        "brier": round(float(np.mean((p - y) ** 2)), 4),
        "brier_constant": round(float(np.mean((y.mean() - y) ** 2)), 4),
        "thresholds": {},
    }
    for threshold in (0.5, 0.6, 0.7, 0.8, 0.9):
        low = p < threshold
        output["thresholds"][str(threshold)] = {
            "escalated": round(float(low.mean()), 4),
            "hit@1_kept": round(float(y[~low].mean()), 4) if (~low).any() else None,
            "hit@1_escalated": round(float(y[low].mean()), 4) if low.any() else None,
            "per_dataset_escalated": {n: round(float(low[np.array(names) == n].mean()), 4) for n in args.datasets},
        }
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
