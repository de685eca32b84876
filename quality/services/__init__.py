"""Writes of the quality app: judgment lists, evaluation runs, comparisons and the quality gate.

``judgments`` imports judgment lists; ``runs`` measures retrieval pipelines on them (one list, or
a whole dataset in a throw-away tenant); ``compare`` diffs two runs; ``gate`` measures a change of
a tenant's retrieval settings before applying it.
"""

from quality.services.answers import evaluation_answers
from quality.services.compare import config_diff, evaluation_compare, metrics_delta
from quality.services.gate import (
    ChangeInProgress,
    config_admin_check,
    config_change_evaluate,
    config_change_override,
    config_change_propose,
)
from quality.services.judgments import judgment_list_import
from quality.services.runs import (
    TOP_STORED,
    dataset_evaluate,
    dataset_evaluate_pipelines,
    evaluation_run,
    judgment_list_evaluate,
    pipeline_names_check,
)

__all__ = [
    "TOP_STORED",
    "ChangeInProgress",
    "config_admin_check",
    "config_change_evaluate",
    "config_change_override",
    "config_change_propose",
    "config_diff",
    "dataset_evaluate",
    "dataset_evaluate_pipelines",
    "evaluation_answers",
    "evaluation_compare",
    "evaluation_run",
    "judgment_list_import",
    "metrics_delta",
    "judgment_list_evaluate",
    "pipeline_names_check",
]
