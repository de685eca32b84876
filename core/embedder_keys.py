"""The embedder keys a tenant may name: ``"local"`` (all-MiniLM-L6-v2), ``"mpnet"``
(all-mpnet-base-v2), both on this machine, or ``"openai:<model>"`` (an OpenAI-compatible
endpoint). Plain Python, no Django models, so the settings check ``KB_EMBEDDER`` with it; the
``Tenant.embedder`` column holds the same rule as a database constraint, and
``knowledge.embedders`` maps the local keys to their models.
"""

from __future__ import annotations

LOCAL_EMBEDDER_KEYS = ("local", "mpnet")
OPENAI_PREFIX = "openai:"
EMBEDDER_FORMS = "'local', 'mpnet' or 'openai:<model>'"


def embedder_key_valid(key: str) -> bool:
    """Whether ``key`` names an embedder (``EMBEDDER_FORMS``); installation is not checked."""
    return key in LOCAL_EMBEDDER_KEYS or (key.startswith(OPENAI_PREFIX) and len(key) > len(OPENAI_PREFIX))
