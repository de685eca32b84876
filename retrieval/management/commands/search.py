import json

from core.commands import TenantCommand
from knowledge.access import user_for_name
from knowledge.selectors import source_ids_for_names
from retrieval.search import MODES, chunk_search


class Command(TenantCommand):
    help = 'Search a tenant\'s chunks: manage.py search --tenant SLUG -k 10 --json "QUERY"'

    def add_arguments(self, parser):
        parser.add_argument("query")
        parser.add_argument("--tenant", required=True)
        parser.add_argument("-k", type=int, default=10)
        parser.add_argument("--mode", choices=MODES, default="hybrid")
        parser.add_argument("--source", action="append", default=[], help="only these sources (repeatable)")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--user", help="search as this user: their access rules apply (default: no rules)")

    def handle(self, *args, **o):
        tenant = self.tenant(o["tenant"])
        user = user_for_name(o["user"]) if o["user"] else None
        source_ids = source_ids_for_names(tenant=tenant, names=o["source"], user=user)
        response = chunk_search(
            tenant=tenant, query=o["query"], k=o["k"], mode=o["mode"], source_ids=source_ids, user=user
        )
        if o["json"]:
            payload = {"results": [r.as_dict() for r in response.results], "timings_ms": response.timings_ms}
            self.stdout.write(json.dumps(payload, ensure_ascii=False))
            return
        for r in response.results:
            self.stdout.write(
                f"{r.rank:>3}. {r.score:.4f}  {r.chunk.version.document.external_id} #{r.chunk.ordinal}  {r.chunk.heading}"
            )
        self.stdout.write(f"({response.timings_ms['total_ms']:.0f} ms)")
