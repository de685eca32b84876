import json

from core.commands import TenantCommand
from knowledge.pages import chunk_pages, page_label
from knowledge.versions import as_of_parse
from retrieval.request import AnswerRequest
from retrieval.search import MODES, chunk_search
from retrieval.stages.rerank.near_duplicates import duplicate_lines


class Command(TenantCommand):
    help = 'Search a tenant\'s chunks: manage.py search --tenant SLUG -k 10 --json "QUERY"'

    def add_arguments(self, parser):
        parser.add_argument("query")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("-k", type=int, default=10)
        parser.add_argument("--mode", choices=MODES, default="hybrid")
        parser.add_argument("--source", action="append", default=[], help="only these sources (repeatable)")
        parser.add_argument("--as-of", help="YYYY-MM-DD: search the versions current on that day")
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--no-collapse", action="store_true", help="keep every near-duplicate copy (default: the tenant's setting)"
        )
        parser.add_argument(
            "--user", help="search as this member of the tenant: their access rules and personalization apply"
        )
        parser.add_argument("--no-personalize", action="store_true", help="with --user: rank as for anyone")

    def handle(self, *args, **o):
        tenant = self.tenant(o["tenant"])
        user = self.member(tenant, o["user"])
        search = AnswerRequest.for_sources(
            tenant=tenant,
            user=user,
            sources=o["source"],
            question=o["query"],
            k=o["k"],
            mode=o["mode"],
            as_of=as_of_parse(o["as_of"]),
            collapse=False if o["no_collapse"] else None,
            personalize=not o["no_personalize"],
        )
        response = chunk_search(search, tenant=tenant, user=user)
        if o["json"]:
            payload = {"results": [r.as_dict() for r in response.results], "timings_ms": response.timings_ms}
            self.stdout.write(json.dumps(payload, ensure_ascii=False))
            return
        for r in response.results:
            pages = page_label(**chunk_pages(r.chunk))
            self.stdout.write(
                f"{r.rank:>3}. {r.score:.4f}  {r.chunk.version.document.external_id} v{r.chunk.version.number} #{r.chunk.ordinal}"
                f"{'  ' + pages if pages else ''}  {r.chunk.heading}"
            )
            for line in duplicate_lines(r.as_dict(with_text=False)):
                self.stdout.write(f"       {line}")
        self.stdout.write(f"({response.timings_ms['total_ms']:.0f} ms)")
