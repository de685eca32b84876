"""Template filters for a running sync's progress (``templates/portal/_last_sync.html``)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """Whole seconds as a short duration: ``45 s``, ``3 min 20 s``, ``1 h 5 min``; ``""`` for None."""
    if seconds is None or seconds == "":
        return ""
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60} min"
