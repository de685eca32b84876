"""What the benchmark scripts share: a progress line on stderr, the percentile, a dataset's benchmark
tenant and a free TCP port.

Scripts run as ``python benchmarks/<name>.py`` have this folder on ``sys.path`` and import
``from _toolkit import log, percentile, tenant_for, free_port``. Importing this module needs no
Django setup (``tenant_for`` does, when called), so the peers' runner, which runs in its own
virtual environment, imports it too.

``percentile`` is ``quality.metrics.percentile``, the one evaluation reports use: linear
interpolation between the closest ranks (``numpy.percentile``'s default), so a benchmark's p95
and a report's p95 of the same timings are the same number.
"""

from __future__ import annotations

import socket
import sys
import time

from _setup import ROOT

if str(ROOT) not in sys.path:  # last: the project's packages never shadow an installed one here
    sys.path.append(str(ROOT))

from quality.metrics import percentile  # noqa: E402  (the project root is on sys.path only now)

__all__ = ["free_port", "log", "percentile", "tenant_for"]


def log(message: str) -> None:
    """Print ``message`` on stderr at once; stdout is left to the benchmark's JSON."""
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for a server the benchmark starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tenant_for(
    dataset,
    *,
    name: str,
    slug: str | None = None,
    retrieval_config: dict | None = None,
    origin: str | None = None,
):
    """The benchmark tenant of ``dataset`` (a ``quality.importers.Dataset``) with its documents
    ingested and its judgment list: ``(tenant, judgment list, ingestion report)``.

    The tenant is ``slug`` (default ``bench-<name>``), made on first use and reused after: documents
    that did not change are not embedded again. ``retrieval_config``, when given, is saved on the
    tenant before ingesting. The documents go into the dataset source ``name`` with the dataset's
    splitter; the judgment list ``name`` is replaced, recorded as coming from ``origin`` (default
    ``name``). Needs ``django_setup()`` first.
    """
    from core.models import Tenant
    from core.services import tenant_create
    from knowledge.ingestion.splitters import get_splitter
    from knowledge.models import Source
    from knowledge.services import documents_ingest, source_get_or_create
    from quality.models import JudgmentList
    from quality.services import judgment_list_import

    slug = slug or f"bench-{name}"
    tenant = Tenant.objects.filter(slug=slug).first() or tenant_create(slug=slug)
    if retrieval_config is not None:
        tenant.retrieval_config = retrieval_config
        tenant.save(update_fields=["retrieval_config"])
    source = source_get_or_create(tenant=tenant, name=name, kind=Source.Kind.DATASET)
    started = time.perf_counter()
    report = documents_ingest(
        tenant=tenant,
        source=source,
        documents=dataset.documents,
        splitter=get_splitter(dataset.splitter),
        progress=True,
    )
    log(f"{name}: {report.counts()} in {time.perf_counter() - started:.0f}s")
    JudgmentList.objects.filter(tenant=tenant, name=name).delete()
    judgment_list = judgment_list_import(tenant=tenant, name=name, origin=origin or name, judgments=dataset.judgments)
    return tenant, judgment_list, report
