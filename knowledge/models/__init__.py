"""Sources of a tenant (``core.Tenant``), their documents, document versions and chunks.

Every table holding tenant data reaches its tenant in one hop, and every read goes through
``TenantScopedQuerySet.for_tenant`` or the selectors, which call it.

The models live in one module per concept; each is imported here, so every model belongs to the
``knowledge`` app and ``from knowledge.models import X`` reaches it:

- ``sources``: ``Source`` and the ``FolderGrant`` its folder sources read under;
- ``documents``: ``Document``, ``DocumentVersion`` and ``Chunk`` (with ``SUMMARY_ORDINAL``);
- ``runs``: ``IngestionJob`` and ``SyncRun``, the runs that fill sources;
- ``bm25``: ``TermStatistic``, ``Posting`` and ``CorpusStatistic``, kept by triggers;
- ``dedup``: near-duplicate signatures, pairs and clusters;
- ``enrichment``: chunk enrichment and its BM25 index;
- ``access``: ``AccessGroup`` and ``AccessRule``;
- ``permissions``: who may see service sources' documents at the source.

A new module of models adds one import line below.
"""

# Every import below re-exports a module's names as this package's own.
# ruff: noqa: F401

from knowledge.models.access import AccessGroup, AccessRule
from knowledge.models.bm25 import CorpusStatistic, Posting, TermStatistic
from knowledge.models.dedup import MinHashSignature, NearDuplicateCluster, NearDuplicateMember, NearDuplicatePair
from knowledge.models.documents import SUMMARY_ORDINAL, Chunk, Document, DocumentVersion, VersionQuerySet
from knowledge.models.enrichment import (
    ChunkEnrichment,
    EnrichmentCorpusStatistic,
    EnrichmentPosting,
    EnrichmentTermStatistic,
)
from knowledge.models.permissions import DocumentPermission, SourcePermissionGroup
from knowledge.models.quotas import LLMUsage, TenantQuota
from knowledge.models.runs import IngestionJob, SyncRun
from knowledge.models.sources import FolderGrant, Source
