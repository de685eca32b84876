"""Creating tenants: the embedder a tenant names is checked by the service and held by the database."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction

from core.errors import InvalidInput
from core.models import Tenant
from core.services import tenant_create

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("embedder", ["local", "mpnet", "openai:text-embedding-3-small"])
def test_a_tenant_may_name_a_local_model_or_an_openai_compatible_one(embedder):
    assert tenant_create(slug=f"t-{embedder.replace(':', '-')}", embedder=embedder).embedder == embedder


@pytest.mark.parametrize("embedder", ["minilm", "openai:", "Local", " "])
def test_an_unknown_embedder_is_refused_naming_the_valid_forms_and_no_tenant_is_made(embedder):
    with pytest.raises(InvalidInput, match="'local', 'mpnet' or 'openai:<model>'"):
        tenant_create(slug="acme", embedder=embedder)
    assert not Tenant.objects.filter(slug="acme").exists()


def test_createtenant_with_an_unknown_embedder_fails_with_a_message():
    with pytest.raises(CommandError, match="Unknown embedder 'bert'"):
        call_command("createtenant", "acme", "--embedder", "bert")
    assert not Tenant.objects.filter(slug="acme").exists()


def test_the_database_refuses_a_tenant_whose_embedder_names_nothing():
    with pytest.raises(IntegrityError, match="tenant_embedder_known"), transaction.atomic():
        Tenant.objects.create(slug="acme", name="Acme", embedder="bert")
