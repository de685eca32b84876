import json

from django.core.management.base import CommandError

from core.commands import TenantCommand
from knowledge.pages import page_label
from knowledge.versions import as_of_parse
from people.answer_text import answer_head_lines
from people.asking import ask
from retrieval.pipeline import PIPELINE_NAMES
from retrieval.request import AnswerRequest
from retrieval.stages.rerank.near_duplicates import duplicate_lines


class Command(TenantCommand):
    help = (
        "Answer a question: the short answer (else the passage that leads it), then the explanation with "
        "citations (sentences no passage supports are listed after it); with --user, the answer is kept in "
        "that member's conversations: "
        'manage.py ask --tenant SLUG [--pipeline NAME] [--user NAME [--conversation ID]] [--json] "QUESTION"'
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
        parser.add_argument(
            "--user",
            help="ask as this member of the tenant (personalized, on their trace, kept in their conversations)",
        )
        parser.add_argument("--conversation", type=int, help="with --user: continue this conversation of theirs")
        parser.add_argument("--no-personalize", action="store_true", help="with --user: rank and prompt as for anyone")

    def handle(self, *args, **o):
        if o["conversation"] is not None and not o["user"]:
            raise CommandError("--conversation needs --user: a conversation is a member's.")
        tenant = self.tenant(o["tenant"])
        question = AnswerRequest(
            question=o["question"],
            conversation_id=o["conversation"],
            pipeline=o["pipeline"],
            k=o["k"],
            strategy=o["strategy"],
            window_size=o["window"],
            reverse_pack=not o["no_reverse_pack"],
            use_llm=not o["extractive"],
            as_of=as_of_parse(o["as_of"]),
            collapse=False if o["no_collapse"] else None,
            personalize=not o["no_personalize"],
        )
        run = ask(question, tenant=tenant, user=self.member(tenant, o["user"]))
        if o["json"]:
            payload = run.as_dict()
            for citation in payload["citations"]:
                citation.pop("text")
            self.stdout.write(json.dumps(payload, ensure_ascii=False))
            return
        answer = run.answer
        head = answer_head_lines(answer)  # the short answer, else the lead passage, as the portal shows them
        if head:
            self.stdout.write("\n".join(head) + "\n")
        self.stdout.write(answer.text + "\n")
        for sentence in answer.unsupported:
            self.stdout.write(f"Not supported by the passages: {sentence}")
        if answer.unsupported:
            self.stdout.write("")
        for c in answer.citations:
            d = c.as_dict()
            pages = f", {page_label(d['page'], d['page_end'])}" if d["page"] else ""
            self.stdout.write(
                f"[{d['n']}] {d['title']} (v{d['version']} of {d['version_date']}, chunk {d['chunk']}{pages}) {d['uri']}"
            )
            for line in duplicate_lines(d):
                self.stdout.write(f"    {line}")
        if run.degraded:
            self.stderr.write(f"Degraded: {run.degraded_reason}")
        steps = ", ".join(f"{s.stage} {s.ms:.0f} ms" for s in run.steps)
        self.stderr.write(f"Pipeline {run.pipeline} (trace {run.trace_id}): {steps}")
        if run.conversation_id:
            self.stderr.write(f"Conversation {run.conversation_id}, turn {run.turn}")
