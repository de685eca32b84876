"""The short answer of an extractive answer: a name, number, date or option, cut from the sentences.

Classic factoid answer extraction without a model (Abney, Collins & Singhal 2000, "Answer
Extraction", ANLP; the answer-type filters of Brill et al. 2002, "An Analysis of the AskMSR
Question-Answering System", EMNLP):

1. The question's expected answer type, from its wording: a number ("how many", "population"),
   a date ("when", "what year"), an entity ("who", "where", "which …", "what <noun>"), or one of
   two options it names ("…, A or B?"). Questions asking how to do something, why, or what
   something is get no span (their short answer stays a sentence); so do yes/no questions.
2. Candidate spans of that type in the best few sentences: runs of capitalised words (with
   "of", "de", "the" … inside; not dates, nor lone demonyms such as "American"), quoted titles,
   numbers, years and dates; a sentence opening with "He", "It" … also offers its passage's
   subject. Spans the question itself states, and single words it contains, are dropped (the
   question's own entities are not its answer).
3. Each span scores its sentence's score plus a proximity bonus for being close to the words it
   shares with the question, plus a bonus for each other sentence it recurs in (redundancy).

For options, the one whose sentences (those naming it, or in a passage about it) share most of the
question's other terms wins; for
"older", "first", "earlier" (or "younger", "later", "most recent") the one whose sentences give
the earlier (later) year.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9_]+")
_STOP = frozenset(
    "a an and are as at be by can do does for from how i in is it my of on or the this to what when where which "
    "who why with you your was were did has have had been its his her their that whose whom into".split()
)
_AUX = frozenset("is are was were do does did can could has have had will would should".split())
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_DATE = re.compile(
    rf"\b(?:(?:from|between)\s+)?(?:(?:{_MONTHS})\s+(?:\d{{1,2}},?\s+)?|\d{{1,2}}\s+(?:{_MONTHS})\s+)?"
    r"\d{4}(?:\s*(?:–|-|to|until|and)\s*(?:(?:" + _MONTHS + r")\s+(?:\d{1,2},?\s+)?)?\d{4})?\b"
)
_NUMBER_WORDS = (
    "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|hundred"
)
_DIGITS = r"\d+(?:,\d{3})*(?:\.\d+)?"
_NUMBER = re.compile(
    rf"(?<![\w,.])(?:{_DIGITS}|{_NUMBER_WORDS})(?:\s+(?:to|or|and)\s+(?:{_DIGITS}|{_NUMBER_WORDS}))?"
    r"(?:\s+(?:million|billion|thousand|hundred|percent|%|[a-z]+s\b))?",
    re.IGNORECASE,
)
_MONTH_DAY = re.compile(rf"(?:{_MONTHS})\s+\d{{1,2}}|\d{{1,2}}\s+(?:{_MONTHS})")
_DEMONYM = re.compile(r"[A-Z][a-z]+(?:ian|ese|ish|can|ch)")  # "Canadian", "Japanese", "Danish", "French"
_PRONOUN = re.compile(r"(?:He|She|It|They|His|Her|Its|Their)\b")
_AFTER_MONTH = re.compile(rf"(?:{_MONTHS})\s+$")
_QUOTED = re.compile(r"[\"“]([^\"”]{2,80})[\"”]")
_CONNECTORS = frozenset("of de del la le du da von van der den the and for y al bin".split())
_CAPITAL = r"[A-Z0-9À-ÖØ-Þ][\w'’.&-]*"
_RUN = re.compile(rf"{_CAPITAL}(?:\s+(?:(?:{'|'.join(sorted(_CONNECTORS))})\s+)*{_CAPITAL})*")
_RUN_TOKEN = re.compile(r"[\w'’.&-]+")
_LEADING = frozenset(
    "the a an he she it they his her its their this these those in on at after before during when while "
    "however also as by for from with although since there other both some many one two three four five".split()
)
_SENTENCE_ONLY = re.compile(
    r"^\s*(how\s+(do|does|did|can|could|should|would|to|is|are|was|were)\b|why\b|"
    r"what\s+(is|are|was|were)\b(?!.*\b(name|called|titled)\b)|what\s+(does|do|did)\b|what\s+\w+ed\b|"
    r"explain\b|describe\b)",
    re.IGNORECASE,
)
_NUMBER_CUES = re.compile(
    r"\bhow\s+(many|much|old|long|far|tall|big|large)\b|\bpopulation\b|\bwhat number\b|\b(which|what)\s+(\w+\s+)?versions?\b",
    re.I,
)
_DATE_CUES = re.compile(
    r"\bwhen\b|\b(what|which)\s+(year|years|date|decade|century|timeframe|time\s*frame)\b|\btimeframe\b", re.I
)
_ENTITY_CUES = re.compile(r"\b(who|whom|whose|where|which|what)\b|\bname\b", re.I)
_OPTIONS = re.compile(r"[,:]\s*(?:the\s+)?([^,:?]+?)\s+or\s+(?:the\s+)?([^,:?]+?)\s*(?:[,?]|$)", re.I)
_EARLIER = re.compile(r"\b(older|oldest|first|earlier|earliest|before)\b", re.I)
_LATER = re.compile(r"\b(younger|youngest|later|latest|newer|newest|most recent|last)\b", re.I)
_YEAR = re.compile(r"\b(1\d{3}|20\d{2})\b")
TOP_SENTENCES = 8  # the best sentences searched for a span
PROXIMITY_WEIGHT = 0.5  # weight of 1 / (1 + words to the nearest question term)
REDUNDANCY_WEIGHT = 0.3  # bonus per other top sentence the span recurs in


def terms(text: str, *, unique: bool = True) -> list[str]:
    """The content terms of ``text``: lower-cased words, stopwords and single letters dropped,
    a plural "s" stripped ("libraries" -> "library", "cats" -> "cat"); distinct when ``unique``."""
    found = [_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1]
    return list(dict.fromkeys(found)) if unique else found


# Words that say how a question is asked, not what it is about: never a key term.
_GENERIC = frozenset(
    "way best possible need want should would could will get make use using used set setting "
    "there any all some one ways about".split()
)
# Questions asking how to do something, why, or to explain or compare: no sentence answers them.
_EXPLAIN = re.compile(
    r"^\s*(?:how\s+(?!many\b|much\b|old\b|long\b|far\b|often\b|big\b|large\b|tall\b)|why\b|explain\b|describe\b|"
    r"(?:can|could|would|will)\s+you\b|tell\s+me\b|show\s+me\b|walk\s+me\b|"
    r"what(?:'s|\s+is|\s+are)\s+(?:the\s+)?(?:best|right|recommended|proper|correct|easiest)\s+(?:way|ways|practice)\b|"
    r"what\s+(?:has\s+|have\s+)?changed\b|what(?:'s|\s+is|\s+are)\s+new\b|"
    r"what(?:'s|\s+is|\s+are)\s+the\s+differences?\b|(?:steps|ways)\s+to\b|"
    r"(?:create|write|add|build|set\s+up|configure|implement|deploy|install|use|make)\b)",
    re.IGNORECASE,
)


def key_terms(question: str) -> list[str]:
    """The terms of ``question`` a headline should share: ``terms`` without the words that say how
    it is asked ("best", "way", "use" …); all of ``terms`` when that would leave none."""
    found = terms(question)
    return [t for t in found if t not in _GENERIC] or found


def question_kind(question: str) -> str:
    """``"explain"`` for a question no one sentence answers (how to do something, why, explain,
    what changed, the best way to, an imperative "create …"), else ``"fact"`` (what is, which,
    who, when, how many, what version, a default value, yes/no)."""
    return "explain" if _EXPLAIN.search(question) else "fact"


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def yes_no_question(question: str) -> bool:
    """Whether ``question`` asks yes or no: it opens with an auxiliary verb ("Are …", "Did …") and
    names no two options ("Did A or B come first?" asks for one of them)."""
    first = question.strip().split(maxsplit=1)[0].lower() if question.strip() else ""
    return first in _AUX and question_options(question) is None


def answer_type(question: str) -> str | None:
    """The answer ``question`` expects: "options", "number", "date", "entity", or ``None`` (a
    sentence: how-to, why, definitions, yes/no questions and anything unrecognised)."""
    if question_options(question):
        return "options"
    first = question.strip().split(maxsplit=1)[0].lower() if question.strip() else ""
    if _SENTENCE_ONLY.search(question) or first in _AUX:
        return None
    if _NUMBER_CUES.search(question):
        return "number"
    if _DATE_CUES.search(question):
        return "date"
    if _ENTITY_CUES.search(question):
        return "entity"
    return None


def question_options(question: str) -> tuple[str, str] | None:
    """The two options a question names ("Who is older, A or B?" -> ``("A", "B")``), else ``None``."""
    match = _OPTIONS.search(question)
    if match is None:
        return None
    a, b = (" ".join(option.split()) for option in match.groups())
    if not a or not b or len(a.split()) > 6 or len(b.split()) > 6:
        return None
    return a, b


@dataclass(frozen=True)
class Sentence:
    """A sentence to cut a span from: its ``text``, ``score`` (higher is better) and ``subject``,
    the entity its passage is about (``passage_subject``), which a leading pronoun refers to."""

    text: str
    score: float
    subject: str = ""


def passage_subject(text: str) -> str:
    """The entity a passage is about: the first capitalised run of its first sentence
    ("Animorphs. Animorphs is a science fantasy series …" -> "Animorphs"), or ""."""
    head = text.strip()[:300]
    return next((span for _, _, span in _capitalised_runs(head) if not span[0].isdigit()), "")


def span_answer(question: str, sentences: list[Sentence]) -> str:
    """The short answer span for ``question`` from ``sentences`` (best first), or "" when the
    question expects none or no candidate of its type is found (module docstring)."""
    kind = answer_type(question)
    if kind is None or not sentences:
        return ""
    if kind == "options":
        return _option_choose(question, sentences)
    asked = set(terms(question))
    said = f" {_normal(question)} "
    best: tuple[float, str] | None = None
    top = sentences[:TOP_SENTENCES]
    for sentence in top:
        text = sentence.text
        words = [(m.start(), _stem(m.group(0))) for m in _WORD.finditer(text.lower())]
        for start, end, span in _spans(sentence, kind):
            span_terms = set(terms(span))
            if not span_terms or f" {_normal(span)} " in said or (len(span_terms) == 1 and span_terms <= asked):
                continue
            bonus = PROXIMITY_WEIGHT * _proximity(words, start, end, asked)
            recurs = sum(1 for other in top if other.text != text and span.lower() in other.text.lower())
            value = sentence.score + bonus + REDUNDANCY_WEIGHT * recurs
            if best is None or value > best[0]:
                best = (value, span)
    return best[1] if best else ""


def answer_bearing(text: str, kind: str | None, question: str) -> bool:
    """Whether ``text`` holds a number or date (as ``kind`` asks) that the question does not state."""
    if kind not in ("number", "date"):
        return False
    said = f" {_normal(question)} "
    return any(f" {_normal(span)} " not in said for _, _, span in _spans(Sentence(text, 0.0), kind))


def _normal(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _spans(sentence: Sentence, kind: str) -> list[tuple[int, int, str]]:
    """Candidate spans ``(start, end, text)`` of ``kind`` in ``sentence`` (character offsets)."""
    text = sentence.text
    if kind == "date":
        return [(m.start(), m.end(), m.group(0)) for m in _DATE.finditer(text)]
    if kind == "number":
        return [
            (m.start(), m.end(), m.group(0))
            for m in _NUMBER.finditer(text)
            if not _YEAR.fullmatch(m.group(0)) and not _AFTER_MONTH.search(text[: m.start()])
        ]
    found = [(m.start(1), m.end(1), m.group(1).strip(" ,.")) for m in _QUOTED.finditer(text)]
    found += [
        (start, end, span)
        for start, end, span in _capitalised_runs(text)
        if not span[0].isdigit()
        and not _DATE.fullmatch(span)
        and not _MONTH_DAY.fullmatch(span)
        and not _DEMONYM.fullmatch(span)
    ]
    pronoun = _PRONOUN.match(text)
    if pronoun and sentence.subject:  # "He was …": the passage's subject, where the pronoun stands
        found.append((pronoun.start(), pronoun.end(), sentence.subject))
    return found


def _capitalised_runs(text: str) -> list[tuple[int, int, str]]:
    """Runs of capitalised tokens (with connectors such as "of" inside) as spans, cut after a
    token ending in "'s" or in a full stop that is not an initial ("J.") or "Jr."."""
    found: list[tuple[int, int, str]] = []
    for match in _RUN.finditer(text):
        run: list[re.Match] = []
        for token in _RUN_TOKEN.finditer(match.group(0)):
            run.append(token)
            word = token.group(0)
            if word.endswith(("'s", "’s")) or (word.endswith(".") and len(word) > 3):
                found.extend(_capitalised(text, match.start(), run))
                run = []
        found.extend(_capitalised(text, match.start(), run))
    return found


def _capitalised(text: str, offset: int, run: list[re.Match]) -> list[tuple[int, int, str]]:
    """The run of tokens (offsets relative to ``offset``) as a span: connectors trimmed from its
    ends, a sentence-opening function word ("The", "He", "In" …) and a trailing "'s" dropped."""
    while run and run[-1].group(0).lower() in _CONNECTORS:
        run = run[:-1]
    while run and (run[0].group(0).lower() in _CONNECTORS or run[0].group(0).lower() in _LEADING):
        run = run[1:]
    if not run:
        return []
    start, end = offset + run[0].start(), offset + run[-1].end()
    span = re.sub(r"['’]s$", "", text[start:end].rstrip("."))
    return [(start, start + len(span), span)] if span else []


def _proximity(words: list[tuple[int, str]], start: int, end: int, asked: set[str]) -> float:
    """1 / (1 + words between the span ``start:end`` and the nearest question term among
    ``words`` (``(offset, term)`` in order); 0 without one."""
    offsets = [offset for offset, _ in words]
    first, last = bisect.bisect_left(offsets, start), bisect.bisect_left(offsets, end) - 1
    if first > last:
        return 0.0
    distances = [first - i if i < first else i - last for i, (_, w) in enumerate(words) if w in asked]
    distances = [d for d in distances if d > 0]
    return 1.0 / (1 + min(distances)) if distances else 0.0


def _option_choose(question: str, sentences: list[Sentence]) -> str:
    """The option of a "…, A or B?" question that the sentences favour (module docstring): a
    sentence speaks of an option when it names it or its passage is about it."""
    options = question_options(question)
    assert options is not None
    option_terms = [set(terms(option)) for option in options]
    rest = set(terms(question)) - option_terms[0] - option_terms[1]
    evidence: list[tuple[float, int | None]] = []
    for words in option_terms:
        best, years = 0.0, []
        for sentence in sentences:
            named = set(terms(sentence.text))
            if words and (words <= named or words <= set(terms(sentence.subject))):
                best = max(best, len(rest & named) / max(1, len(rest)))
                years += [int(y) for y in _YEAR.findall(sentence.text)]
        evidence.append((best, min(years) if years else None))
    (a_best, a_year), (b_best, b_year) = evidence
    if a_year is not None and b_year is not None and a_year != b_year:
        if _EARLIER.search(question):
            return options[0] if a_year < b_year else options[1]
        if _LATER.search(question):
            return options[0] if a_year > b_year else options[1]
    return options[0] if a_best >= b_best else options[1]
