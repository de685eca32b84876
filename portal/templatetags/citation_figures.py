"""``{% citations_with_figures citations as citations %}``: an answer's citations, each with the
``figures`` its passage holds (``portal.figures.citations_with_figures``), for the member the page
is rendered for (the template's ``request``)."""

from __future__ import annotations

from django import template

from portal.figures import citations_with_figures as with_figures

register = template.Library()


@register.simple_tag(takes_context=True)
def citations_with_figures(context, citations: list[dict]) -> list[dict]:
    """``citations``, each with ``figures`` (``[]`` when rendered without a request)."""
    return with_figures(context.get("request"), list(citations or []))
