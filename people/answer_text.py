"""An answer's head as plain text, for the command line (``manage.py ask``, ``manage.py demo``).

The head is what the portal's answer card shows above the explanation
(``templates/portal/_answer.html``): the short answer, else the lead passage an extractive answer
without a short answer carries (``Answer.lead``): its citation number, document title and section,
then its most relevant paragraph.
"""

from __future__ import annotations

from retrieval.types import Answer


def answer_head_lines(answer: Answer) -> list[str]:
    """The lines that lead ``answer`` (module docstring); ``[]`` when it has neither a short
    answer nor a lead passage."""
    if answer.short_answer:
        return [f"Short answer: {answer.short_answer}"]
    lead = answer.lead
    if not lead:
        return []
    section = lead.get("section") or ""
    shown_section = f" · {section}" if section and section != lead.get("title") else ""
    return [f"[{lead['n']}] {lead.get('title') or ''}{shown_section}", lead["text"]]
