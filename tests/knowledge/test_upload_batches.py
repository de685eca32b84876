"""Several files uploaded at once (``knowledge.services.upload_batches``); the portal's form is
tested in ``tests/portal/test_uploads.py``."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from core.errors import InvalidInput, PermissionDenied
from core.models import Membership
from knowledge.models import IngestionJob, Source
from knowledge.services.upload_batches import MAX_FILES_PER_UPLOAD, upload_batch_ingest
from tests.factories import MembershipFactory

NOTE = b"# Note\n\nA short note.\n"


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path):
    settings.KB_DATA_DIR = tmp_path


def notes(count: int) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(f"note-{i}.md", NOTE) for i in range(count)]


def test_a_member_below_editor_may_not_upload(tenant, member):
    with pytest.raises(PermissionDenied):
        upload_batch_ingest(tenant=tenant, user=member, source_name="notes", files=notes(1))
    assert not Source.objects.exists()


def test_too_many_files_at_once_store_nothing(tenant):
    editor = MembershipFactory(tenant=tenant, role=Membership.Role.EDITOR).user
    with pytest.raises(InvalidInput, match=f"at most {MAX_FILES_PER_UPLOAD} files"):
        upload_batch_ingest(tenant=tenant, user=editor, source_name="notes", files=notes(MAX_FILES_PER_UPLOAD + 1))
    assert not IngestionJob.objects.exists() and not Source.objects.exists()


def test_each_file_gets_its_outcome_in_the_order_given(tenant):
    editor = MembershipFactory(tenant=tenant, role=Membership.Role.EDITOR).user
    files = [SimpleUploadedFile("a.md", NOTE), SimpleUploadedFile("b.xyz", NOTE), SimpleUploadedFile("c.md", NOTE)]
    outcomes = upload_batch_ingest(tenant=tenant, user=editor, source_name=" notes ", files=files)
    assert [(o.file_name, o.job is not None) for o in outcomes] == [("a.md", True), ("b.xyz", False), ("c.md", True)]
    assert outcomes[1].error.startswith("b.xyz: unsupported file type .xyz")
    assert {o.job.source.name for o in outcomes if o.job} == {"notes"}  # the name stripped
