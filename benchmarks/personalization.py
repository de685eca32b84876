"""Personalization: hit@1 when the right document depends on who asks, the shared dev
figures for a user without a profile, and hybrid latency with the ``personal`` stage on and off.

Usage: python benchmarks/personalization.py [--datasets rag4p hotpotqa bioasq] [--rounds 3] [--grid]
                                            [--keep] [--dev-only]

1. Who-asks judgment set. Django 5.2's docs (downloaded once with pip, as ``manage.py demo``
   does) hold a how-to guide and a reference page for the same tasks. ``PAIRS`` are 12
   questions, each with its ``howto`` page and its ``ref`` page; a tenant ``bench-personal``
   gets those pages (and a few more of each kind) as two sources, ``howto`` and ``ref``. Three askers:
   ``howto-reader`` (profile prefers ``howto``), ``ref-reader`` (profile prefers ``ref``) and
   ``ref-history`` (no preference in the profile; earlier answers whose ``ref`` citations they
   opened and rated up, on *other* questions: ``HISTORY_QUESTIONS``). The right document for a
   question is the page of the asker's kind. hit@1 (document of the top chunk) is reported per
   asker with ``personalize`` off and on, hybrid search, k = 10. ``--grid`` also evaluates
   band x boost settings.
2. Shared dev figures (alone with ``--dev-only``): each dataset's judgments
   (``benchmarks/retrieval_quality.py`` tenants) run through ``pipeline_retrieve`` as nobody, as a
   member without a profile with personalize off and on (the rankings, chunk ids and scores, must
   be identical, so ndcg@10/recall@10/mrr@10/hit@1 are too), and for the record as a member with a
   profile and a history (thumbs-up on the top citation of the first ``HISTORY_N`` questions),
   off and on.
3. Latency: hybrid ``pipeline_retrieve`` p50/p95 for ``ref-reader`` with personalize off and
   on, interleaved, ``rounds`` passes over the 12 questions after a warm-up pass.

Prints one JSON object.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log, percentile, tenant_for

# (question, howto page, ref page): document ids are paths under docs/ without ".txt".
PAIRS = [
    ("How do I write a custom model field?", "howto/custom-model-fields", "ref/models/fields"),
    ("How do I write a custom management command?", "howto/custom-management-commands", "ref/django-admin"),
    ("How do I write a custom lookup?", "howto/custom-lookups", "ref/models/lookups"),
    ("How do I write a custom file storage class?", "howto/custom-file-storage", "ref/files/storage"),
    ("How do I serve static files?", "howto/static-files/index", "ref/contrib/staticfiles"),
    ("How do I write a data migration?", "howto/writing-migrations", "ref/migration-operations"),
    ("How do I provide initial data with fixtures?", "howto/initial-data", "ref/django-admin"),
    ("How do I authenticate with REMOTE_USER?", "howto/auth-remote-user", "ref/middleware"),
    ("How do I use CSRF protection with AJAX?", "howto/csrf", "ref/csrf"),
    ("How do I configure logging?", "howto/logging", "ref/logging"),
    ("How are errors reported by email?", "howto/error-reporting", "ref/logging"),
    ("How do I write a custom model field's from_db_value?", "howto/custom-model-fields", "ref/models/fields"),
]
# ``ref-history``'s earlier questions (not in PAIRS): the ref citations of their answers were opened.
HISTORY_QUESTIONS = [
    "What field options does every model field accept?",
    "Which middleware does Django ship?",
    "What does the django-admin check command do?",
    "Which settings configure the database connection?",
    "What attributes does HttpRequest have?",
    "What template filters are built in?",
]
REF_PAGES = sorted({ref for _q, _h, ref in PAIRS} | {"ref/class-based-views/base"})
# The how-to pages of PAIRS and a few others (the machine is shared: a smaller corpus ingests in minutes).
HOWTO_PAGES = sorted(
    {howto for _q, howto, _r in PAIRS}
    | {"howto/legacy-databases", "howto/outputting-pdf", "howto/upgrade-version", "howto/custom-template-backend"}
)
ASKERS = {"howto-reader": "howto", "ref-reader": "ref", "ref-history": "ref"}
GRID = [(band, boost) for band in (0.05, 0.15, 0.3) for boost in (0.05, 0.1, 0.2)]
OFF_TOPS: dict[tuple[str, str], str | None] = {}


def bench_tenant():
    """The ``bench-personal`` tenant: Django's howto folder and REF_PAGES as sources, and the askers."""
    from django.conf import settings

    from core.models import Tenant
    from core.services import membership_create, tenant_create
    from demo.services import DOCS_URL, django_docs_download
    from knowledge.services import paths_ingest, source_get_or_create

    docs = django_docs_download(downloads=settings.KB_DATA_DIR / "downloads", log=log)
    tenant = Tenant.objects.filter(slug="bench-personal").first() or tenant_create(slug="bench-personal")
    started = time.perf_counter()
    for name, pages in (("howto", HOWTO_PAGES), ("ref", REF_PAGES)):
        paths = [docs / f"{page}.txt" for page in pages]
        source = source_get_or_create(tenant=tenant, name=name)
        report = paths_ingest(
            tenant=tenant, source=source, paths=paths, root=docs, fmt="rst", uri_prefix=DOCS_URL, exclude=["*_images/*"]
        )
        log(f"{name}: {report.counts()}")
    log(f"ingested in {time.perf_counter() - started:.0f}s")
    users = {}
    for username in (*ASKERS, "no-profile"):
        users[username] = membership_create(tenant=tenant, username=username, password="bench-pass-123", role="member")
    return tenant, users


def askers_prepare(tenant, users) -> None:
    """Profiles of the readers; ``ref-history``'s earlier answers, ref citations opened and rated up."""
    from people.feedback import feedback_give
    from people.history import citation_open
    from people.models import CitationOpen, Feedback, Profile
    from people.services import profile_update
    from retrieval.models import Trace
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    for username in users:
        Profile.objects.filter(membership__user=users[username]).delete()
    Trace.objects.for_tenant(tenant).delete()  # cascades to feedback and citation opens
    profile_update(user=users["howto-reader"], preferred_sources=["howto"])
    profile_update(user=users["ref-reader"], preferred_sources=["ref"])
    history = users["ref-history"]
    for question in HISTORY_QUESTIONS:
        run = pipeline_answer(
            AnswerRequest(question=question, use_llm=False, k=5, strategy="top_n"),
            tenant=tenant,
            user=history,
            trace=True,
        )
        for citation in run.answer.citations:
            if citation.passage.document.source.name == "ref":
                citation_open(tenant=tenant, user=history, trace_id=run.trace_id, citation=citation.n)
                feedback_give(tenant=tenant, user=history, trace_id=run.trace_id, rating="up", citation=citation.n)
    log(
        f"ref-history: {CitationOpen.objects.for_tenant(tenant).count()} opened citations, "
        f"{Feedback.objects.for_tenant(tenant).count()} ratings"
    )


def who_asks(tenant, users, *, overrides: dict | None = None) -> dict:
    """hit@1 per asker, personalize off and on, and how many top results changed."""
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    figures: dict = {}
    for username, kind in ASKERS.items():
        hits = {"off": 0, "on": 0}
        changed = 0
        for question, howto, ref in PAIRS:
            wanted = howto if kind == "howto" else ref
            tops = {}
            for label, personalize in (("off", False), ("on", True)):
                key = (username, question)
                if label == "off" and key in OFF_TOPS:  # the unpersonalized ranking does not depend on settings
                    tops[label] = OFF_TOPS[key]
                    hits[label] += tops[label] == wanted
                    continue
                run = pipeline_retrieve(
                    AnswerRequest(question=question, k=10, use_llm=False, personalize=personalize),
                    tenant=tenant,
                    user=users[username],
                    overrides=overrides,
                )
                tops[label] = run.results[0].chunk.version.document.external_id if run.results else None
                if label == "off":
                    OFF_TOPS[key] = tops[label]
                hits[label] += tops[label] == wanted
            changed += tops["off"] != tops["on"]
        n = len(PAIRS)
        figures[username] = {
            "hit@1_off": round(hits["off"] / n, 3),
            "hit@1_on": round(hits["on"] / n, 3),
            "top_changed": changed,
        }
    on = [f["hit@1_on"] for f in figures.values()]
    off = [f["hit@1_off"] for f in figures.values()]
    figures["mean"] = {"hit@1_off": round(statistics.mean(off), 3), "hit@1_on": round(statistics.mean(on), 3)}
    return figures


def latency(tenant, user, *, rounds: int) -> dict:
    from knowledge.embedders import get_embedder
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    embedder = get_embedder(tenant.embedder)
    times: dict[str, list[float]] = {"off": [], "on": []}
    for number in range(rounds + 1):
        for question, _h, _r in PAIRS:
            for label, personalize in (("off", False), ("on", True)):
                if hasattr(embedder, "query_cache_clear"):
                    embedder.query_cache_clear()
                started = time.perf_counter()
                pipeline_retrieve(
                    AnswerRequest(question=question, k=10, use_llm=False, personalize=personalize),
                    tenant=tenant,
                    user=user,
                )
                if number:  # the first pass warms up
                    times[label].append((time.perf_counter() - started) * 1000)
    result = {
        label: {"p50_ms": round(percentile(v, 50), 2), "p95_ms": round(percentile(v, 95), 2), "n": len(v)}
        for label, v in times.items()
    }
    result["p50_ratio_on_vs_off"] = round(result["on"]["p50_ms"] / result["off"]["p50_ms"], 3)
    return result


# Who asks the shared dev sets: (label, user key, personalize). ``nobody`` is an anonymous run (the
# personal stage has no user); ``no-profile`` a member who never set a profile or gave feedback;
# ``with-profile`` a member with a profile (title, team, expertise, language, about; no source
# preference, see ``_dev_users``) and a history of thumbs-up on the top citation of the first
# ``HISTORY_N`` questions.
DEV_ASKERS = [
    ("nobody", None, True),
    ("no_profile_off", "no-profile", False),
    ("no_profile_on", "no-profile", True),
    ("with_profile_off", "with-profile", False),
    ("with_profile_on", "with-profile", True),
]
HISTORY_N = 10


def _dev_users(tenant, name: str, judgments) -> dict:
    """The dataset tenant's two members, made afresh: one without a profile, one with a profile and history."""
    from django.contrib.auth import get_user_model

    from core.services import membership_create
    from people.feedback import feedback_give
    from people.services import profile_update
    from retrieval.config import MAX_QUERY_CHARS
    from retrieval.models import Trace
    from retrieval.pipeline import pipeline_answer
    from retrieval.request import AnswerRequest

    users = {}
    Trace.objects.for_tenant(tenant).delete()  # earlier runs' history (cascades to feedback, opens)
    for key in ("no-profile", "with-profile"):
        username = f"bench-{name}-{key}"
        get_user_model().objects.filter(username=username).delete()
        users[key] = membership_create(tenant=tenant, username=username, password="bench-pass-123", role="member")
    # No preferred source: a dev set is one source, and preferring it would give every result the
    # same factor (1 + boost = the cap), so the history below could not move anything.
    profile_update(
        user=users["with-profile"],
        tenant=tenant,
        title="Research analyst",
        team="Evidence review",
        expertise="expert",
        language="en",
        about="I read the primary sources and want precise, cited answers.",
    )
    rated = 0
    for judgment in judgments[:HISTORY_N]:
        run = pipeline_answer(
            AnswerRequest(question=judgment.question[:MAX_QUERY_CHARS], use_llm=False, k=5, strategy="top_n"),
            tenant=tenant,
            user=users["with-profile"],
            trace=True,
        )
        if run.trace_id and run.answer.citations:
            feedback_give(tenant=tenant, user=users["with-profile"], trace_id=run.trace_id, rating="up", citation=1)
            rated += 1
    log(f"{name}: with-profile user rated up the top citation of {rated} answers")
    return users


def shared_dev(names: list[str], *, keep: bool, datasets_dir: Path) -> dict:
    """Each dataset's hybrid rankings (k = 100) for the askers of ``DEV_ASKERS``, judged exactly as
    ``quality.services.evaluation_run`` judges them: per asker the mean ndcg@10, recall@10, mrr@10
    and hit@1, and how many queries' rankings (chunk ids and scores) equal personalize-off's."""
    import retrieval_quality
    from django.test import override_settings

    from core.models import Tenant
    from quality.importers import dataset_load
    from quality.metrics import query_metrics
    from quality.models import Judgment
    from quality.services.runs import _duplicate_documents, _judged_ranking
    from retrieval.config import MAX_QUERY_CHARS
    from retrieval.pipeline import pipeline_retrieve
    from retrieval.request import AnswerRequest

    if not datasets_dir.is_dir():
        raise SystemExit(f"No datasets folder {datasets_dir}; pass --datasets-dir.")
    paths = {
        name: [datasets_dir / p.relative_to(retrieval_quality.DATASETS_DIR) for p in ps]
        for name, ps in retrieval_quality.DATASETS.items()
    }
    out: dict = {}
    for name in names:
        dataset = dataset_load(name=name, paths=paths[name])
        tenant, judgment_list, _ = tenant_for(dataset, name=name)
        try:
            judgments = list(Judgment.objects.filter(judgment_list=judgment_list).order_by("pk"))
            with override_settings(KB_TRACING=True):
                users = _dev_users(tenant, name, judgments)
            duplicates = _duplicate_documents(tenant)
            sums: dict[str, dict[str, float]] = {label: {} for label, _u, _p in DEV_ASKERS}
            same = {"no_profile_on_vs_off": 0, "no_profile_on_vs_nobody": 0, "with_profile_on_vs_off": 0}
            for judgment in judgments:
                rankings = {}
                for label, who, personalize in DEV_ASKERS:
                    run = pipeline_retrieve(
                        AnswerRequest(
                            question=judgment.question[:MAX_QUERY_CHARS], k=100, use_llm=False, personalize=personalize
                        ),
                        tenant=tenant,
                        user=users.get(who),
                    )
                    rankings[label] = [(r.chunk.pk, r.score) for r in run.results]
                    ranking, grades, _top = _judged_ranking(run.results, judgment.relevant, duplicates)
                    for metric, value in query_metrics(ranking, grades).items():
                        sums[label][metric] = sums[label].get(metric, 0.0) + value
                same["no_profile_on_vs_off"] += rankings["no_profile_on"] == rankings["no_profile_off"]
                same["no_profile_on_vs_nobody"] += rankings["no_profile_on"] == rankings["nobody"]
                same["with_profile_on_vs_off"] += rankings["with_profile_on"] == rankings["with_profile_off"]
            figures = {
                label: {m: round(v / len(judgments), 4) for m, v in totals.items() if m in KEPT}
                for label, totals in sums.items()
            }
            out[name] = {
                "queries": len(judgments),
                "identical_rankings": same,
                "no_profile_identical": figures["no_profile_on"] == figures["no_profile_off"] == figures["nobody"],
                "with_profile_history_questions": HISTORY_N,
                **figures,
            }
            log(f"{name}: {json.dumps(out[name])}")
        finally:
            if not keep:
                Tenant.objects.filter(pk=tenant.pk).delete()
    return out


KEPT = ("ndcg@10", "recall@10", "mrr@10", "hit@1")


def main() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    django_setup()
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="*", default=["rag4p", "hotpotqa"], help="shared dev sets to check")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grid", action="store_true", help="also evaluate band x boost settings")
    parser.add_argument("--keep", action="store_true", help="keep the dataset tenants for the next run")
    parser.add_argument(
        "--dev-only",
        action="store_true",
        help="only the shared dev sets (no who-asks set, no latency): the identity check",
    )
    parser.add_argument(
        "--datasets-dir",
        type=Path,
        default=ROOT.parent / "shared" / "datasets",
        help="the shared datasets (default ../shared/datasets; from a git worktree: /work/shared/datasets)",
    )
    args = parser.parse_args()

    from retrieval.pipeline import PipelineSpec

    if args.dev_only:
        result = {"shared_dev": shared_dev(args.datasets, keep=args.keep, datasets_dir=args.datasets_dir)}
        print(json.dumps(result, indent=2))
        return
    tenant, users = bench_tenant()
    askers_prepare(tenant, users)
    defaults = PipelineSpec()
    result: dict = {
        "who_asks": {
            "questions": len(PAIRS),
            "settings": {
                "band": defaults.setting("personal_band"),
                "boost": defaults.setting("personal_boost"),
                "useful_boost": defaults.setting("personal_useful_boost"),
                "cap": defaults.setting("personal_cap"),
            },
            "askers": who_asks(tenant, users),
        }
    }
    log(json.dumps(result["who_asks"]))
    if args.grid:
        result["grid"] = []
        for band, boost in GRID:
            overrides = {"personal_band": band, "personal_boost": boost, "personal_useful_boost": boost}
            figures = who_asks(tenant, users, overrides=overrides)
            result["grid"].append({"band": band, "boost": boost, "mean": figures["mean"]})
            log(json.dumps(result["grid"][-1]))
    result["latency_hybrid"] = latency(tenant, users["ref-reader"], rounds=args.rounds)
    log(json.dumps(result["latency_hybrid"]))
    result["shared_dev"] = shared_dev(args.datasets, keep=args.keep, datasets_dir=args.datasets_dir)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
