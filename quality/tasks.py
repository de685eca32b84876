"""Celery tasks of the quality app: thin wrappers that take ids and call a service.

Each works for one tenant: it reads its object's tenant (as the owner) and runs the service inside
``core.rls.tenant_context`` of that tenant (row-level security, ``docs/rls.md``).
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from core.rls import tenant_context, tenant_id_of
from quality import task_names
from quality.models import ConfigChange, JudgmentGeneration, JudgmentList
from quality.services.gate import config_change_evaluate
from quality.services.generation import judgment_list_generate
from quality.services.runs import evaluation_run


@shared_task(
    name=task_names.CONFIG_CHANGE,
    acks_late=True,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
    soft_time_limit=max(settings.CELERY_TASK_TIME_LIMIT - 30, 10),
)
def config_change_task(change_id: int) -> str:
    """Evaluate retrieval-settings change ``change_id`` through the quality gate; returns its status.

    No retries: the service records any failure on the change, and a change that is no longer
    pending is never evaluated twice.
    """
    with tenant_context(_tenant_of(ConfigChange, change_id)):
        return config_change_evaluate(change_id=change_id).status


@shared_task(
    name=task_names.JUDGMENT_GENERATION,
    acks_late=True,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
    soft_time_limit=max(settings.CELERY_TASK_TIME_LIMIT - 30, 10),
)
def judgment_generation_task(generation_id: int) -> str:
    """Generate the judgment list of ``JudgmentGeneration`` ``generation_id``; returns its status.

    No retries: the service records any failure on the generation, and one that is no longer
    pending is never run twice (starting the same request again restarts a failed one).
    """
    with tenant_context(_tenant_of(JudgmentGeneration, generation_id)):
        return judgment_list_generate(generation_id=generation_id).status


@shared_task(
    name=task_names.JUDGMENT_LIST_EVALUATE,
    acks_late=True,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
    soft_time_limit=max(settings.CELERY_TASK_TIME_LIMIT - 30, 10),
)
def judgment_list_evaluate_task(judgment_list_id: int, pipeline: str | None = None) -> int:
    """Run judgment list ``judgment_list_id`` through ``pipeline`` (default: its tenant's); returns the run id.

    The ``EvaluationRun`` is stored under the list's name as its dataset. No retries: a failed
    evaluation stores nothing, and running it again is harmless.
    """
    with tenant_context(_tenant_of(JudgmentList, judgment_list_id)):
        judgment_list = JudgmentList.objects.select_related("tenant").get(pk=judgment_list_id)
        return evaluation_run(judgment_list=judgment_list, pipeline=pipeline, dataset=judgment_list.name).pk


def _tenant_of(model, pk: int) -> int:
    """The tenant of ``model`` row ``pk``; ``DoesNotExist`` (as the services' own lookup raises) if it is gone."""
    tenant_id = tenant_id_of(model, pk)
    if tenant_id is None:
        raise model.DoesNotExist(f"No {model.__name__} {pk}.")
    return tenant_id
