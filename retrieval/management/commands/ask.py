import json

from core.commands import TenantCommand
from knowledge.versions import as_of_parse
from retrieval.pipeline import PIPELINE_NAMES, pipeline_answer
from retrieval.stages.rerank.near_duplicates import duplicate_lines


class Command(TenantCommand):
    help = (
        "Answer a question: the short answer, then the explanation with citations (sentences no passage "
        'supports are listed after it): manage.py ask --tenant SLUG [--pipeline NAME] [--json] "QUESTION"'
    )

    def add_arguments(self, parser):
        parser.add_argument("question")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--pipeline", choices=PIPELINE_NAMES, help="default: the tenant's, else KB_PIPELINE")
        parser.add_argument("-k", type=int, default=5, help="passages in the context")
        parser.add_argument("--strategy", choices=["top_n", "window"], help="default: the pipeline's (window)")
        parser.add_argument("--window", type=int, help="neighbours on each side (window strategy; default 1)")
        parser.add_argument("--no-reverse-pack", action="store_true")
        parser.add_argument("--extractive", action="store_true", help="do not call the LLM even if configured")
        parser.add_argument("--as-of", help="YYYY-MM-DD: answer from the versions current on that day")
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--no-collapse", action="store_true", help="keep every near-duplicate copy (default: the tenant's setting)"
        )
        parser.add_argument("--user", help="ask as this member of the tenant (personalized, on their trace)")
        parser.add_argument("--no-personalize", action="store_true", help="with --user: rank and prompt as for anyone")

    def handle(self, *args, **o):
        tenant = self.tenant(o["tenant"])
        run = pipeline_answer(
            tenant=tenant,
            user=self.member(tenant, o["user"]),
            question=o["question"],
            pipeline=o["pipeline"],
            k=o["k"],
            strategy=o["strategy"],
            window_size=o["window"],
            reverse_pack=not o["no_reverse_pack"],
            use_llm=not o["extractive"],
            as_of=as_of_parse(o["as_of"]),
            options={"collapse": False if o["no_collapse"] else None, "personalize": not o["no_personalize"]},
        )
        if o["json"]:
            payload = run.as_dict()
            for citation in payload["citations"]:
                citation.pop("text")
            self.stdout.write(json.dumps(payload, ensure_ascii=False))
            return
        answer = run.answer
        if answer.short_answer:
            self.stdout.write(f"Short answer: {answer.short_answer}\n")
        self.stdout.write(answer.text + "\n")
        for sentence in answer.unsupported:
            self.stdout.write(f"Not supported by the passages: {sentence}")
        if answer.unsupported:
            self.stdout.write("")
        for c in answer.citations:
            d = c.as_dict()
            self.stdout.write(
                f"[{d['n']}] {d['title']} (v{d['version']} of {d['version_date']}, chunk {d['chunk']}) {d['uri']}"
            )
            for line in duplicate_lines(d):
                self.stdout.write(f"    {line}")
        if run.degraded:
            self.stderr.write(f"Degraded: {run.degraded_reason}")
        steps = ", ".join(f"{s.stage} {s.ms:.0f} ms" for s in run.steps)
        self.stderr.write(f"Pipeline {run.pipeline} (trace {run.trace_id}): {steps}")
