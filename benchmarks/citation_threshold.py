"""The citation safety net's threshold: how similar a claim is to the passage sentence that says it.

Usage: python benchmarks/citation_threshold.py [--threshold 0.5]
Prints JSON: per claim its best cosine to a passage sentence, the document of that sentence
(``from``) and the document that makes the claim (``says_it``; none for unrelated claims),
then per kind (``paraphrase``: the passages say it in other words; ``unrelated``: another
subject; ``near``: the passages' subject, but a claim they do not make) the min and max, how
many claims of each kind the threshold accepts (``accepted``: the net would attach a citation)
and how many keep a citation the model made (``kept_if_cited``: at or above
``CITED_THRESHOLD``).

The passages are the test corpus's three documents (``tests/conftest.py``: pasta, bicycle tyre,
expense reports); the embedder is the tenant default (all-MiniLM-L6-v2), as the net uses it
(``retrieval.stages.generate.citations``). Measured 2026-11: paraphrases 0.48-0.93 (11 of 12
at or above 0.5, all 12 above 0.35; the miss is the pronoun-only "Your manager must approve
it."), unrelated 0.07-0.27 (none above 0.35), near 0.53-0.59: an embedding measures topic, not entailment, so a wrong claim on
the passages' subject passes the net (the LLM judge, ``retrieval.stages.score.judge``, is the
check for that).
"""

import argparse
import json

from _setup import django_setup

DOCUMENTS = {
    "pasta": "Bring a large pot of salted water to a rolling boil. Add the spaghetti and stir so it does not stick. "
    "Cook for nine to eleven minutes until al dente. Drain the pasta, keep a cup of the cooking water, and "
    "toss with the sauce.",
    "bike": "Remove the wheel and lever the tyre off the rim. Find the puncture in the inner tube by pumping it up "
    "and listening for escaping air. Patch the hole with glue and a rubber patch, then refit the tube and "
    "inflate to the printed pressure.",
    "expenses": "Submit travel expense reports within thirty days of the trip. Attach every receipt as a PDF. "
    "Your manager approves reports above five hundred euros.",
}
CLAIMS = [
    ("paraphrase", "pasta", "Spaghetti needs about nine to eleven minutes of cooking."),
    ("paraphrase", "pasta", "Boil plenty of salted water first."),
    ("paraphrase", "pasta", "Keep some pasta water when you drain it."),
    ("paraphrase", "pasta", "Stir the spaghetti so it doesn't stick together."),
    ("paraphrase", "pasta", "Cook it until al dente."),
    ("paraphrase", "bike", "Take the wheel off and pry the tyre from the rim."),
    ("paraphrase", "bike", "You can locate the hole by inflating the tube and listening for air."),
    ("paraphrase", "bike", "Use glue and a patch to fix the hole."),
    ("paraphrase", "expenses", "Expense reports are due within 30 days of travel."),
    ("paraphrase", "expenses", "Receipts must be attached as PDF files."),
    ("paraphrase", "expenses", "Reports over 500 euros need your manager's approval."),
    ("paraphrase", "expenses", "Your manager must approve it."),
    ("unrelated", None, "Paris is the capital of France."),
    ("unrelated", None, "The meeting is scheduled for Monday morning."),
    ("unrelated", None, "Python is a popular programming language."),
    ("unrelated", None, "Always wear a helmet when cycling in traffic."),
    ("unrelated", None, "Tax returns are filed once a year with the government."),
    ("unrelated", None, "I hope this helps."),
    ("unrelated", None, "The passages do not mention the weather."),
    ("unrelated", None, "Bicycles were invented in the nineteenth century."),
    ("near", "pasta", "Parmesan cheese goes well with most pasta sauces."),
    ("near", "pasta", "Fresh pasta cooks in two to three minutes."),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threshold", type=float, default=None, help="default: the net's SUPPORT_THRESHOLD")
    args = parser.parse_args()
    django_setup()
    from knowledge.embedders import get_embedder
    from knowledge.ingestion.splitters import sentence_offsets
    from retrieval.stages.generate.citations import CITED_THRESHOLD, SUPPORT_THRESHOLD

    threshold = SUPPORT_THRESHOLD if args.threshold is None else args.threshold
    sentences = [(name, text[a:b]) for name, text in DOCUMENTS.items() for a, b in sentence_offsets(text)]
    vectors = get_embedder("local").embed([claim for _, _, claim in CLAIMS] + [s for _, s in sentences])
    similarity = vectors[: len(CLAIMS)] @ vectors[len(CLAIMS) :].T
    rows = []
    for i, (kind, document, claim) in enumerate(CLAIMS):
        j = int(similarity[i].argmax())
        best = round(float(similarity[i, j]), 3)
        rows.append({"kind": kind, "claim": claim, "best": best, "from": sentences[j][0], "says_it": document})
    kinds = {}
    for kind in ("paraphrase", "unrelated", "near"):
        best = [row["best"] for row in rows if row["kind"] == kind]
        kinds[kind] = {
            "min": min(best),
            "max": max(best),
            "n": len(best),
            "accepted": sum(b >= threshold for b in best),
            "kept_if_cited": sum(b >= CITED_THRESHOLD for b in best),
        }
    result = {"threshold": threshold, "cited_threshold": CITED_THRESHOLD, "kinds": kinds, "claims": rows}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
