"""Deleting a tenant takes its files in the data directory with it, and no other tenant's."""

from django.test import TestCase

from knowledge.services.tenants import tenant_delete
from tests.factories import TenantFactory


def test_deleting_a_tenant_removes_its_uploads_and_git_caches_and_leaves_the_others(settings, tmp_path, db):
    settings.KB_DATA_DIR = tmp_path
    gone, kept = TenantFactory(slug="gone"), TenantFactory(slug="kept")
    for tenant in (gone, kept):
        (tmp_path / "uploads" / tenant.slug / "0a").mkdir(parents=True)
        (tmp_path / "uploads" / tenant.slug / "0a" / "minutes.md").write_text("# Minutes\n")
        (tmp_path / "git" / str(tenant.pk) / "3").mkdir(parents=True)

    with TestCase.captureOnCommitCallbacks(execute=True):
        tenant_delete(tenant=gone)

    assert not (tmp_path / "uploads" / "gone").exists() and not (tmp_path / "git" / str(gone.pk)).exists()
    assert (tmp_path / "uploads" / "kept" / "0a" / "minutes.md").exists()
    assert (tmp_path / "git" / str(kept.pk) / "3").exists()
