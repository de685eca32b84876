"""An answer as the portal shows it: its explanation as escaped HTML with each ``[n]`` linked to the
cited chunk, unsupported sentences marked, and what ``portal/_answer.html`` renders.

Document text is only ever escaped (``escape``/``format_html`` per segment); nothing an answer or a
document holds becomes markup.
"""

from __future__ import annotations

import re

from django.urls import reverse
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString

from knowledge.pages import page_label
from portal.viewer import viewer_url
from retrieval.stages.generate.citations import sentence_spans

# Same pattern as the one the generate stage writes citations with: "[n]".
_CITATION = re.compile(r"\[(\d{1,3})\]")


def citation_url(citation: dict, *, trace_id: int | None = None) -> str:
    """The cited page of the version's original PDF (``portal.viewer``) when the citation has a
    page, else the document page of the cited version, scrolled to the cited chunk; through
    ``citation_open`` (which records the opening for personalization, then goes to either) when
    the answer has a trace."""
    if trace_id:
        return reverse("portal:citation-open", args=[trace_id, citation["n"]])
    if citation.get("page"):  # the viewer falls back to the document page when no original is kept
        return viewer_url(citation["document_id"], citation["version"], citation["chunk"])
    path = reverse("portal:document", args=[citation["document_id"]])
    return f"{path}?version={citation['version']}#chunk-{citation['chunk']}"


def answer_with_links(text: str, urls: dict[int, str]) -> SafeString:
    """``text`` escaped, with each ``[n]`` that has a URL turned into a link to it."""
    html = SafeString("")
    last = 0
    for match in _CITATION.finditer(text):
        html += escape(text[last : match.start()])
        n = int(match.group(1))
        if n in urls:
            html += format_html('<a class="cite" href="{}">[{}]</a>', urls[n], n)
        else:
            html += escape(match.group(0))
        last = match.end()
    return html + escape(text[last:])


def explanation_html(answer: dict, urls: dict[int, str]) -> SafeString:
    """The answer's explanation as ``answer_with_links`` renders it, each sentence that no passage
    supports (``answer["sentences"]``, ``supported`` false) in ``<mark class="unsupported">`` with
    a visible "unsupported" tag after it. The sentences are found again in the text with the
    splitting that made them (``sentence_spans``); when they do not line up (an answer kept
    before sentences were recorded) the text is rendered unmarked."""
    text = answer["answer"]
    sentences = answer.get("sentences") or []
    if all(sentence.get("supported", True) for sentence in sentences):
        return answer_with_links(text, urls)
    spans = sentence_spans(text)
    if [span.text for span in spans] != [sentence.get("text") for sentence in sentences]:
        return answer_with_links(text, urls)
    html = SafeString("")
    last = 0
    for span, sentence in zip(spans, sentences, strict=True):
        if sentence.get("supported", True):
            continue
        html += answer_with_links(text[last : span.start], urls)
        html += format_html(
            '<mark class="unsupported" title="No passage supports this sentence">{}</mark>'
            '<span class="unsupported-tag">unsupported</span>',
            answer_with_links(text[span.start : span.end], urls),
        )
        last = span.end
    return html + answer_with_links(text[last:], urls)


def answer_context(answer: dict, *, thread: dict | None = None, can_participate: bool = True) -> dict:
    """What ``portal/_answer.html`` renders: ``answer`` (``AnswerRun.as_dict()``: its short answer
    shows first), its explanation as escaped HTML with linked ``[n]`` and unsupported sentences
    marked (``answer_html``: ``explanation_html``), its ``citations`` with their ``url`` and
    ``pages`` ("p. 12", "pp. 12-13", or "" for a document without pages) and the conversation's
    earlier turns (``thread``, from ``thread_context``); feedback forms show when
    ``can_participate`` (not for viewers)."""
    citations = [
        {
            **c,
            "url": citation_url(c, trace_id=answer.get("trace_id")),
            "pages": page_label(c.get("page"), c.get("page_end")),
        }
        for c in answer["citations"]
    ]
    return {
        "thread": thread,
        "can_participate": can_participate,
        "answer": answer,
        "answer_html": explanation_html(answer, {c["n"]: c["url"] for c in citations}),
        "citations": citations,
    }
