"""The portal's as-of date on the ask page, version dates on citations, version list and word diff."""

import pytest
from django.urls import reverse

from knowledge.models import Document

ASK = reverse("portal:ask")


@pytest.fixture(autouse=True)
def no_llm(monkeypatch):
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: None)


def test_asking_as_of_a_date_answers_from_the_older_version_and_names_its_date(client, versioned, member):
    client.force_login(member)

    response = client.post(ASK, {"question": "Which PostgreSQL versions are supported?", "as_of": "2024-06-01"})

    html = response.content.decode()
    assert "PostgreSQL 12" in html and "PostgreSQL 14" not in html
    assert "version 1 of 2023-04-03 (earlier version)" in html
    assert 'value="2024-06-01"' in html  # the date stays in the form for the next question


def test_asking_without_a_date_answers_from_the_current_version(client, versioned, member):
    client.force_login(member)

    html = client.post(ASK, {"question": "Which PostgreSQL versions are supported?"}).content.decode()

    assert "PostgreSQL 14" in html and "version 2 of 2025-04-02" in html


def test_a_bad_as_of_date_shows_a_form_error(client, versioned, member):
    client.force_login(member)

    response = client.post(ASK, {"question": "PostgreSQL?", "as_of": "2024-02-30"})

    assert response.status_code == 200
    assert response.context["form"].errors["as_of"]


def test_the_document_page_lists_versions_with_dates_and_shows_a_word_diff(client, versioned, member):
    client.force_login(member)
    document = Document.objects.for_tenant(versioned).get(external_id="ref/databases")

    html = client.get(reverse("portal:document", args=[document.pk]) + "?version=2&diff=1").content.decode()

    assert "2023-04-03" in html and "2025-04-02" in html
    assert "Changes from v1 to v2" in html
    assert "<del>12</del> <ins>14</ins>" in html


def test_a_diff_with_a_missing_version_is_not_found(client, versioned, member):
    client.force_login(member)
    document = Document.objects.for_tenant(versioned).get(external_id="ref/databases")

    response = client.get(reverse("portal:document", args=[document.pk]) + "?version=2&diff=7")

    assert response.status_code == 404
