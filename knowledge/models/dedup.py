"""Near-duplicate records: MinHash signatures, pairs and clusters of document versions.

Imported by ``knowledge.models`` (so they belong to the ``knowledge`` app; migration
``0008_near_duplicates``). Pairs are the source of truth: a cluster is a connected component of
the pairs marked ``duplicate`` between current versions (``knowledge.dedup.services``), so an
admin's "not a duplicate" or "split" (which marks pairs ``not_duplicate``) survives every later
recomputation.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Greatest, Least

from core.tenancy import TenantScopedQuerySet


class MinHashSignature(models.Model):
    """The MinHash signature of one version's word shingles (``knowledge.dedup.near``).

    ``hashvalues`` holds ``num_perm`` little-endian unsigned hash values (datasketch's width); ``shingles`` is the size of the
    shingle set (0 for a text without words).
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    version = models.OneToOneField("knowledge.DocumentVersion", on_delete=models.CASCADE, related_name="minhash")
    hashvalues = models.BinaryField()
    num_perm = models.PositiveIntegerField()
    shingles = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"MinHash of version {self.version_id}"


class NearDuplicateCluster(models.Model):
    """Documents whose current versions are near-duplicates of one another (2+ members).

    Retrieval collapses a cluster to its freshest member (``published_at``, then ingestion time).
    """

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="near_duplicate_clusters")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"Near-duplicate cluster #{self.pk}"


class NearDuplicateMember(models.Model):
    """A current version in a cluster; a version is in at most one cluster."""

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    cluster = models.ForeignKey(NearDuplicateCluster, on_delete=models.CASCADE, related_name="members")
    version = models.OneToOneField(
        "knowledge.DocumentVersion", on_delete=models.CASCADE, related_name="near_duplicate_member"
    )

    objects = TenantScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.version} in cluster #{self.cluster_id}"


class NearDuplicatePair(models.Model):
    """Two versions (of different documents) whose shingle sets' Jaccard similarity passed the threshold.

    ``older``/``newer`` by freshness when found (``published_at``, then ingestion time);
    ``kind`` is meaningless (equal once case, whitespace, punctuation and markup are normalized)
    or meaningful, and ``update`` the word-level summary of a meaningful change, older -> newer.
    ``status`` ``not_duplicate`` (set in the admin) keeps the pair out of clusters, also for
    later versions of the same two documents.
    """

    class Kind(models.TextChoices):
        MEANINGLESS = "meaningless", "Meaningless (formatting only)"
        MEANINGFUL = "meaningful", "Meaningful (a real edit)"

    class Status(models.TextChoices):
        DUPLICATE = "duplicate", "Near-duplicate"
        NOT_DUPLICATE = "not_duplicate", "Not a duplicate"

    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, related_name="+")
    older = models.ForeignKey("knowledge.DocumentVersion", on_delete=models.CASCADE, related_name="+")
    newer = models.ForeignKey("knowledge.DocumentVersion", on_delete=models.CASCADE, related_name="+")
    jaccard = models.FloatField(help_text="Exact Jaccard similarity of the two versions' word shingles.")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    update = models.CharField(max_length=1000, blank=True, help_text="What changed, older -> newer.")
    status = models.CharField(max_length=14, choices=Status.choices, default=Status.DUPLICATE)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(Least("older", "newer"), Greatest("older", "newer"), name="neardup_pair_unique"),
            models.CheckConstraint(condition=~Q(older=F("newer")), name="neardup_pair_two_versions"),
            models.CheckConstraint(condition=Q(jaccard__gte=0) & Q(jaccard__lte=1), name="neardup_jaccard_in_0_1"),
        ]

    def __str__(self) -> str:
        return f"{self.older} ~ {self.newer} ({self.jaccard:.2f})"
