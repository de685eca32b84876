"""Reads of tenant data. Each takes the tenant explicitly and scopes through ``for_tenant``."""

from __future__ import annotations

from django.db.models import Count, IntegerField, Max, OuterRef, Prefetch, QuerySet, Subquery
from django.db.models.functions import Coalesce

from core.errors import InvalidInput, NotFound, PermissionDenied
from core.memberships import membership_list
from core.models import Membership, Tenant
from core.rls import rls_request_bind
from knowledge.access import access_scope_get, documents_visible, sources_visible
from knowledge.models import Chunk, Document, DocumentVersion, IngestionJob, Source, SyncRun


def membership_for_user(user) -> Membership:
    """The user's only membership, for code without a request (commands, tasks); a request
    resolves its tenant with ``core.memberships.membership_for_request``.
    ``PermissionDenied`` if the user has no tenant, ``InvalidInput`` if they have several.

    The memberships are read by ``core.memberships.membership_list``; resolving a tenant binds
    the row-level-security scope to it (``core.rls.rls_request_bind``).
    """
    memberships = membership_list(user=user)
    if not memberships:
        raise PermissionDenied("Your account does not belong to any tenant.")
    if len(memberships) > 1:
        raise InvalidInput("Your account belongs to several tenants; name one.", code="tenant_required")
    rls_request_bind(tenant_id=memberships[0].tenant_id, user_id=memberships[0].user_id)
    return memberships[0]


def document_list(
    *, tenant: Tenant, source_name: str | None = None, user=None, deleted: bool = False
) -> QuerySet[Document]:
    """The tenant's documents ``user`` may see (``knowledge.access``; all without a user), newest
    first, with their source and ``current_version`` (number). Documents deleted at their source
    are left out, or only they are listed with ``deleted``."""
    current = DocumentVersion.objects.filter(document=OuterRef("pk"), is_current=True).values("number")[:1]
    documents = (
        documents_visible(Document.objects.for_tenant(tenant), access_scope_get(tenant=tenant, user=user))
        .select_related("source")
        .annotate(current_version=Subquery(current))
        .order_by("-updated_at", "-id")
    )
    documents = documents.filter(deleted_at__isnull=not deleted)
    if source_name:
        documents = documents.filter(source__name=source_name)
    return documents


def document_get(*, tenant: Tenant, document_id: int, user=None) -> Document:
    """One of the tenant's documents with its versions (newest first); ``NotFound`` otherwise,
    also when ``user`` may not see it (the same error: an id reveals nothing)."""
    versions = DocumentVersion.objects.annotate(chunk_count=Count("chunks")).order_by("-number")
    document = (
        documents_visible(Document.objects.for_tenant(tenant), access_scope_get(tenant=tenant, user=user))
        .select_related("source")
        .prefetch_related(Prefetch("versions", queryset=versions))
        .filter(pk=document_id)
        .first()
    )
    if document is None:
        raise NotFound(f"Document {document_id} not found.")
    return document


def ingestion_job_get(*, tenant: Tenant, job_id: int) -> IngestionJob:
    """One of the tenant's ingestion jobs; ``NotFound`` otherwise."""
    job = IngestionJob.objects.for_tenant(tenant).select_related("source").filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"Job {job_id} not found.")
    return job


def chunk_list_for_version(*, tenant: Tenant, version_id: int) -> QuerySet[Chunk]:
    """The tenant's chunks of one version in reading order (empty for another tenant's version)."""
    return Chunk.objects.for_tenant(tenant).filter(version_id=version_id).order_by("ordinal").defer("embedding")


def source_ids_for_names(*, tenant: Tenant, names: list[str], user=None) -> list[int] | None:
    """Ids of the tenant's sources called ``names``; ``None`` (no filter) when none are given.

    An unknown name raises ``InvalidInput`` rather than being ignored: an empty id list would
    mean "every source". A restricted source ``user`` may not see is unknown too.
    """
    if not names:
        return None
    sources = sources_visible(Source.objects.for_tenant(tenant), access_scope_get(tenant=tenant, user=user))
    found = dict(sources.filter(name__in=names).values_list("name", "id"))
    missing = sorted(set(names) - set(found))
    if missing:
        raise InvalidInput(f"Unknown source(s): {', '.join(missing)}.", code="unknown_source")
    return list(found.values())


def _per_source(queryset, path: str, aggregate) -> Subquery:
    """``aggregate`` over the rows of ``queryset`` whose ``path`` is the outer source."""
    return Subquery(
        queryset.filter(**{path: OuterRef("pk")}).order_by().values(path).annotate(value=aggregate).values("value")[:1]
    )


def _live_document_count(scope) -> Coalesce:
    """Per source: its live (not deleted) documents within ``scope`` (an access scope)."""
    live = documents_visible(Document.objects.filter(deleted_at__isnull=True), scope)
    return Coalesce(_per_source(live, "source", Count("id")), 0, output_field=IntegerField())


def _newest_sync_run() -> Prefetch:
    """Per source: ``last_runs``, a list holding its newest ``SyncRun``, or empty if it never ran."""
    return Prefetch("sync_runs", queryset=SyncRun.objects.order_by("-created_at", "-id")[:1], to_attr="last_runs")


def source_overview(*, tenant: Tenant, user=None) -> QuerySet[Source]:
    """The tenant's sources ``user`` may see, by name, each with ``document_count``, ``chunk_count`` (of current
    versions), ``newest_published`` (latest ``published_at`` of a current version; ``None`` if
    undated) and ``last_ingested`` (when a current version was last stored), all counted over
    the documents ``user`` may see."""
    scope = access_scope_get(tenant=tenant, user=user)
    current = documents_visible(DocumentVersion.objects.filter(is_current=True), scope, path="document__")
    chunks = documents_visible(Chunk.objects.filter(version__is_current=True), scope, path="version__document__")
    return (
        sources_visible(Source.objects.for_tenant(tenant), scope)
        .annotate(
            document_count=_live_document_count(scope),
            chunk_count=Coalesce(
                _per_source(chunks, "version__document__source", Count("id")),
                0,
                output_field=IntegerField(),
            ),
            newest_published=_per_source(current, "document__source", Max("published_at")),
            last_ingested=_per_source(current, "document__source", Max("ingested_at")),
        )
        .order_by("name")
    )


def upload_source_list(*, tenant: Tenant, user=None) -> QuerySet[Source]:
    """The tenant's upload sources ``user`` may see, by name: where the portal's upload form may
    add files (sources filled by hand elsewhere, or kept in sync by a connector, are not offered)."""
    sources = sources_visible(
        Source.objects.for_tenant(tenant).filter(kind=Source.Kind.UPLOAD), access_scope_get(tenant=tenant, user=user)
    )
    return sources.order_by("name")


def ingestion_job_list(*, tenant: Tenant, job_ids: list[int], user=None) -> list[IngestionJob]:
    """The tenant's ingestion jobs among ``job_ids`` whose source ``user`` may see, in the order
    of ``job_ids``; other ids (another tenant's, unknown, hidden) are left out."""
    if not job_ids:
        return []
    visible = sources_visible(Source.objects.for_tenant(tenant), access_scope_get(tenant=tenant, user=user))
    jobs = IngestionJob.objects.for_tenant(tenant).filter(pk__in=job_ids, source__in=visible).select_related("source")
    by_id = {job.pk: job for job in jobs}
    return [by_id[job_id] for job_id in dict.fromkeys(job_ids) if job_id in by_id]


def source_overview_with_last_sync(*, tenant: Tenant, user=None) -> list[Source]:
    """``source_overview``, each source also carrying ``last_sync``: its most recent ``SyncRun``
    (pending, running or finished), or ``None`` if it was never synced (the sources filled by hand)."""
    sources = list(source_overview(tenant=tenant, user=user).prefetch_related(_newest_sync_run()))
    for source in sources:
        source.last_sync = source.last_runs[0] if source.last_runs else None
    return sources


# ---- sources and their sync runs (the sources API) ------------------------------------------


def _sources_with_counts(*, tenant: Tenant, user=None) -> QuerySet[Source]:
    """The tenant's sources ``user`` may see, each with ``document_count`` (its live documents
    ``user`` may see) and ``last_runs`` (a list holding its newest sync run, or empty)."""
    scope = access_scope_get(tenant=tenant, user=user)
    return (
        sources_visible(Source.objects.for_tenant(tenant), scope)
        .annotate(document_count=_live_document_count(scope))
        .prefetch_related(_newest_sync_run())
    )


def source_list(*, tenant: Tenant, user=None) -> QuerySet[Source]:
    """The tenant's sources ``user`` may see (``knowledge.access``; all without a user), by name,
    each with ``document_count`` (live documents ``user`` may see) and ``last_runs`` (its newest
    sync run in a list, empty if it never ran)."""
    return _sources_with_counts(tenant=tenant, user=user).order_by("name", "id")


def source_get(*, tenant: Tenant, source_id: int, user=None) -> Source:
    """One of the tenant's sources, annotated as in ``source_list``; ``NotFound`` otherwise, also
    when ``user`` may not see it (the same error: an id reveals nothing)."""
    source = _sources_with_counts(tenant=tenant, user=user).filter(pk=source_id).first()
    if source is None:
        raise NotFound(f"Source {source_id} not found.")
    return source


def sync_run_list(*, tenant: Tenant, source_id: int) -> QuerySet[SyncRun]:
    """The sync runs of the tenant's source ``source_id``, newest first (empty for another tenant's)."""
    return SyncRun.objects.for_tenant(tenant).filter(source_id=source_id).order_by("-created_at", "-id")


def source_sync_run_get(*, tenant: Tenant, source_id: int, run_id: int) -> SyncRun:
    """Sync run ``run_id`` of the tenant's source ``source_id``; ``NotFound`` otherwise (also for a
    run of another source)."""
    run = sync_run_list(tenant=tenant, source_id=source_id).filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"Sync run {run_id} not found.")
    return run


def sources_syncing(*, tenant: Tenant, user=None) -> list[str]:
    """Names (sorted) of ``tenant``'s sources, of those ``user`` may see, with a sync run pending or
    running: what an answer made now may not hold yet. Empty when everything is in."""
    scope = access_scope_get(tenant=tenant, user=user)
    return sorted(
        sources_visible(Source.objects.for_tenant(tenant), scope)
        .filter(sync_runs__status__in=[SyncRun.Status.PENDING, SyncRun.Status.RUNNING])
        .values_list("name", flat=True)
        .distinct()
    )


def sync_run_newest_by_source(*, tenant: Tenant, source_ids: list[int], scopes) -> dict[int, SyncRun]:
    """Each of ``source_ids``' newest run (any status) whose ``scope`` is one of ``scopes``, as
    ``{source id: SyncRun}`` (sources without one left out): one query, whatever the number of sources."""
    if not source_ids:
        return {}
    runs = (
        SyncRun.objects.for_tenant(tenant)
        .filter(source_id__in=source_ids, scope__in=list(scopes))
        .order_by("source_id", "-created_at")
        .distinct("source_id")
    )
    return {run.source_id: run for run in runs}
