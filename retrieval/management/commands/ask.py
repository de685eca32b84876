import json

from core.commands import TenantCommand
from knowledge.access import user_for_name
from retrieval.pipeline import PIPELINE_NAMES, pipeline_answer


class Command(TenantCommand):
    help = 'Answer a question with citations: manage.py ask --tenant SLUG [--pipeline NAME] --json "QUESTION"'

    def add_arguments(self, parser):
        parser.add_argument("question")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--pipeline", choices=PIPELINE_NAMES, help="default: the tenant's, else KB_PIPELINE")
        parser.add_argument("-k", type=int, default=5, help="passages in the context")
        parser.add_argument("--strategy", choices=["top_n", "window"], help="default: the pipeline's (window)")
        parser.add_argument("--window", type=int, help="neighbours on each side (window strategy; default 1)")
        parser.add_argument("--no-reverse-pack", action="store_true")
        parser.add_argument("--extractive", action="store_true", help="do not call the LLM even if configured")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--user", help="ask as this user: their access rules apply (default: no rules)")

    def handle(self, *args, **o):
        run = pipeline_answer(
            tenant=self.tenant(o["tenant"]),
            user=user_for_name(o["user"]) if o["user"] else None,
            question=o["question"],
            pipeline=o["pipeline"],
            k=o["k"],
            strategy=o["strategy"],
            window_size=o["window"],
            reverse_pack=not o["no_reverse_pack"],
            use_llm=not o["extractive"],
        )
        if o["json"]:
            payload = run.as_dict()
            for citation in payload["citations"]:
                citation.pop("text")
            self.stdout.write(json.dumps(payload, ensure_ascii=False))
            return
        self.stdout.write(run.answer.text + "\n")
        for c in run.answer.citations:
            d = c.as_dict()
            self.stdout.write(f"[{d['n']}] {d['title']} (v{d['version']}, chunk {d['chunk']}) {d['uri']}")
        if run.degraded:
            self.stderr.write(f"Degraded: {run.degraded_reason}")
        steps = ", ".join(f"{s.stage} {s.ms:.0f} ms" for s in run.steps)
        self.stderr.write(f"Pipeline {run.pipeline} (trace {run.trace_id}): {steps}")
