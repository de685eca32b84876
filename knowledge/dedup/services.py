"""Near-duplicate writes: signatures, pairs and clusters of a tenant's current versions, and the admin's edits.

``near_duplicates_refresh`` runs after each ingestion (``knowledge.tasks.near_duplicates_task``,
queued with ``transaction.on_commit`` by ``documents_ingest``): it signs the current versions that
have no MinHash yet, finds their near-duplicates among the tenant's current versions (LSH, then
the exact Jaccard of the shingle sets against the threshold), classifies each new pair and
rebuilds the clusters as connected components of the ``duplicate`` pairs. Exact duplicates
(``DocumentVersion.duplicate_of``) have no chunks and are not signed: retrieval lists them as
``also_in`` of the version holding the chunks.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Q

from core.errors import InvalidInput
from core.models import Tenant
from knowledge.dedup.near import (
    NUM_PERM,
    candidate_pairs,
    clusters_of,
    jaccard,
    pair_classify,
    shingles,
    signature_bytes,
    signature_from_bytes,
    signatures,
)
from knowledge.dedup.selectors import tenant_duplicates_changed
from knowledge.ingestion_settings import jaccard_threshold
from knowledge.models import DocumentVersion
from knowledge.models.dedup import MinHashSignature, NearDuplicateCluster, NearDuplicateMember, NearDuplicatePair

logger = logging.getLogger(__name__)


def near_duplicate_threshold(tenant: Tenant) -> float:
    """The tenant's Jaccard threshold: its ``near_duplicate_threshold`` setting, else
    ``KB_NEAR_DUPLICATE_THRESHOLD``. A stored value outside 0.5-1 is ``InvalidInput``."""
    return jaccard_threshold(tenant)


def _freshness(version: DocumentVersion) -> tuple:
    """Sort key, freshest last: dated before undated, then ``published_at``, ingestion time, id."""
    published = version.published_at
    return (published is not None, published.timestamp() if published else 0.0, version.ingested_at, version.pk)


def _current(tenant: Tenant):
    """The tenant's current versions that hold chunks (exact duplicates excluded)."""
    return DocumentVersion.objects.for_tenant(tenant).filter(is_current=True, duplicate_of__isnull=True)


def near_duplicates_refresh(*, tenant_id: int, threshold: float | None = None, rebuild: bool = False) -> dict:
    """Find the near-duplicates of the tenant's new current versions and rebuild its clusters.

    ``threshold`` (Jaccard in [0, 1]) defaults to ``near_duplicate_threshold``. ``rebuild``
    forgets every ``duplicate`` pair and compares all current versions again (after a threshold
    change); ``not_duplicate`` marks are kept. Returns counts ``{"signed", "candidates", "pairs",
    "clusters", "seconds"}``. Idempotent; concurrent calls for one tenant serialize on the
    tenant's row when they write.
    """
    started = time.perf_counter()
    tenant = Tenant.objects.get(pk=tenant_id)
    threshold = near_duplicate_threshold(tenant) if threshold is None else threshold
    current = _current(tenant)
    unsigned = list(current.filter(minhash__isnull=True).values_list("id", "text"))
    shingle_cache: dict[int, set[bytes]] = {}
    if unsigned:
        for version_id, text in unsigned:
            shingle_cache[version_id] = shingles(text)
        rows = [
            MinHashSignature(
                tenant=tenant,
                version_id=version_id,
                hashvalues=signature_bytes(signature),
                num_perm=NUM_PERM,
                shingles=len(shingle_cache[version_id]),
            )
            for (version_id, _), signature in zip(
                unsigned, signatures(shingle_cache[v] for v, _ in unsigned), strict=True
            )
        ]
        MinHashSignature.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    if rebuild:
        NearDuplicatePair.objects.for_tenant(tenant).filter(status=NearDuplicatePair.Status.DUPLICATE).delete()
    stored = {
        version_id: signature_from_bytes(data)
        for version_id, data, shingle_count in MinHashSignature.objects.for_tenant(tenant)
        .filter(version__in=current, num_perm=NUM_PERM)
        .values_list("version_id", "hashvalues", "shingles")
        if shingle_count
    }
    new = list(stored) if rebuild else [v for v, _ in unsigned]
    candidates = candidate_pairs(stored, new=new, threshold=threshold) if new else set()
    known = _known_pairs(tenant, candidates)
    candidates = {pair for pair in candidates if pair not in known}
    created = _pairs_create(tenant, candidates, threshold=threshold, shingle_cache=shingle_cache)
    clusters = clusters_rebuild(tenant=tenant)
    summary = {
        "signed": len(unsigned),
        "candidates": len(candidates),
        "pairs": created,
        "clusters": clusters,
        "seconds": round(time.perf_counter() - started, 3),
    }
    logger.info("Near-duplicates of tenant %s: %s", tenant.slug, summary)
    return summary


def _known_pairs(tenant: Tenant, candidates: set[tuple[int, int]]) -> set[tuple[int, int]]:
    ids = {v for pair in candidates for v in pair}
    if not ids:
        return set()
    rows = (
        NearDuplicatePair.objects.for_tenant(tenant)
        .filter(older_id__in=ids, newer_id__in=ids)
        .values_list("older_id", "newer_id")
    )
    return {(min(a, b), max(a, b)) for a, b in rows}


def _pairs_create(
    tenant: Tenant, candidates: Iterable[tuple[int, int]], *, threshold: float, shingle_cache: dict[int, set[bytes]]
) -> int:
    """Check ``candidates`` with the exact Jaccard and store those at or above ``threshold``; how many."""
    candidates = sorted(candidates)
    ids = {v for pair in candidates for v in pair}
    if not ids:
        return 0
    versions = {
        v.pk: v
        for v in DocumentVersion.objects.for_tenant(tenant)
        .filter(pk__in=ids)
        .only("id", "document_id", "text", "published_at", "ingested_at")
    }
    for version_id, version in versions.items():
        if version_id not in shingle_cache:
            shingle_cache[version_id] = shingles(version.text)
    rejected = _rejected_document_pairs(tenant, {v.document_id for v in versions.values()})
    rows = []
    for a, b in candidates:
        if a not in versions or b not in versions or versions[a].document_id == versions[b].document_id:
            continue
        similarity = jaccard(shingle_cache[a], shingle_cache[b])
        if similarity < threshold:
            continue
        older, newer = sorted((versions[a], versions[b]), key=_freshness)
        classified = pair_classify(older.text, newer.text)
        documents = frozenset((older.document_id, newer.document_id))
        rows.append(
            NearDuplicatePair(
                tenant=tenant,
                older_id=older.pk,
                newer_id=newer.pk,
                jaccard=round(similarity, 6),
                kind=classified.kind,
                update=classified.update[:1000],
                status=NearDuplicatePair.Status.NOT_DUPLICATE
                if documents in rejected
                else NearDuplicatePair.Status.DUPLICATE,
            )
        )
    NearDuplicatePair.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    return len(rows)


def _rejected_document_pairs(tenant: Tenant, document_ids: set[int]) -> set[frozenset[int]]:
    """Document pairs an admin marked "not a duplicate" (on any of their versions)."""
    rows = (
        NearDuplicatePair.objects.for_tenant(tenant)
        .filter(
            status=NearDuplicatePair.Status.NOT_DUPLICATE,
            older__document_id__in=document_ids,
            newer__document_id__in=document_ids,
        )
        .values_list("older__document_id", "newer__document_id")
    )
    return {frozenset(row) for row in rows}


def clusters_rebuild(*, tenant: Tenant) -> int:
    """Rebuild the tenant's clusters from its ``duplicate`` pairs between current versions; how many.

    A cluster keeps its id when it keeps members (the one most of its members were in), so
    admin links stay valid; emptied clusters are deleted. Runs in one transaction under a lock
    on the tenant's row.
    """
    with transaction.atomic():
        Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
        current = _current(tenant)
        edges = (
            NearDuplicatePair.objects.for_tenant(tenant)
            .filter(status=NearDuplicatePair.Status.DUPLICATE, older__in=current, newer__in=current)
            .values_list("older_id", "newer_id")
        )
        components = sorted(clusters_of(edges), key=min)
        members = NearDuplicateMember.objects.for_tenant(tenant)
        previous = dict(members.values_list("version_id", "cluster_id"))
        members.delete()
        used: set[int] = set()
        rows = []
        for component in components:
            votes = Counter(previous[v] for v in component if v in previous and previous[v] not in used)
            if votes:
                cluster_id = votes.most_common(1)[0][0]
            else:
                cluster_id = NearDuplicateCluster.objects.create(tenant=tenant).pk
            used.add(cluster_id)
            rows.extend(NearDuplicateMember(tenant=tenant, cluster_id=cluster_id, version_id=v) for v in component)
        NearDuplicateMember.objects.bulk_create(rows, batch_size=1000)
        NearDuplicateCluster.objects.for_tenant(tenant).exclude(pk__in=used).delete()
        NearDuplicateCluster.objects.filter(pk__in=used).update(updated_at=_now())
        tenant_duplicates_changed(tenant=tenant)
    return len(components)


def _now():
    from django.utils import timezone

    return timezone.now()


def near_duplicate_pairs_reject(*, tenant: Tenant, pair_ids: Iterable[int]) -> int:
    """Mark pairs "not a duplicate" (kept for later versions of the same documents); rebuild clusters.

    Returns how many pairs changed. Pairs of other tenants are ignored.
    """
    changed = (
        NearDuplicatePair.objects.for_tenant(tenant)
        .filter(pk__in=list(pair_ids))
        .update(status=NearDuplicatePair.Status.NOT_DUPLICATE)
    )
    clusters_rebuild(tenant=tenant)
    return changed


def near_duplicate_pairs_restore(*, tenant: Tenant, pair_ids: Iterable[int]) -> int:
    """Undo "not a duplicate" on pairs; rebuild clusters. Returns how many pairs changed."""
    changed = (
        NearDuplicatePair.objects.for_tenant(tenant)
        .filter(pk__in=list(pair_ids))
        .update(status=NearDuplicatePair.Status.DUPLICATE)
    )
    clusters_rebuild(tenant=tenant)
    return changed


def _pairs_between(tenant: Tenant, left: set[int], right: set[int]):
    return NearDuplicatePair.objects.for_tenant(tenant).filter(
        Q(older_id__in=left, newer_id__in=right) | Q(older_id__in=right, newer_id__in=left)
    )


def near_duplicate_cluster_split(*, tenant: Tenant, member_ids: Iterable[int]) -> int:
    """Split the chosen members off their cluster: every pair between them and the cluster's other
    members becomes "not a duplicate" (so the split survives recomputation); clusters are rebuilt.

    The members must all be in one cluster of ``tenant`` and leave at least one member behind,
    else ``InvalidInput``. Returns how many pairs changed.
    """
    chosen = list(NearDuplicateMember.objects.for_tenant(tenant).filter(pk__in=list(member_ids)))
    if not chosen:
        raise InvalidInput("Choose members of a cluster to split off.")
    clusters = {m.cluster_id for m in chosen}
    if len(clusters) != 1:
        raise InvalidInput("The members to split off must all be in one cluster.")
    cluster_versions = set(
        NearDuplicateMember.objects.for_tenant(tenant)
        .filter(cluster_id=clusters.pop())
        .values_list("version_id", flat=True)
    )
    left = {m.version_id for m in chosen}
    right = cluster_versions - left
    if not right:
        raise InvalidInput("Splitting off every member leaves nothing: leave at least one member.")
    changed = _pairs_between(tenant, left, right).update(status=NearDuplicatePair.Status.NOT_DUPLICATE)
    clusters_rebuild(tenant=tenant)
    return changed


def near_duplicate_members_detach(*, tenant: Tenant, member_ids: Iterable[int]) -> int:
    """Mark each chosen member "not a duplicate" of the rest of its cluster (it leaves the
    cluster); clusters are rebuilt. Returns how many pairs changed."""
    changed = 0
    members = list(NearDuplicateMember.objects.for_tenant(tenant).filter(pk__in=list(member_ids)))
    for member in members:
        others = set(
            NearDuplicateMember.objects.for_tenant(tenant)
            .filter(cluster_id=member.cluster_id)
            .exclude(pk=member.pk)
            .values_list("version_id", flat=True)
        )
        changed += _pairs_between(tenant, {member.version_id}, others).update(
            status=NearDuplicatePair.Status.NOT_DUPLICATE
        )
    clusters_rebuild(tenant=tenant)
    return changed
