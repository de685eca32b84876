"""Comparing measurements: two evaluation runs (metrics, queries, configuration) and metric deltas."""

from __future__ import annotations

from quality.models import EvaluationRun
from quality.services.answers import ANSWER_METRIC_LABELS

_MISSING = object()


def metrics_delta(metrics_a: dict, metrics_b: dict) -> dict[str, dict]:
    """``{name: {"a", "b", "delta"}}`` (delta = b - a, 4 decimals) for the numeric metrics both have."""
    return {
        name: {"a": metrics_a[name], "b": metrics_b[name], "delta": round(metrics_b[name] - metrics_a[name], 4)}
        for name in metrics_a
        if name in metrics_b
        and isinstance(metrics_a[name], (int, float))
        and isinstance(metrics_b[name], (int, float))
        and not isinstance(metrics_a[name], bool)
    }


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def answer_metrics_compare(metrics_a: dict, metrics_b: dict) -> list[dict]:
    """The answer metrics (``ANSWER_METRIC_LABELS``, in its order) that either run has.

    A list of ``{"metric", "label", "a", "b", "delta"}``: a side without the metric (a run
    measured without answers, or a list without gold answers) is ``None``, and so is the delta
    (b - a, 4 decimals) then.
    """
    rows = []
    for metric, label in ANSWER_METRIC_LABELS.items():
        a, b = metrics_a.get(metric), metrics_b.get(metric)
        a, b = (a if _number(a) else None), (b if _number(b) else None)
        if a is None and b is None:
            continue
        delta = round(b - a, 4) if a is not None and b is not None else None
        rows.append({"metric": metric, "label": label, "a": a, "b": b, "delta": delta})
    return rows


def _flat(config: dict, prefix: str = "") -> dict:
    """Nested settings as dotted keys: ``{"search": {"fusion": "rrf"}}`` -> ``{"search.fusion": "rrf"}``."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_diff(config_a: dict, config_b: dict) -> dict[str, dict]:
    """The settings whose values differ between two configurations: ``{key: {"a", "b"}}``, by key.

    Nested settings are compared one by one under dotted keys (``search.fusion``); a key missing
    on one side shows as ``None`` there.
    """
    config_a, config_b = _flat(config_a), _flat(config_b)
    keys = sorted(set(config_a) | set(config_b))
    diff = {}
    for key in keys:
        a, b = config_a.get(key, _MISSING), config_b.get(key, _MISSING)
        if a != b:
            diff[key] = {"a": None if a is _MISSING else a, "b": None if b is _MISSING else b}
    return diff


def evaluation_compare(*, run_a: EvaluationRun, run_b: EvaluationRun, metric: str = "ndcg@10") -> dict:
    """How ``run_b`` differs from ``run_a``: metric deltas (b - a) and per-query changes.

    Returns ``{"metric", "metrics": {name: {"a", "b", "delta"}}`` (the retrieval metrics both
    runs have), ``"answers": [...]`` (the answer metrics, gold ones included, of
    ``answer_metrics_compare``), ``"config": {key: {"a", "b"}}`` (the configuration keys that
    differ, pipeline and mode included), ``"better": [...], "worse": [...],
    "unchanged": n, "only_a": n, "only_b": n}``; ``better``/``worse`` list the queries both
    runs share whose ``metric`` rose/fell in ``run_b``, largest change first, each as
    ``{"query_id", "question", "a", "b", "delta", "top_a", "top_b"}``.
    """
    retrieval_a, retrieval_b = (
        {name: value for name, value in metrics.items() if not name.startswith("answer")}
        for metrics in (run_a.metrics, run_b.metrics)
    )
    metrics = metrics_delta(retrieval_a, retrieval_b)
    queries_a = {q["query_id"]: q for q in run_a.per_query}
    queries_b = {q["query_id"]: q for q in run_b.per_query}
    better, worse, unchanged = [], [], 0
    for query_id, qa in queries_a.items():
        qb = queries_b.get(query_id)
        if qb is None:
            continue
        a, b = qa["metrics"].get(metric, 0.0), qb["metrics"].get(metric, 0.0)
        if a == b:
            unchanged += 1
            continue
        row = {
            "query_id": query_id,
            "question": qa["question"],
            "a": a,
            "b": b,
            "delta": round(b - a, 4),
            "top_a": qa.get("top", [])[:3],
            "top_b": qb.get("top", [])[:3],
        }
        (better if b > a else worse).append(row)
    better.sort(key=lambda r: -r["delta"])
    worse.sort(key=lambda r: r["delta"])
    return {
        "metric": metric,
        "metrics": metrics,
        "answers": answer_metrics_compare(run_a.metrics, run_b.metrics),
        "config": config_diff(
            {**run_a.config, "pipeline": run_a.pipeline, "mode": run_a.mode},
            {**run_b.config, "pipeline": run_b.pipeline, "mode": run_b.mode},
        ),
        "better": better,
        "worse": worse,
        "unchanged": unchanged,
        "only_a": len(queries_a.keys() - queries_b.keys()),
        "only_b": len(queries_b.keys() - queries_a.keys()),
    }
