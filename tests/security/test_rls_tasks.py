"""Celery tasks run under row-level security for the one tenant they work for (core.rls, docs/rls.md).

A task starts as the owner (it must read which tenant its id belongs to), then binds that tenant
with ``tenant_context``: whatever its service reads or writes without a tenant filter stays in
that tenant. Tasks run here through Celery's ``apply()``, with its prerun/postrun signals, as a
worker runs them.
"""

from types import SimpleNamespace

import pytest

from core.tenancy import TenantScopedQuerySet
from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document, DocumentVersion, IngestionJob, Source
from knowledge.models.dedup import MinHashSignature, NearDuplicatePair
from knowledge.services import documents_ingest
from knowledge.tasks import chunks_embed_task, ingestion_job_task, near_duplicates_task
from quality.models import ConfigChange, JudgmentGeneration, JudgmentList
from quality.tasks import config_change_task, judgment_generation_task, judgment_list_evaluate_task

NOTE = (
    "Tyre repair notes\n\nTo repair a bicycle tyre puncture, take the wheel off, find the hole in the inner tube, "
    "roughen the rubber around it, spread a thin layer of glue, wait until it is tacky, press the patch on firmly, "
    "refit the tube and tyre, and inflate it to the pressure printed on the side of the tyre."
)


def visible_tenants() -> set[int]:
    """The tenants whose documents a query WITHOUT a tenant filter returns here."""
    return set(Document.objects.values_list("tenant_id", flat=True))


def spy(seen: list, result):
    def service(**kwargs):
        seen.append(visible_tenants())
        return result

    return service


def _objects(corpus):
    source = Source.objects.for_tenant(corpus).first()
    return {
        "job": IngestionJob.objects.create(tenant=corpus, source=source, file_name="a.md", stored_path="/nonexistent"),
        "change": ConfigChange.objects.create(tenant=corpus),
        "generation": JudgmentGeneration.objects.create(tenant=corpus, sample=1),
        "list": JudgmentList.objects.create(tenant=corpus, name="checks"),
    }


# (task, the service it calls as patched in its module, which object it takes, what the service returns)
TASKS = [
    (ingestion_job_task, "knowledge.tasks.ingestion_job_run", "job", SimpleNamespace(status="done")),
    (near_duplicates_task, "knowledge.tasks.near_duplicates_refresh", "tenant", {}),
    (chunks_embed_task, "knowledge.tasks.chunks_embed", "tenant", {}),
    (config_change_task, "quality.tasks.config_change_evaluate", "change", SimpleNamespace(status="accepted")),
    (judgment_generation_task, "quality.tasks.judgment_list_generate", "generation", SimpleNamespace(status="done")),
    (judgment_list_evaluate_task, "quality.tasks.evaluation_run", "list", SimpleNamespace(pk=1)),
]


@pytest.mark.parametrize(("task", "service", "takes", "result"), TASKS, ids=[t[0].name.split(".")[-1] for t in TASKS])
def test_a_tenants_task_sees_only_that_tenants_rows_even_without_a_tenant_filter(
    corpus, other_tenant_corpus, monkeypatch, task, service, takes, result
):
    assert visible_tenants() == {corpus.pk, other_tenant_corpus.pk}  # the owner (test setup) sees both
    objects = _objects(corpus)
    seen: list = []
    monkeypatch.setattr(service, spy(seen, result))
    argument = corpus.pk if takes == "tenant" else objects[takes].pk
    outcome = task.apply(args=[argument])
    assert outcome.successful(), outcome.traceback
    assert seen == [{corpus.pk}]


def test_a_task_for_a_missing_object_does_nothing(corpus, monkeypatch):
    called = []
    monkeypatch.setattr("knowledge.tasks.ingestion_job_run", lambda **kw: called.append(kw))
    assert ingestion_job_task.apply(args=[987654321]).get() == "missing"
    assert called == []


@pytest.fixture
def twins(corpus, other_tenant_corpus):
    """The same note in both tenants: near-duplicates of each other, were tenants not kept apart."""
    for tenant in (corpus, other_tenant_corpus):
        source = Source.objects.for_tenant(tenant).first()
        documents_ingest(
            tenant=tenant,
            source=source,
            documents=[ReadDocument(external_id="notes/tyre", title="Tyre repair notes", text=NOTE)],
        )
    return corpus, other_tenant_corpus


def cross_tenant_rows(tenant, other) -> dict:
    """What the near-duplicate task stored for ``tenant`` about ``other``'s versions."""
    others = DocumentVersion.objects.filter(document__tenant=other)
    return {
        "signatures": MinHashSignature.objects.filter(tenant=tenant, version__in=others).count(),
        "pairs": NearDuplicatePair.objects.filter(tenant=tenant).filter(older__in=others).count()
        + NearDuplicatePair.objects.filter(tenant=tenant, newer__in=others).count(),
    }


@pytest.fixture
def tenant_filter_removed(monkeypatch):
    """A deliberately broken build: ``for_tenant`` keeps every tenant's rows."""
    monkeypatch.setattr(TenantScopedQuerySet, "for_tenant", lambda self, tenant: self)


def test_the_near_duplicate_task_with_the_tenant_filter_removed_never_touches_another_tenant(
    twins, tenant_filter_removed
):
    mine, other = twins
    outcome = near_duplicates_task.apply(args=[mine.pk])
    assert outcome.successful(), outcome.traceback
    assert outcome.get()["signed"] > 0  # it did its work, on its own tenant's versions
    assert cross_tenant_rows(mine, other) == {"signatures": 0, "pairs": 0}
    assert not MinHashSignature.objects.filter(tenant=other).exists()


def test_the_control_without_row_level_security_does_leak(twins, tenant_filter_removed, settings):
    """The check above can fail: with RLS off the broken build signs the other tenant's versions."""
    settings.KB_RLS = False
    mine, other = twins
    near_duplicates_task.apply(args=[mine.pk]).get()
    assert cross_tenant_rows(mine, other)["signatures"] > 0
