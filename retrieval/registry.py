"""The registry of a run: the code it calls that lives outside retrieval, named in the settings.

Retrieval sits below ``people`` (``docs/architecture.md``) and never imports it, yet a run reads the
asker's profile and history and ranks with the ``personal`` signal reranker that ``people`` owns.
Instead of globals that apps fill in when Django starts, the pieces are named once, in order, in
the settings (``config/settings.py``), the way Django names its middleware:

- ``KB_SIGNAL_RERANKERS``: the signal reranker modules, in chain order
  (``retrieval.stages.rerank``: each has ``NAME``, ``Config``, ``active`` and ``rerank``);
- ``KB_PERSON_HOOKS``: ``user_layer(tenant, user, where, question)``, the answer prompt's
  description of the asker as ``(text, trace summary)`` or ``None``, and
  ``source_feedback_counts(tenant)``, ``{source id: (helpful, not helpful)}``;
- ``KB_MEMORY_RETRIEVER``: the memory field's retriever (the facts walks kept,
  ``retrieval.walks.memory.memory_search``).

``registry_configured()`` imports them on first use and returns one frozen ``Registry``; the
pipeline passes it with each run (``RunState.registry``) and the stages read it there. A test or a
benchmark passes another ``Registry`` to ``pipeline_answer``/``pipeline_retrieve``, or changes the
settings (``override_settings``: the cached registry is dropped when one of them changes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

SETTINGS = ("KB_SIGNAL_RERANKERS", "KB_PERSON_HOOKS", "KB_MEMORY_RETRIEVER")
PERSON_HOOKS = ("user_layer", "source_feedback_counts")


@dataclass(frozen=True)
class Registry:
    """What a run calls from outside retrieval (module docstring).

    ``signal_rerankers``: the reranker modules in chain order; ``reranker_paths`` their dotted
    paths (the same order); ``user_layer``, ``source_feedback_counts`` and ``memory_search``: the
    functions, or ``None`` when none is named (then the run is impersonal, has no source
    feedback, or has no memory field).
    """

    signal_rerankers: tuple[ModuleType, ...] = ()
    reranker_paths: tuple[str, ...] = ()
    user_layer: Callable | None = None
    source_feedback_counts: Callable | None = None
    memory_search: Callable | None = None


def _imported(path: str, what: str, *, module: bool = False):
    """The module (``module``) or the object at dotted ``path``; ``ImproperlyConfigured`` naming
    the setting ``what`` when it cannot be imported."""
    try:
        return import_module(path) if module else import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(f"{what} names {path!r}, which cannot be imported: {exc}") from exc


@functools.cache
def registry_configured() -> Registry:
    """The ``Registry`` the settings name (module docstring), imported once per process.
    ``ImproperlyConfigured`` naming the setting when a path cannot be imported or a hook name is
    unknown."""
    paths = tuple(settings.KB_SIGNAL_RERANKERS)
    hooks = dict(settings.KB_PERSON_HOOKS)
    unknown = sorted(set(hooks) - set(PERSON_HOOKS))
    if unknown:
        raise ImproperlyConfigured(
            f"KB_PERSON_HOOKS: unknown hook(s) {', '.join(unknown)}; known: {', '.join(PERSON_HOOKS)}."
        )
    memory = settings.KB_MEMORY_RETRIEVER
    return Registry(
        signal_rerankers=tuple(_imported(path, "KB_SIGNAL_RERANKERS", module=True) for path in paths),
        reranker_paths=paths,
        **{name: _imported(path, "KB_PERSON_HOOKS") for name, path in hooks.items() if path},
        memory_search=_imported(memory, "KB_MEMORY_RETRIEVER") if memory else None,
    )


@receiver(setting_changed)
def _registry_dropped(*, setting, **_) -> None:
    """Drop the cached registry when a test changes one of its settings."""
    if setting in SETTINGS:
        registry_configured.cache_clear()
