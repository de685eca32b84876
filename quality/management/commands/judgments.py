"""manage.py judgments: generate a tenant's judgment list with an LLM (a Celery task)."""

from django.core.management.base import CommandError

from core.commands import TenantCommand
from quality.models import JudgmentGeneration
from quality.services.generation import MAX_SAMPLE, judgment_generation_start


class Command(TenantCommand):
    help = (
        "Generate a judgment list: manage.py judgments --tenant acme --generate --sample 50 "
        "[--source handbook] [--seed 0]. Needs an LLM (KB_LLM_MODEL); evaluate the list with "
        "manage.py evaluate --tenant acme --list NAME."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument(
            "--generate",
            action="store_true",
            help="queue a generation: one LLM-written question per sampled chunk",
        )
        parser.add_argument("--sample", type=int, help=f"chunks to sample (1..{MAX_SAMPLE}), stratified by source")
        parser.add_argument("--source", help="sample only this source's chunks")
        parser.add_argument(
            "--seed",
            type=int,
            default=0,
            help="fixes the sample; the same tenant, seed, sample and source give back the same list",
        )

    def handle(self, *args, **o):
        if not o["generate"]:
            raise CommandError("Nothing to do: give --generate --sample N.")
        if o["sample"] is None:
            raise CommandError("--generate needs --sample N (the number of questions).")
        tenant = self.tenant(o["tenant"])
        generation = judgment_generation_start(
            tenant=tenant, sample=o["sample"], seed=o["seed"], source_name=o["source"]
        )
        self.stdout.write(f"Generation {generation.pk}: {generation.get_status_display().lower()}")
        if generation.status in (JudgmentGeneration.Status.PENDING, JudgmentGeneration.Status.RUNNING):
            self.stdout.write(
                f"Progress {generation.progress_done}/{generation.progress_total}; a Celery worker runs it "
                "(see Quality › Judgment generations in the admin)."
            )
            return
        progress = f"{generation.progress_done}/{generation.progress_total} questions, {generation.rejected} rejected"
        if generation.status == JudgmentGeneration.Status.FAILED:
            raise CommandError(f"Generation {generation.pk} failed ({progress}): {generation.error}")
        judgment_list = generation.judgment_list
        self.stdout.write(f"{progress}; judgment list {judgment_list.name!r}" if judgment_list else progress)
        if generation.error:
            self.stdout.write(generation.error)
        if judgment_list:
            self.stdout.write(
                f"Evaluate it: manage.py evaluate --tenant {tenant.slug} --list {judgment_list.name} --pipeline simple"
            )
