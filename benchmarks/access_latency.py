"""Search latency with access rules on versus off: hybrid (and BM25, dense) p50/p95 in ms.

Usage: python benchmarks/access_latency.py [--tenant demo] [--restricted 0.2] [--rounds 3]
       python benchmarks/access_latency.py --chunks 10000   # a synthetic tenant when there is no demo

On the tenant, inside one transaction that is rolled back at the end (the tenant is left as it
was): a fraction ``--restricted`` of its documents (every n-th) get a rule granting them to a
group, and two members are added: ``outside`` (in no group: the restricted documents are hidden
from them, so both retrievers carry the access condition; they also have a profile that prefers
one source and mutes another, so the personalization stage runs for them, unless
``--no-profile``) and ``inside`` (in the group: the condition runs and hides nothing). The 20 questions of ``search_latency.py`` are searched
``--rounds`` times with no user (no rules at all: today's path), as ``outside`` and as ``inside``,
taking turns on each question (in a rotating order) so background load weighs on all alike; the query embedding is
cached after the warm-up so the comparison is the SQL's (``--uncached`` clears it before each
search instead, so the figures include the embedding, as a request's do). Prints one JSON object with p50/p95 per
mode and user, and ``hybrid_p50_ratio`` (``outside`` over no user; the target is <= 1.15).
It also checks that ``outside`` never got a restricted chunk.
"""

import argparse
import json
import statistics
import time

from _setup import django_setup
from _toolkit import percentile
from search_latency import QUESTIONS


class Rollback(Exception):
    pass


def main() -> None:
    django_setup()
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from core.models import Membership, Tenant
    from knowledge.access import access_group_save
    from knowledge.embedders import get_embedder
    from knowledge.models import AccessRule, Chunk, Document
    from retrieval.request import AnswerRequest
    from retrieval.search import chunk_search

    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--chunks", type=int, default=0, help="build a synthetic tenant acl-bench of this size")
    parser.add_argument("--base-sentences", type=int, default=3000)
    parser.add_argument("--restricted", type=float, default=0.2, help="share of documents restricted to a group")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument(
        "--uncached",
        action="store_true",
        help="clear the query-embedding cache before each search (timings then include embedding, as in a request)",
    )
    parser.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="leave `outside` without a profile (by default they have one, so personalization runs too)",
    )
    args = parser.parse_args()
    if args.chunks:
        from _corpus import base_sentences, base_vectors, tenant_of_size

        sentences = base_sentences(args.base_sentences)
        tenant, _ = tenant_of_size(
            "acl-bench", args.chunks, sentences=sentences, vectors=base_vectors(sentences), seed=1, index=None
        )
    else:
        tenant = Tenant.objects.filter(slug=args.tenant).first()
        if tenant is None:
            raise SystemExit(f"No tenant {args.tenant!r}: run the demo first, or give --chunks.")
    output: dict = {"tenant": tenant.slug, "chunks": Chunk.objects.for_tenant(tenant).count(), "k": args.k}
    try:
        with transaction.atomic():
            documents = list(Document.objects.for_tenant(tenant).order_by("pk").values_list("pk", flat=True))
            step = max(1, round(1 / args.restricted)) if args.restricted > 0 else 0
            restricted = documents[::step] if step else []
            users = {}
            for name in ("outside", "inside"):
                users[name] = get_user_model().objects.create_user(username=f"acl-bench-{name}")
                Membership.objects.create(user=users[name], tenant=tenant, role=Membership.Role.MEMBER)
            group = access_group_save(tenant=tenant, name="acl-bench", members=[users["inside"]])
            if args.profile:
                # The realistic case: access rules and personalization on, for a user with a profile.
                from knowledge.models import Source
                from people.services import profile_update

                sources = list(Source.objects.for_tenant(tenant).order_by("pk").values_list("name", flat=True))
                preferred, muted = sources[:1], (sources[-1:] if len(sources) > 1 else [])
                profile_update(
                    user=users["outside"],
                    tenant=tenant,
                    title="Backend developer",
                    team="platform",
                    expertise="intermediate",
                    about="I build and run our Django services.",
                    preferred_sources=preferred,
                    muted_sources=muted,
                )
                output["outside_profile"] = {"preferred": preferred, "muted": muted}
            AccessRule.objects.bulk_create(AccessRule(tenant=tenant, document_id=pk, group=group) for pk in restricted)
            output["documents"], output["restricted_documents"] = len(documents), len(restricted)
            hidden = set(restricted)
            who = {"no_user": None, **users}
            for question in QUESTIONS:  # warm-up: model load, query embedding cache, plans
                for user in who.values():
                    chunk_search(AnswerRequest(question=question, k=args.k), tenant=tenant, user=user)
            times: dict = {(name, mode): [] for name in who for mode in ("hybrid", "lexical", "dense")}
            leaks = 0
            names = list(who)
            embedder = get_embedder(tenant.embedder)
            for _ in range(args.rounds):
                for turn, question in enumerate(QUESTIONS):
                    for mode in ("hybrid", "lexical", "dense"):
                        order = names[turn % 3 :] + names[: turn % 3]  # each user goes first, second, third in turn
                        for name in order:
                            user = who[name]
                            if args.uncached and hasattr(embedder, "query_cache_clear"):
                                embedder.query_cache_clear()
                            started = time.perf_counter()
                            response = chunk_search(
                                AnswerRequest(question=question, k=args.k, mode=mode), tenant=tenant, user=user
                            )
                            times[(name, mode)].append((time.perf_counter() - started) * 1000)
                            if name == "outside":
                                leaks += sum(r.chunk.version.document_id in hidden for r in response.results)
            output["modes"] = {
                mode: {
                    name: {
                        "p50_ms": round(percentile(times[(name, mode)], 50), 2),
                        "p95_ms": round(percentile(times[(name, mode)], 95), 2),
                        "mean_ms": round(statistics.mean(times[(name, mode)]), 2),
                    }
                    for name in who
                }
                for mode in ("hybrid", "lexical", "dense")
            }
            hybrid = output["modes"]["hybrid"]
            output["hybrid_p50_ratio"] = round(hybrid["outside"]["p50_ms"] / hybrid["no_user"]["p50_ms"], 3)
            output["hybrid_p50_ratio_inside"] = round(hybrid["inside"]["p50_ms"] / hybrid["no_user"]["p50_ms"], 3)
            output["restricted_chunks_returned_to_outside"] = leaks
            output["queries_per_mode_and_user"] = len(QUESTIONS) * args.rounds
            raise Rollback
    except Rollback:
        pass
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
