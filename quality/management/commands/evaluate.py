"""manage.py evaluate: measure retrieval quality on an evaluation dataset in a throw-away tenant."""

import json
from pathlib import Path

from django.core.management.base import CommandError

from knowledge.management.base import KnowledgeCommand
from quality.importers import DATASETS, dataset_load
from quality.services import dataset_evaluate
from retrieval.search import MODES


class Command(KnowledgeCommand):
    help = (
        "Evaluate retrieval on a dataset: manage.py evaluate --dataset rag4p "
        "--path ../shared/datasets/rag4p-vasa [--mode hybrid] [--json] [--keep]"
    )

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True, choices=DATASETS)
        parser.add_argument(
            "--path",
            dest="paths",
            action="append",
            required=True,
            type=Path,
            help="the JSON file (bioasq, hotpotqa; repeat to combine files) or the folder (rag4p, beir)",
        )
        parser.add_argument("--mode", default="hybrid", choices=MODES)
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        parser.add_argument("--keep", action="store_true", help="keep the evaluation tenant")

    def handle(self, *args, **o):
        missing = [str(p) for p in o["paths"] if not p.exists()]
        if missing:
            raise CommandError(f"No such file or folder: {', '.join(missing)}.")
        dataset = dataset_load(name=o["dataset"], paths=o["paths"])
        self.stderr.write(f"{dataset.name}: {len(dataset.documents)} documents, {len(dataset.judgments)} questions")
        run = dataset_evaluate(dataset=dataset, mode=o["mode"], keep=o["keep"], progress=True, log=self.stderr.write)
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
