"""API fixtures: token-authenticated clients for members of the ``corpus`` tenant and of another."""

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.models import Membership
from knowledge.models import Document, IngestionJob
from tests.factories import MembershipFactory


def client_for(user) -> APIClient:
    """An API client sending ``Authorization: Token <key>`` for ``user``."""
    token, _ = Token.objects.get_or_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path):
    """Uploads are written under a temporary KB_DATA_DIR (``tmp_path/data``), never the real one;
    the rest of ``tmp_path`` is outside it, where folders may be granted to a tenant."""
    settings.KB_DATA_DIR = tmp_path / "data"
    settings.KB_DATA_DIR.mkdir(exist_ok=True)
    return settings.KB_DATA_DIR / "uploads"


@pytest.fixture
def member_client(member):
    return client_for(member)


@pytest.fixture
def admin_client(admin_member):
    return client_for(admin_member)


@pytest.fixture
def editor_client(tenant):
    return client_for(MembershipFactory(tenant=tenant, role=Membership.Role.EDITOR).user)


@pytest.fixture
def other_admin_client(other_tenant_corpus):
    """An admin of the other tenant, with a job of its own."""
    membership = MembershipFactory(tenant=other_tenant_corpus, role=Membership.Role.ADMIN)
    return client_for(membership.user)


def stored_counts(tenant) -> tuple[int, int]:
    """(documents, ingestion jobs) of ``tenant``."""
    return (
        Document.objects.for_tenant(tenant).count(),
        IngestionJob.objects.for_tenant(tenant).count(),
    )
