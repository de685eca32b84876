"""What a reader of the demo sees first without an LLM: the headline (short answer) or the lead passage.

Usage: python benchmarks/demo_headlines.py [--tenant demo] [--name demo_headlines] [--markup DOCS]

30 questions a team asks of the Django 5.2 docs (how-to, what-is, which-setting, version facts),
each with the documents that answer it (external ids of the demo tenant; one ending in "/" is a
folder, e.g. "releases/"). Each is asked as every caller asks (``people.asking.ask``, as the
operator, no LLM) on the demo tenant (``python manage.py demo --no-serve`` first). What is shown
first is the headline when ``short_answer`` is not empty, else the ``lead`` passage (when the
answer has one). Its document is the passage the headline was cut from (the cited passage whose
text holds it) or the lead's. Figures:

* ``right_document``: share of questions whose first-shown text comes from an expected document;
* ``headline_without_key_term``: share of questions whose headline shares none of the question's
  key terms (``spans.key_terms``; for a short span, the sentence it was cut from): target 0;
  ``headline_text_without_key_term`` the same for the headline's own words (a span such as
  "If" or "STATIC_ROOT" holds none);
* ``headlines`` / ``leads``: how many questions got each; ``by_kind``: the same per kind;
* ``right_document_by_threshold``: ``right_document`` had fact headlines been shown from each
  confidence (1.01: never), the others leading with their lead passage (``headline_choose`` and
  ``lead_passage`` recomputed on the run's passages);
* ``rows``: per question, what was shown and from which document.

With ``--markup DOCS`` it only reads every .txt file of Django's ``docs/`` folder as the demo
does and counts the texts that keep reST markup (roles, double back-quotes, directives, link
targets), with the reading time.

Prints one JSON object, also written to benchmarks/results/<name>.json.
"""

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

from _setup import ROOT, django_setup
from _toolkit import log

# (kind, question, documents that answer it)
QUESTIONS = [
    ("how-to", "How do I add a custom management command?", ["howto/custom-management-commands"]),
    ("how-to", "How do I write a custom model field?", ["howto/custom-model-fields"]),
    ("how-to", "How do I write a custom template filter?", ["howto/custom-template-tags"]),
    ("how-to", "How do I serve static files in production?", ["howto/static-files/deployment"]),
    ("how-to", "How can I deploy Django with Gunicorn?", ["howto/deployment/wsgi/gunicorn"]),
    ("how-to", "How do I write a data migration?", ["howto/writing-migrations", "topics/migrations"]),
    ("how-to", "How do I send email?", ["topics/email"]),
    ("how-to", "How do I handle file uploads in a view?", ["topics/http/file-uploads"]),
    ("how-to", "How do I write a custom lookup?", ["howto/custom-lookups"]),
    ("how-to", "How do I paginate a list of objects?", ["topics/pagination"]),
    ("what-is", "What is a QuerySet?", ["ref/models/querysets", "topics/db/queries"]),
    ("what-is", "What is middleware?", ["topics/http/middleware", "ref/middleware"]),
    ("what-is", "What is a model manager?", ["topics/db/managers"]),
    ("what-is", "What is the contenttypes framework?", ["ref/contrib/contenttypes"]),
    ("what-is", "What are signals?", ["topics/signals", "ref/signals"]),
    ("what-is", "What is a context processor?", ["ref/templates/api"]),
    ("what-is", "What does select_related do?", ["ref/models/querysets"]),
    ("which-setting", "Which setting lists the host names the site can serve?", ["ref/settings"]),
    ("which-setting", "Which setting sets the time zone?", ["ref/settings", "topics/i18n/timezones"]),
    ("which-setting", "What is the default value of the DEBUG setting?", ["ref/settings"]),
    (
        "which-setting",
        "Which setting is the directory where collectstatic collects static files?",
        ["ref/settings", "ref/contrib/staticfiles", "howto/static-files/"],
    ),
    ("which-setting", "Which setting sets the age of session cookies?", ["ref/settings", "topics/http/sessions"]),
    ("which-setting", "Which setting chooses the email backend?", ["ref/settings", "topics/email"]),
    (
        "which-setting",
        "Which setting sets the default primary key field type?",
        ["ref/settings", "topics/db/models", "ref/applications"],
    ),
    ("version", "Which Python versions does Django 5.2 support?", ["releases/5.2", "faq/install"]),
    ("version", "When was Django 5.2 released?", ["releases/5.2"]),
    ("version", "What changed about QuerySet.bulk_update?", ["releases/", "ref/models/querysets"]),
    (
        "version",
        "In which Django version were composite primary keys added?",
        ["releases/5.2", "topics/composite-primary-key"],
    ),
    ("version", "Which Django version added asynchronous views?", ["releases/3.1", "topics/async"]),
    ("version", "Which PostgreSQL versions does Django 5.2 support?", ["releases/5.2", "ref/databases"]),
]


def expected(document: str, answers: list[str]) -> bool:
    return any(document.startswith(a) if a.endswith("/") else document == a for a in answers)


def flat(text: str) -> str:
    return " ".join(text.split())


def headline_source(answer, headline: str) -> tuple[str, str]:
    """(external id, sentence) of the cited passage the headline was cut from; ("", headline) if none."""
    needle = flat(headline).rstrip("…").strip()
    sentences = [flat(s["text"]) for s in answer.sentences]
    sentence = next((s for s in sentences if needle and needle in s), headline)
    for citation in answer.citations:
        if needle and needle in flat(citation.passage.text):
            text = flat(citation.passage.text)
            if sentence == headline:  # a span: the cited passage's sentence that holds it
                from knowledge.ingestion.splitters import sentences_split

                sentence = next((flat(s) for s in sentences_split(citation.passage.text) if needle in flat(s)), text)
            return citation.passage.document.external_id, sentence
    return "", sentence


# reST markup a reader should not leave in the text: roles, ``literals``, directives, link targets.
MARKUP = {
    "role": re.compile(r":[a-z]+(?::[a-z]+)?:`"),
    "literal": re.compile(r"``"),
    "directive": re.compile(r"^\s*\.\. [\w-]+::", re.MULTILINE),
    "link": re.compile(r"`_|<https?://[^>]*>`"),
}


def markup_left(docs: Path) -> dict:
    """Every reST file of Django's ``docs`` read as the demo reads it; how many texts keep markup."""
    from knowledge.ingestion.readers import read_path

    files = sorted(p for p in docs.rglob("*.txt") if "_images" not in p.parts)
    started = time.perf_counter()
    counts = dict.fromkeys(MARKUP, 0)
    documents = with_markup = 0
    examples = []
    for path in files:
        for document in read_path(path, root=docs, fmt="rst"):
            documents += 1
            found = [name for name, pattern in MARKUP.items() if pattern.search(document.text)]
            for name in found:
                counts[name] += 1
            if found:
                with_markup += 1
                if len(examples) < 5:
                    match = next(MARKUP[name].search(document.text) for name in found)
                    examples.append(
                        f"{document.external_id}: …{document.text[max(0, match.start() - 60) : match.end() + 40]}…"
                    )
    return {
        "documents": documents,
        "documents_with_markup": with_markup,
        "by_markup": counts,
        "read_seconds": round(time.perf_counter() - started, 1),
        "examples": examples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenant", default="demo")
    parser.add_argument("--name", default="demo_headlines")
    parser.add_argument("--markup", type=Path, help="only count the reST markup left by the reader in this docs folder")
    args = parser.parse_args()
    django_setup()
    if args.markup:
        result = {"benchmark": "demo_headlines --markup", "cores": os.cpu_count(), **markup_left(args.markup)}
        (ROOT / "benchmarks" / "results" / f"{args.name}.json").write_text(json.dumps(result, indent=2))
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    from core.models import Tenant
    from people.asking import ask
    from retrieval.request import AnswerRequest
    from retrieval.stages.generate import extractive, spans
    from retrieval.stages.generate.extractive import sentences_rank

    key_terms = getattr(spans, "key_terms", spans.terms)
    choose = getattr(extractive, "headline_choose", None)  # absent before headlines were weighed
    tenant = Tenant.objects.get(slug=args.tenant)
    rows = []
    for kind, question, answers in QUESTIONS:
        started = time.perf_counter()
        run = ask(AnswerRequest(question=question), tenant=tenant, user=None)
        answer = run.answer
        seconds = time.perf_counter() - started
        headline = answer.short_answer
        lead = getattr(answer, "lead", None)
        row = {"kind": kind, "question": question, "expected": answers, "seconds": round(seconds, 2)}
        if headline:
            document, sentence = headline_source(answer, headline)
            row.update(
                shown="headline",
                text=headline,
                document=document,
                key_terms_shared=sorted(set(key_terms(question)) & set(spans.terms(sentence))),
                key_terms_in_headline=sorted(set(key_terms(question)) & set(spans.terms(headline))),
            )
        elif lead:
            row.update(shown="lead", text=lead["text"][:300], document=lead["document"], section=lead["section"])
        else:
            row.update(shown="nothing", text="", document="")
        row["right_document"] = expected(row["document"], answers)
        if choose and run.passages:  # the headline the answerer weighed, shown or not
            ranked = sentences_rank(question, run.passages)
            weighed = choose(question, run.passages, ranked)
            row["lead_document"] = extractive.lead_passage(question, run.passages, ranked)["document"]
            row["lead_right_document"] = expected(row["lead_document"], answers)
            row["candidate"] = {
                "text": weighed.text[:120],
                "kind": weighed.kind,
                "confidence": weighed.confidence,
                "document": run.passages[weighed.n - 1].document.external_id,
            }
            row["candidate"]["right_document"] = expected(row["candidate"]["document"], answers)
        row["sources"] = [c.passage.document.external_id for c in answer.citations]
        log(
            f"{kind:14} {row['shown']:8} {'ok ' if row['right_document'] else 'BAD'} {question} -> {row['text'][:90]!r}"
        )
        rows.append(row)

    def figures(chosen: list[dict]) -> dict:
        count = len(chosen) or 1
        headlines = [r for r in chosen if r["shown"] == "headline"]
        return {
            "questions": len(chosen),
            "right_document": round(sum(r["right_document"] for r in chosen) / count, 3),
            "headline_without_key_term": round(sum(not r["key_terms_shared"] for r in headlines) / count, 3),
            "headline_text_without_key_term": round(sum(not r["key_terms_in_headline"] for r in headlines) / count, 3),
            "headlines": len(headlines),
            "headlines_right_document": sum(r["right_document"] for r in headlines),
            "leads": sum(r["shown"] == "lead" for r in chosen),
        }

    if choose:  # right_document at each threshold, from the weighed headlines and the leads
        for row in rows:
            row.setdefault("candidate", {"kind": "", "confidence": 0.0, "right_document": False})
        sweep = {
            f"{t:.2f}": round(
                sum(
                    r["candidate"]["right_document"]
                    if r["candidate"]["kind"] == "fact" and r["candidate"]["confidence"] >= t
                    else r.get("lead_right_document", False)
                    for r in rows
                )
                / len(rows),
                3,
            )
            for t in (0.0, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 1.01)
        }
    result = {
        "benchmark": "demo_headlines",
        "tenant": args.tenant,
        "cores": os.cpu_count(),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        **figures(rows),
        "by_kind": {
            kind: figures([r for r in rows if r["kind"] == kind]) for kind in dict.fromkeys(k for k, _, _ in QUESTIONS)
        },
        **({"right_document_by_threshold": sweep} if choose else {}),
        "rows": rows,
    }
    out = ROOT / "benchmarks" / "results" / f"{args.name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    json.dump({k: v for k, v in result.items() if k != "rows"}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
