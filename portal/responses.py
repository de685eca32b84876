"""Responses that differ for htmx: the fragment htmx swaps in, or the whole page."""

from __future__ import annotations

from django.shortcuts import render
from django.utils.cache import patch_vary_headers


def partial_or_page(request, *, fragment: str, page: str, context: dict, status: int = 200):
    """``fragment`` for an htmx request (not a history restore), else the full ``page``; the
    response varies on ``HX-Request`` (a cache must not hand the fragment to a page load)."""
    htmx = getattr(request, "htmx", None)
    partial = bool(htmx) and not htmx.history_restore_request
    response = render(request, fragment if partial else page, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response
