"""Near-duplicate detection at document level: MinHash + LSH over word shingles, and pair classification.

Pure functions over texts (no database): ``shingles``, ``signatures``, ``candidate_pairs``,
``jaccard``, ``pair_classify`` and ``change_summary``. ``knowledge.dedup.services`` stores what
they find.

Technique: a document is the set of its word ``SHINGLE_WORDS``-grams (w-shingling, Broder 1997,
"On the resemblance and containment of documents"); MinHash signatures estimate the Jaccard
similarity of two sets, and locality-sensitive hashing over bands of the signature finds the
pairs likely above a threshold without comparing every pair (Leskovec, Rajaraman and Ullman,
*Mining of Massive Datasets*, ch. 3). Both come from ``datasketch`` (``MinHash``,
``MinHashLSH``). Candidates are then checked with the exact Jaccard of their shingle sets, so
the LSH's false positives never become pairs.

A pair is *meaningless* when both texts are equal once case, whitespace, punctuation and markup
(HTML, Markdown links, reST roles, hyperlinks and their targets, directive options) are
normalized away (``meaning_words``), else *meaningful*; a meaningful pair gets a short
word-level summary of its changes (``change_summary``: "PostgreSQL 12 -> PostgreSQL 14").
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from datasketch import LeanMinHash, MinHash, MinHashLSH

# Words per shingle: 5-word shingles keep common short phrases from making unrelated pages
# similar, while a one-word edit changes only the 5 shingles that hold it.
SHINGLE_WORDS = 5
# MinHash permutations: the Jaccard estimate's standard error is about 1/sqrt(128) ~ 0.09; the
# exact check after LSH removes the estimate's error from the stored pairs.
NUM_PERM = 128
# Seed of the MinHash permutations: signatures stored with one seed compare only with the same.
SEED = 1
# LSH is tuned this much below the threshold, so pairs just above it are rarely missed; the exact
# Jaccard check then drops the extra candidates.
LSH_MARGIN = 0.1
# The hashing scheme and unsigned integer type of datasketch's hash values (affine32, uint32 in
# datasketch 2): stored signatures are only comparable under the same scheme.
SCHEME = MinHash(num_perm=1).scheme
_HASH_DTYPE = MinHash(num_perm=1).hashvalues.dtype
_STORED_DTYPE = _HASH_DTYPE.newbyteorder("<")

MEANINGLESS = "meaningless"
MEANINGFUL = "meaningful"

_MARKUP = re.compile(r"<[^>]{0,200}>|&[a-z]{2,8};|&#\d{1,6};")
_WORD = re.compile(r"\w+(?:[.'’-]\w+)*")

# Lightweight markup that ``meaning_words`` reads as markup (its text kept, its syntax and link
# targets dropped). The texts compared are the readers' output (``knowledge.ingestion.readers``):
# Markdown is kept as written, reST is mostly converted to text line by line, so what is left is
# markup the reader could not see, e.g. a role whose text and target span two lines. So these
# are patterns over fragments, not a parser: docutils is not a dependency, does not know Sphinx's
# roles (``:ref:``, ``:doc:``, ``:pypi:`` raise "Unknown interpreted text role") and cannot
# parse half-converted text.
#   Markdown: ![alt](src), [text](url "title"), [text][ref], and "[ref]: url" definition lines.
_MD_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]*(?:\n[^\]\n]*)?)\]\((?:<[^>\n]*>|[^()\s]*)(?:\s+\"[^\"\n]*\")?\)")
_MD_REFERENCE_LINK = re.compile(r"\[([^\]\n]+)\]\[[^\]\n]*\]")
_MD_DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]+\S+.*$", re.MULTILINE)
#   reST: :role:`text <target>`, `text <url>`_ / __ (text and target may span lines), :role:`~a.b.C`
#   (shown as "C", as Sphinx does), :role:`text`, ``literal``, `named reference`_, word_ references.
_RST_TARGETED = re.compile(r"(?::[\w.+-]+(?::[\w.+-]+)?:)?`([^`<]*?)\s*<[^`>]*>`(?:__?)?")
_RST_ROLE = re.compile(r":[\w.+-]+(?::[\w.+-]+)?:`!?([^`]*)`")
_RST_LITERAL = re.compile(r"``([^`]+)``")
_RST_NAMED_REF = re.compile(r"`([^`<]+)`__?")
_RST_WORD_REF = re.compile(r"(?<![\w`])([A-Za-z][\w-]*[A-Za-z0-9])__?(?=[\s.,;:)!?]|$)", re.MULTILINE)
#   reST hyperlink targets (".. _name: url", ".. __: url", Django's "__ url"), directive markers
#   (".. note::", its argument kept) and directive options: an indented ":name: value" line of a
#   known option is dropped, except the options rendered as text (a caption, an image's alt text).
_RST_LINK_TARGET = re.compile(
    r"^[ \t]*(?:\.\.[ \t]+_[^:\n]*:(?:[ \t]+\S+)?|(?:\.\.[ \t]+)?__:?[ \t]+\S+)[ \t]*$", re.MULTILINE
)
_RST_DIRECTIVE = re.compile(r"^([ \t]*)\.\.[ \t]+[\w:-]+::", re.MULTILINE)
_RST_OPTION = re.compile(r"^[ \t]+:([\w-]+):(?:[ \t]+(.*))?$", re.MULTILINE)
_RST_SHOWN_OPTIONS = frozenset({"caption", "alt"})
_RST_OPTIONS = _RST_SHOWN_OPTIONS | frozenset(
    {
        "abstractmethod", "align", "annotation", "append", "async", "backlinks", "canonical", "class",
        "classmethod", "dedent", "depth", "deprecated", "emphasize-lines", "encoding", "end-before",
        "end-line", "exclude-members", "figclass", "figwidth", "file", "final", "force", "format",
        "glob", "header-rows", "height", "hidden", "includehidden", "inherited-members", "language",
        "lineno-start", "linenos", "lines", "literal", "local", "maxdepth", "member-order", "members",
        "module", "name", "no-index", "noindex", "number-lines", "numbered", "parser", "platform",
        "prepend", "private-members", "pyobject", "reversed", "scale", "show-inheritance",
        "special-members", "start-after", "start-line", "staticmethod", "stub-columns", "synopsis",
        "tab-width", "target", "titlesonly", "trim", "type", "undoc-members", "url", "value", "width",
        "widths",
    }
)  # fmt: skip


def _role_text(match: re.Match) -> str:
    text = match.group(1)
    return text[1:].rsplit(".", 1)[-1] if text.startswith("~") else text


def _option(match: re.Match) -> str:
    name = match.group(1)
    if name not in _RST_OPTIONS:
        return match.group(0)
    return (match.group(2) or "") if name in _RST_SHOWN_OPTIONS else ""


def markup_strip(text: str) -> str:
    """``text`` with HTML tags and entities, Markdown links and images, reST roles, hyperlinks and
    their targets, literals, directive markers and directive options reduced to the text a reader
    sees (link and role targets dropped). Pure regular expressions over the readers' output.

    ``":pypi:`Django Debug Toolbar <django-debug-toolbar>`"`` -> ``"Django Debug Toolbar"``;
    ``"[the docs](https://x.org)"`` -> ``"the docs"``; ``":class:`~django.db.models.Field`"`` ->
    ``"Field"``.
    """
    text = _MD_DEFINITION.sub("", text)
    text = _MD_IMAGE_OR_LINK.sub(r"\1", text)
    text = _MD_REFERENCE_LINK.sub(r"\1", text)
    text = _RST_LINK_TARGET.sub("", text)
    text = _RST_DIRECTIVE.sub(r"\1", text)
    text = _RST_OPTION.sub(_option, text)
    text = _RST_TARGETED.sub(r"\1", text)
    text = _RST_ROLE.sub(_role_text, text)
    text = _RST_LITERAL.sub(r"\1", text)
    text = _RST_NAMED_REF.sub(r"\1", text)
    text = _RST_WORD_REF.sub(r"\1", text)
    return _MARKUP.sub(" ", text)


def plain_words(text: str) -> list[str]:
    """The words of ``text`` for shingling: HTML/XML tags and entities dropped, then words
    (letters, digits, with inner ``. ' -`` kept: "3.10", "don't") lower-cased; other punctuation
    (``*``, `````, ``#``, ``=`` underlines) disappears. Returns a list of words in order.

    Kept as it is because stored MinHash signatures were computed with it (changing it would
    make old and new signatures incomparable); the classifier reads ``meaning_words``.
    """
    return [word.lower() for word in _WORD.findall(_MARKUP.sub(" ", text))]


def meaning_words(text: str) -> list[str]:
    """The words a reader sees, lower-cased: ``markup_strip`` (HTML, Markdown and reST markup and
    link targets dropped), then words as in ``plain_words``. Two texts with the same meaning
    words differ only in case, whitespace, punctuation or markup (a *meaningless* change)."""
    return [word.lower() for word in _WORD.findall(markup_strip(text))]


def shingles(text: str, *, size: int = SHINGLE_WORDS) -> set[bytes]:
    """The set of ``size``-word shingles of ``text`` (``plain_words`` joined by spaces, UTF-8).

    A text shorter than ``size`` words is one shingle (its words); an empty text has none.
    """
    words = plain_words(text)
    if not words:
        return set()
    if len(words) < size:
        return {" ".join(words).encode()}
    return {" ".join(words[i : i + size]).encode() for i in range(len(words) - size + 1)}


def jaccard(a: set, b: set) -> float:
    """|a ∩ b| / |a ∪ b| in [0, 1]; 0.0 when both are empty."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def signatures(shingle_sets: Iterable[set[bytes]]) -> list[np.ndarray]:
    """MinHash signatures (``NUM_PERM`` unsigned hash values each, seed ``SEED``) of each shingle set, in order."""
    result = []
    for shingle_set in shingle_sets:
        minhash = MinHash(num_perm=NUM_PERM, seed=SEED, scheme=SCHEME)
        if shingle_set:
            minhash.update_batch(list(shingle_set))
        result.append(np.asarray(minhash.hashvalues, dtype=_HASH_DTYPE))
    return result


def signature_bytes(signature: np.ndarray) -> bytes:
    """A signature as stored (little-endian, datasketch's hash value width)."""
    return np.asarray(signature, dtype=_STORED_DTYPE).tobytes()


def signature_from_bytes(data: bytes) -> np.ndarray:
    """The inverse of ``signature_bytes``."""
    return np.frombuffer(bytes(data), dtype=_STORED_DTYPE).astype(_HASH_DTYPE)


def _minhash(signature: np.ndarray) -> MinHash:
    return LeanMinHash(seed=SEED, hashvalues=signature, scheme=SCHEME)


def lsh_threshold(threshold: float) -> float:
    """The LSH threshold used for a Jaccard ``threshold``: ``LSH_MARGIN`` below it, at least 0.3."""
    return max(0.3, threshold - LSH_MARGIN)


def candidate_pairs(
    signatures_by_key: Mapping[int, np.ndarray], *, new: Iterable[int], threshold: float
) -> set[tuple[int, int]]:
    """Pairs ``(a, b)`` (``a < b``) of keys whose signatures LSH finds likely above ``threshold``.

    Only pairs with at least one key in ``new`` are returned (the others were compared before).
    ``signatures_by_key`` maps every key to compare (e.g. version ids) to its signature.
    """
    lsh = MinHashLSH(threshold=lsh_threshold(threshold), num_perm=NUM_PERM)
    minhashes = {key: _minhash(sig) for key, sig in signatures_by_key.items()}
    with lsh.insertion_session() as session:
        for key, minhash in minhashes.items():
            session.insert(key, minhash, check_duplication=False)
    pairs: set[tuple[int, int]] = set()
    for key in new:
        if key not in minhashes:
            continue
        for other in lsh.query(minhashes[key]):
            if other != key:
                pairs.add((min(key, other), max(key, other)))
    return pairs


@dataclass(frozen=True)
class PairClass:
    """How two near-duplicate texts differ: ``kind`` (meaningless or meaningful) and ``update``,
    a short word-level summary of the changes from the older to the newer text ("" when meaningless)."""

    kind: str
    update: str


def pair_classify(older: str, newer: str) -> PairClass:
    """Classify a near-duplicate pair (see the module docstring); ``update`` reads older -> newer."""
    if meaning_words(older) == meaning_words(newer):
        return PairClass(MEANINGLESS, "")
    return PairClass(MEANINGFUL, change_summary(older, newer))


_SHOWN_CHANGES = 3
_SHOWN_WORDS = 8


def _clip(words: list[str]) -> str:
    if len(words) > _SHOWN_WORDS:
        return " ".join(words[:_SHOWN_WORDS]) + " …"
    return " ".join(words)


def change_summary(older: str, newer: str, *, limit: int = _SHOWN_CHANGES) -> str:
    """A short word-level diff of ``older`` -> ``newer``: at most ``limit`` changes, in text order.

    Words are compared case-, punctuation- and markup-blind (``meaning_words``) but shown as
    written. A replacement reads "PostgreSQL 12 -> PostgreSQL 14" (one word of context before a
    change of at most three words), an insertion "+ words", a deletion "- words"; changes are
    joined by "; " and "(+N more)" counts the rest. Each side shows at most eight words.
    """
    a_shown = _WORD.findall(markup_strip(older))
    b_shown = _WORD.findall(markup_strip(newer))
    a = [w.lower() for w in a_shown]
    b = [w.lower() for w in b_shown]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    changes = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        short = max(i2 - i1, j2 - j1) <= 3
        context = a_shown[i1 - 1 : i1] if short and i1 > 0 else []
        if tag == "replace":
            changes.append(f"{_clip(context + a_shown[i1:i2])} -> {_clip(context + b_shown[j1:j2])}")
        elif tag == "insert":
            changes.append(f"+ {_clip(b_shown[j1:j2])}")
        else:
            changes.append(f"- {_clip(a_shown[i1:i2])}")
    summary = "; ".join(changes[:limit])
    if len(changes) > limit:
        summary += f" (+{len(changes) - limit} more)"
    return summary


def clusters_of(pairs: Iterable[tuple[int, int]]) -> list[set[int]]:
    """Connected components (union-find) of the graph whose edges are ``pairs``; each of 2+ keys."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        root_a, root_b = find(a), find(b)
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)
    groups: dict[int, set[int]] = {}
    for key in parent:
        groups.setdefault(find(key), set()).add(key)
    return [group for group in groups.values() if len(group) > 1]
