"""A git fetch within the operator's limits: at most ``KB_GIT_MAX_MB`` received and
``KB_GIT_TIMEOUT_S`` spent, or nothing of it kept (``knowledge.connectors.git``)."""

from __future__ import annotations

import time
from tempfile import SpooledTemporaryFile

from django.conf import settings
from dulwich.repo import Repo


class FetchLimit(Exception):
    """A fetch passed the operator's size or time limit."""


def fetch_limited(client, path, repo: Repo, determine_wants, *, deadline: float):
    """``client.fetch(path, repo, determine_wants)`` that stops once the pack passes
    ``KB_GIT_MAX_MB`` or the clock passes ``deadline`` (``time.monotonic()`` seconds), raising
    ``FetchLimit`` before anything is added to ``repo``. Returns dulwich's ``FetchPackResult``."""
    limit = settings.KB_GIT_MAX_MB * 2**20
    received = 0

    def within_time(*_args) -> None:
        if time.monotonic() > deadline:
            raise FetchLimit(f"the fetch took longer than {settings.KB_GIT_TIMEOUT_S} s")

    def wants(refs, depth=None):
        within_time()
        return determine_wants(refs, depth)

    with SpooledTemporaryFile(max_size=16 * 2**20, prefix="incoming-", dir=repo.object_store.path) as pack:

        def pack_data(data: bytes) -> None:
            nonlocal received
            received += len(data)
            if received > limit:
                raise FetchLimit(f"the repository is larger than {settings.KB_GIT_MAX_MB} MB")
            within_time()
            pack.write(data)

        result = client.fetch_pack(path, wants, repo.get_graph_walker(), pack_data, progress=within_time)
        if pack.tell():
            pack.seek(0)
            repo.object_store.add_thin_pack(pack.read, None)
    return result
