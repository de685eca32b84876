"""Keyphrases of a chunk with YAKE, LLM-free.

YAKE! (Campos et al., "YAKE! Keyword extraction from single documents using multiple local
features", Information Sciences 509, 2020; the ``yake`` package) scores each candidate n-gram by
statistics of the text itself (casing, position, frequency, spread over sentences, how many
different words surround it): no corpus, no model, a few milliseconds per chunk. KeyBERT
(embedding candidate n-grams with the tenant's embedder) was the alternative the issue named;
it costs one embedder pass per candidate, many times the chunk's own embedding, against an
ingestion budget of 15 % of the embedder's time (``docs/enrichment.md``).
"""

from __future__ import annotations

import threading

# Candidate n-grams up to this many words; the best ``KEYPHRASES`` are kept.
MAX_NGRAM = 2
KEYPHRASES = 10
# YAKE drops a candidate this similar (sequence matcher) to a better one.
DEDUP_LIMIT = 0.9
# Longer texts are cut: YAKE's cost grows with the text, and a chunk's key terms show early.
MAX_CHARS = 4000

_local = threading.local()


def _extractor():
    """One ``yake.KeywordExtractor`` per thread (it keeps state between calls)."""
    extractor = getattr(_local, "extractor", None)
    if extractor is None:
        import yake

        extractor = _local.extractor = yake.KeywordExtractor(
            lan="en", n=MAX_NGRAM, top=KEYPHRASES, dedupLim=DEDUP_LIMIT
        )
    return extractor


def keyphrases_extract(text: str) -> list[str]:
    """The keyphrases of ``text``, best first: at most ``KEYPHRASES`` strings of 1 to
    ``MAX_NGRAM`` words, as they appear in the text (no duplicates, case-insensitively).

    An empty or word-less text gives ``[]``. Pure Python (YAKE), deterministic.
    """
    text = (text or "")[:MAX_CHARS]
    if not text.strip():
        return []
    seen: set[str] = set()
    phrases: list[str] = []
    for phrase, _score in _extractor().extract_keywords(text):
        key = phrase.lower()
        if key not in seen:
            seen.add(key)
            phrases.append(phrase)
    return phrases
