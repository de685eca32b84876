"""The person's data lives in ``people``; retrieval reaches it only through what people registers."""

from dataclasses import fields
from importlib import import_module

import pytest
from django.apps import apps
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import override_settings
from django.urls import resolve, reverse

from people import rerank
from people.ask_apis import AskApi, AskStreamApi
from people.feedback import source_feedback_counts
from people.models import CitationOpen, Conversation, Feedback, Turn
from people.personalization import user_layer_compose
from retrieval import apis as retrieval_apis
from retrieval.registry import Registry, registry_configured
from tests.api.conftest import client_for

MOVED = (Feedback, Conversation, Turn, CitationOpen)
move_migration = import_module("people.migrations.0002_conversations_feedback_history")


def test_the_moved_models_keep_their_tables_and_belong_to_people(db):
    assert [m._meta.db_table for m in MOVED] == [
        "retrieval_feedback",
        "retrieval_conversation",
        "retrieval_turn",
        "retrieval_citationopen",
    ]
    assert {ContentType.objects.get_for_model(m).app_label for m in MOVED} == {"people"}
    assert not any(apps.all_models["retrieval"].get(m._meta.model_name) for m in MOVED)


def test_upgrading_relabels_the_old_content_types_keeping_their_ids(db):
    """An existing database has ``retrieval`` content types for the moved models: the migration
    relabels them, so permissions and admin log entries that point at them follow."""
    ContentType.objects.filter(app_label="people", model__in=move_migration.MOVED).delete()
    old = {
        ct.model: ct.pk
        for ct in [ContentType.objects.create(app_label="retrieval", model=m) for m in move_migration.MOVED]
    }
    with connection.schema_editor() as editor:
        move_migration.relabel_content_types("retrieval", "people")(apps, editor)
    relabelled = dict(ContentType.objects.filter(app_label="people").values_list("model", "pk"))
    assert {m: relabelled[m] for m in old} == old
    assert not ContentType.objects.filter(app_label="retrieval", model__in=move_migration.MOVED).exists()


def test_the_run_registry_holds_the_personal_reranker_and_the_person_hooks_the_settings_name(db):
    registry = registry_configured()
    assert registry.user_layer is user_layer_compose and registry.source_feedback_counts is source_feedback_counts
    paths = registry.reranker_paths
    assert paths.index("people.rerank") == paths.index("retrieval.stages.rerank.diversity") - 1
    assert rerank in registry.signal_rerankers
    with override_settings(KB_PERSON_HOOKS={"horoscope": "people.rerank"}), pytest.raises(ImproperlyConfigured):
        registry_configured()


def test_retrieval_has_no_ask_hook_asking_lives_in_people(db):
    assert "ask" not in {f.name for f in fields(Registry)}
    with (
        override_settings(KB_PERSON_HOOKS={"ask": "people.asking.ask"}),
        pytest.raises(ImproperlyConfigured, match="ask"),
    ):
        registry_configured()
    assert not hasattr(retrieval_apis, "AskApi") and not hasattr(retrieval_apis, "ask_run")
    assert resolve(reverse("api:ask")).func.view_class is AskApi
    assert resolve(reverse("api:ask-stream")).func.view_class is AskStreamApi


def test_the_ask_api_keeps_the_answer_as_a_turn(corpus, member):
    response = client_for(member).post(
        reverse("api:ask"), {"question": "How do I fix a flat bicycle tyre?"}, format="json"
    )
    assert response.status_code == 200
    conversation = Conversation.objects.get(pk=response.json()["conversation_id"])
    assert conversation.turns.get().trace_id == response.json()["trace_id"]
