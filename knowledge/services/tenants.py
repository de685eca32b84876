"""Sources of a tenant, and deleting a tenant with everything it owns (creating one: ``core.services``)."""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

from django.conf import settings
from django.db import transaction

from core.errors import InvalidInput
from core.models import Tenant
from knowledge.models import Source
from knowledge.originals import tenant_originals_folder
from knowledge.quotas import quota_check, quota_check_early
from knowledge.vector_index import tenant_vector_indexes_prune


def tenant_delete(*, tenant: Tenant) -> None:
    """Delete a tenant with everything it owns, and drop its own HNSW indexes.

    The rows go in one transaction (cascades; the BM25 triggers update nothing else's
    statistics), then its files in the data directory (uploads, fetched git repositories, kept
    original files: ``knowledge.originals``); the
    tenant's vector indexes (``knowledge.vector_index``) are dropped after it,
    concurrently when no transaction is open, so other tenants' searches never wait on them.
    """
    tenant_id = tenant.pk
    data = Path(settings.KB_DATA_DIR)
    # its uploads, fetched repositories and kept originals
    files = [data / "uploads" / tenant.slug, data / "git" / str(tenant_id), tenant_originals_folder(tenant_id)]
    with transaction.atomic():
        Tenant.objects.filter(pk=tenant_id).delete()
        for folder in files:
            transaction.on_commit(partial(shutil.rmtree, folder, ignore_errors=True))
    tenant_vector_indexes_prune(tenant_id=tenant_id)


def source_get_or_create(
    *,
    tenant: Tenant,
    name: str,
    kind: str = Source.Kind.FILES,
    reliability: float | None = None,
    half_life_days: float | None = None,
    save: bool = True,
) -> Source:
    """The tenant's source called ``name``, created if missing; given attributes are updated.

    ``save=False``: a missing source is returned unsaved, for an ingestion to save it in the
    transaction that stores its documents (so a refused file leaves no empty source behind).
    A missing source past the tenant's sources limit is ``QuotaExceeded`` (403, code
    ``quota_exceeded``; ``knowledge.quotas``), whether saved here or by the ingestion, which
    checks again under the tenant's quota lock.
    """
    if not name.strip():
        raise InvalidInput("A source needs a name.")
    if reliability is not None and not 0 <= reliability <= 1:
        raise InvalidInput("reliability must be in [0, 1].")
    if half_life_days is not None and half_life_days <= 0:
        raise InvalidInput("half_life_days must be positive.")
    source = source_get_or_new(tenant=tenant, name=name, kind=kind)
    if source.pk is None:
        source.reliability = 1.0 if reliability is None else reliability
        source.half_life_days = half_life_days
        if not save:
            quota_check_early(tenant=tenant, sources=1)  # the ingestion that saves it checks again
            return source
        with transaction.atomic():
            quota_check(tenant=tenant, sources=1)  # under the tenant's quota lock until the save commits
            source.save()
        return source
    updates = {
        k: v
        for k, v in {
            "reliability": reliability,
            "half_life_days": half_life_days,
        }.items()
        if v is not None
    }
    if updates:
        for key, value in updates.items():
            setattr(source, key, value)
        source.save(update_fields=list(updates))
    return source


def source_get_or_new(*, tenant: Tenant, name: str, kind: str = Source.Kind.FILES) -> Source:
    """The tenant's source called ``name``, or a new unsaved one of ``kind``.

    ``InvalidInput`` (code ``source_not_filled_by_hand``) when ``name`` is a source whose documents
    only its connector or the conversations write (a synced or a conversation-files source) and
    ``kind`` is another: a file ingested or uploaded into it would be deleted by its next sync, or
    hidden in a conversation nobody has.
    """
    source = Source.objects.filter(tenant=tenant, name=name).first()
    if source is None:
        return Source(tenant=tenant, name=name, kind=kind)
    if source.kind != kind and source.kind in (*Source.SYNCED_KINDS, Source.Kind.CONVERSATION):
        raise InvalidInput(
            f"The source {name!r} is a {source.get_kind_display()} source: its documents come from "
            f"{'its connector' if source.is_synced else 'conversations'}, not from files ingested or uploaded "
            "into it. Use another source name.",
            code="source_not_filled_by_hand",
        )
    return source
