import json

from knowledge.management.base import KnowledgeCommand
from retrieval.answers import question_answer


class Command(KnowledgeCommand):
    help = 'Answer a question with citations: manage.py ask --tenant SLUG --json "QUESTION"'

    def add_arguments(self, parser):
        parser.add_argument("question")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("-k", type=int, default=5, help="passages in the context")
        parser.add_argument("--strategy", choices=["top_n", "window"], default="window")
        parser.add_argument("--window", type=int, default=1, help="neighbours on each side (window strategy)")
        parser.add_argument("--no-reverse-pack", action="store_true")
        parser.add_argument("--extractive", action="store_true", help="do not call the LLM even if configured")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **o):
        answer = question_answer(
            tenant=self.tenant(o["tenant"]),
            question=o["question"],
            k=o["k"],
            strategy=o["strategy"],
            window_size=o["window"],
            reverse_pack=not o["no_reverse_pack"],
            use_llm=not o["extractive"],
        )
        if o["json"]:
            payload = answer.as_dict()
            for citation in payload["citations"]:
                citation.pop("text")
            self.stdout.write(json.dumps(payload, ensure_ascii=False))
            return
        self.stdout.write(answer.text + "\n")
        for c in answer.citations:
            d = c.as_dict()
            self.stdout.write(f"[{d['n']}] {d['title']} (v{d['version']}, chunk {d['chunk']}) {d['uri']}")
