"""manage.py evaluate: measure retrieval quality on an evaluation dataset in a throw-away tenant."""

import json
from pathlib import Path

from django.core.management.base import CommandError

from core.commands import TenantCommand
from quality.importers import DATASETS, dataset_load
from quality.services import dataset_evaluate, dataset_evaluate_pipelines, judgment_list_evaluate, pipeline_names_check
from retrieval.config import MODES
from retrieval.pipeline import PIPELINE_NAMES


class Command(TenantCommand):
    help = (
        "Evaluate retrieval on a dataset: manage.py evaluate --dataset rag4p "
        "--path ../shared/datasets/rag4p-vasa [--mode hybrid] [--pipeline simple,expand,hyde] [--json] [--keep]; "
        "or a tenant's own judgment list in place: manage.py evaluate --tenant acme --list NAME [--pipeline simple]"
    )

    def add_arguments(self, parser):
        parser.add_argument("--dataset", choices=DATASETS)
        parser.add_argument("--tenant", help="with --list: evaluate this tenant's own judgment list in place")
        parser.add_argument("--list", dest="list_name", help="with --tenant: the judgment list's name")
        parser.add_argument(
            "--path",
            dest="paths",
            action="append",
            type=Path,
            help="the JSON file (bioasq, hotpotqa; repeat to combine files) or the folder (rag4p, beir)",
        )
        parser.add_argument("--mode", default="hybrid", choices=MODES)
        parser.add_argument(
            "--pipeline",
            help=(
                f"comma-separated pipelines to compare on one ingestion ({', '.join(PIPELINE_NAMES)}); "
                "prints one run per pipeline"
            ),
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        parser.add_argument("--keep", action="store_true", help="keep the evaluation tenant")
        parser.add_argument(
            "--answers",
            action="store_true",
            help="also answer every judged question and add the means of the answer-quality scores: "
            "citations, support, the gold-answer metrics where the judgments have gold answers (HotpotQA "
            "exact match and token F1, BioASQ yes/no, factoid and ROUGE-L), seconds and LLM usage "
            "(LLM grades only with an LLM configured)",
        )

    def handle(self, *args, **o):
        pipelines = pipeline_names_check(o["pipeline"].split(",")) if o["pipeline"] is not None else None
        if o["tenant"] is not None or o["list_name"] is not None:
            return self._evaluate_list(o, pipelines)
        if o["dataset"] is None or not o["paths"]:
            raise CommandError("Give --dataset and --path, or --tenant and --list.")
        missing = [str(p) for p in o["paths"] if not p.exists()]
        if missing:
            raise CommandError(f"No such file or folder: {', '.join(missing)}.")
        dataset = dataset_load(name=o["dataset"], paths=o["paths"])
        self.stderr.write(f"{dataset.name}: {len(dataset.documents)} documents, {len(dataset.judgments)} questions")
        if pipelines is not None:
            runs = dataset_evaluate_pipelines(
                dataset=dataset,
                pipelines=pipelines,
                mode=o["mode"],
                keep=o["keep"],
                progress=True,
                log=self.stderr.write,
                answers=o["answers"],
            )
            self._report_pipelines(runs, dataset_name=dataset.name, mode=o["mode"], as_json=o["json"])
            return
        run = dataset_evaluate(
            dataset=dataset,
            mode=o["mode"],
            keep=o["keep"],
            progress=True,
            log=self.stderr.write,
            answers=o["answers"],
        )
        if o["json"]:
            output = {
                "dataset": run.dataset,
                "mode": run.mode,
                "metrics": run.metrics,
                "run_id": run.pk,
                "config": run.config,
                "tenant": run.tenant.slug if run.tenant_id else None,
            }
            self.stdout.write(json.dumps(output))
            return
        metrics = "  ".join(f"{name} {value}" for name, value in run.metrics.items())
        self.stdout.write(f"Run {run.pk} ({run.dataset}, {run.mode}): {metrics}")
        if run.tenant_id:
            self.stdout.write(f"Kept tenant {run.tenant.slug}.")

    def _evaluate_list(self, o, pipelines: list[str] | None) -> None:
        """Run a tenant's judgment list in place through each pipeline (default: the tenant's)."""
        if o["dataset"] is not None or o["paths"]:
            raise CommandError("--dataset/--path and --tenant/--list exclude each other: give one pair.")
        if o["tenant"] is None or o["list_name"] is None:
            raise CommandError("--tenant and --list go together: the tenant's slug and its judgment list's name.")
        runs = judgment_list_evaluate(
            tenant=self.tenant(o["tenant"]),
            name=o["list_name"],
            pipelines=pipelines,
            mode=o["mode"],
            answers=o["answers"],
            log=self.stderr.write,
        )
        if o["json"]:
            self._report_pipelines(runs, dataset_name=o["list_name"], mode=o["mode"], as_json=True)
            return
        for run in runs:
            metrics = "  ".join(f"{name} {value}" for name, value in run.metrics.items())
            self.stdout.write(f"Run {run.pk} ({run.dataset}, {run.pipeline}, {run.mode}): {metrics}")

    def _report_pipelines(self, runs, *, dataset_name: str, mode: str, as_json: bool) -> None:
        tenant = next((run.tenant.slug for run in runs if run.tenant_id), None)
        if as_json:
            output = {
                "dataset": dataset_name,
                "tenant": tenant,
                "mode": mode,
                "runs": {
                    run.pipeline: {
                        "run_id": run.pk,
                        "pipeline": run.pipeline,
                        "metrics": run.metrics,
                        "config": run.config,
                    }
                    for run in runs
                },
            }
            self.stdout.write(json.dumps(output))
            return
        for run in runs:
            metrics = "  ".join(f"{name} {value}" for name, value in run.metrics.items())
            self.stdout.write(f"Run {run.pk} ({run.dataset}, {run.pipeline}, {run.mode}): {metrics}")
        if tenant:
            self.stdout.write(f"Kept tenant {tenant}.")
