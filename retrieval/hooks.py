"""What retrieval asks of the app that knows the person asking, without importing it.

Retrieval sits below ``people`` (``docs/architecture.md``) and never imports it, yet a run reads
the asker's profile and history. ``people`` fills in ``person`` when Django starts
(``people.apps.PeopleConfig.ready``); until then every hook is ``None`` and a run is impersonal: no
user layer in the prompt, no source feedback. The ``personal`` signal reranker registers itself
the same way, with ``retrieval.stages.rerank.signal_reranker_register``. Asking, which keeps the
answer in the asker's conversation, is no hook: it lives above retrieval, in ``people.asking``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields


@dataclass
class PersonHooks:
    """Functions of the app that keeps people's data; each takes keyword arguments only.

    - ``user_layer(tenant, user, where, question)``: the answer prompt's description of the asker,
      ``(text, trace summary)``, or ``None``;
    - ``source_feedback_counts(tenant)``: ``{source id: (helpful, not helpful)}``, the tenant's
      citation feedback per cited source.
    """

    user_layer: Callable[..., tuple[str, dict] | None] | None = None
    source_feedback_counts: Callable[..., dict[int, tuple[int, int]]] | None = None


person = PersonHooks()


def person_hooks_register(**hooks: Callable) -> None:
    """Set the given hooks of ``person`` (named as ``PersonHooks``'s fields); ``TypeError`` for
    another name."""
    names = {f.name for f in fields(PersonHooks)}
    for name, function in hooks.items():
        if name not in names:
            raise TypeError(f"Unknown person hook {name!r}; known: {', '.join(sorted(names))}.")
        setattr(person, name, function)
