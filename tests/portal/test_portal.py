import re

import pytest
from django.urls import reverse

from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Document
from knowledge.services import documents_ingest
from tests.factories import UserFactory

ASK = reverse("portal:ask")


def document_url(document, version=None):
    url = reverse("portal:document", args=[document.pk])
    return f"{url}?version={version}" if version else url


def test_login_page_renders_a_sign_in_form(client, db):
    response = client.get(reverse("portal:login"))
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b"csrfmiddlewaretoken" in response.content


def test_signing_in_leads_to_the_ask_page(client, member):
    response = client.post(
        reverse("portal:login"), {"username": member.username, "password": "pass-word-123"}, follow=True
    )
    assert response.redirect_chain[-1][0] == ASK
    assert b"Question" in response.content


def test_the_ask_page_requires_login(client, db):
    response = client.get(ASK)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("portal:login"))


def test_signing_out_is_a_post(client, member):
    client.force_login(member)
    assert client.get(reverse("portal:logout")).status_code == 405
    client.post(reverse("portal:logout"))
    assert client.get(ASK).status_code == 302


def test_a_user_without_a_tenant_gets_a_forbidden_page(client, db):
    client.force_login(UserFactory())
    response = client.get(ASK)
    assert response.status_code == 403
    assert b"does not belong to any tenant" in response.content


def test_asking_a_question_links_each_citation_to_the_cited_chunk(client, corpus, member):
    client.force_login(member)
    response = client.post(ASK, {"question": "how long do I boil spaghetti?"})
    assert response.status_code == 200
    pasta = Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")
    html = response.content.decode()
    links = re.findall(r'<a class="cite" href="([^"]+)">\[(\d+)\]</a>', html)
    assert links, html
    citations = {c["n"]: c for c in response.context["citations"]}
    targets = []
    for url, n in links:  # each link records the opening, then redirects to the cited chunk
        cited = citations[int(n)]
        assert url == f"/answers/{response.context['answer']['trace_id']}/citations/{n}/"
        target = client.get(url)["Location"]
        assert target == f"/documents/{cited['document_id']}/?version={cited['version']}#chunk-{cited['chunk']}"
        targets.append(target)
    assert re.fullmatch(rf"/documents/{pasta.pk}/\?version=1#chunk-\d+", targets[0])
    assert "nine to eleven minutes" in html
    assert "Cooking pasta" in html


def test_the_short_answer_shows_first_and_an_unsupported_sentence_is_marked(
    client, corpus, member, monkeypatch, written_style
):
    from tests.retrieval.doubles import ScriptedLLM

    reply = {
        "short_answer": "Nine to eleven minutes",
        "answer": "Cook the spaghetti for nine to eleven minutes [1]. Paris is the capital of <b>France</b>.",
    }
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: ScriptedLLM(answer_reply=reply))
    client.force_login(member)
    html = client.post(ASK, {"question": "how long do I boil spaghetti?"}).content.decode()
    short = html.index('<p class="short-answer">Nine to eleven minutes</p>')
    assert short < html.index('<div class="answer">')
    marked = re.search(r'<mark class="unsupported"[^>]*>(.*?)</mark><span class="unsupported-tag">', html)
    assert marked and marked.group(1) == "Paris is the capital of &lt;b&gt;France&lt;/b&gt;."
    assert html.count('<mark class="unsupported"') == 1  # the cited sentence is not marked
    assert "1 sentence of this answer is not supported by the sources" in html


def test_without_an_llm_a_how_to_question_leads_with_the_best_passage_not_a_headline(client, corpus, member):
    client.force_login(member)
    response = client.post(ASK, {"question": "How do I fix a flat bicycle tyre?"})
    html = response.content.decode()
    assert response.context["answer"]["short_answer"] == ""
    assert '<p class="short-answer">' not in html
    lead = html.index('<div class="lead">')
    assert lead < html.index('<div class="answer">')
    assert "Fixing a flat bicycle tyre" in html[lead:] and "puncture" in html[lead : html.index('<div class="answer">')]


def test_an_empty_question_shows_a_form_error(client, corpus, member):
    client.force_login(member)
    response = client.post(ASK, {"question": "   "})
    assert response.status_code == 200
    assert response.context["form"].errors["question"]
    assert "answer" not in response.context


def test_a_question_over_2000_characters_shows_a_form_error(client, corpus, member):
    client.force_login(member)
    response = client.post(ASK, {"question": "spaghetti " * 201})
    assert response.status_code == 200
    assert "at most 2000 characters" in response.content.decode()


def test_a_question_in_an_empty_knowledge_base_says_there_is_no_answer(client, member):
    client.force_login(member)
    response = client.post(ASK, {"question": "how long do I boil spaghetti?"})
    assert response.status_code == 200
    assert b"do not contain an answer" in response.content


def test_the_document_page_shows_each_chunk_with_its_anchor(client, corpus, member):
    client.force_login(member)
    pasta = Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")
    response = client.get(document_url(pasta, version=1))
    assert response.status_code == 200
    html = response.content.decode()
    ordinals = list(pasta.versions.get(number=1).chunks.values_list("ordinal", flat=True))
    assert ordinals
    for ordinal in ordinals:
        assert f'id="chunk-{ordinal}"' in html
    assert "Cooking pasta" in html
    assert "handbook" in html


def test_the_document_page_escapes_html_in_document_text(client, tenant, source, member):
    documents_ingest(
        tenant=tenant,
        source=source,
        documents=[
            ReadDocument(
                external_id="notes/xss",
                title="Notes <b>bold</b>",
                text="Notes\n\nA harmless line of text. <script>alert(1)</script> And another sentence here.",
            )
        ],
    )
    document = Document.objects.for_tenant(tenant).get(external_id="notes/xss")
    client.force_login(member)
    html = client.get(document_url(document)).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in html
    assert "<b>bold</b>" not in html


def test_the_answer_text_is_escaped_before_citations_are_linked(client, tenant, source, member):
    documents_ingest(
        tenant=tenant,
        source=source,
        documents=[
            ReadDocument(
                external_id="notes/xss",
                title="Boiling",
                text="Boiling\n\nTo boil spaghetti <script>alert(1)</script> takes about ten minutes in water.",
            )
        ],
    )
    client.force_login(member)
    html = client.post(ASK, {"question": "how long to boil spaghetti"}).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in html
    assert '<a class="cite" href="' in html


def test_an_older_version_without_chunks_shows_its_text_as_one_block(client, tenant, source, member):
    source.versions_kept = 0  # retention drops old versions' chunks (docs/versions.md)
    source.save(update_fields=["versions_kept"])
    first = ReadDocument(external_id="doc", title="Doc", text="Doc\n\nThe first wording of this document text.")
    second = ReadDocument(external_id="doc", title="Doc", text="Doc\n\nThe second wording of this document text.")
    documents_ingest(tenant=tenant, source=source, documents=[first])
    documents_ingest(tenant=tenant, source=source, documents=[second])
    document = Document.objects.for_tenant(tenant).get(external_id="doc")
    client.force_login(member)

    old = client.get(document_url(document, version=1)).content.decode()
    assert "The first wording" in old
    assert 'id="chunk-' not in old

    current = client.get(document_url(document)).content.decode()
    assert "The second wording" in current
    assert 'id="chunk-0"' in current


@pytest.mark.parametrize("version", ["99", "abc", "²", "9" * 5000, "0", "-1"])
def test_an_unknown_version_is_not_found(client, corpus, member, version):
    client.force_login(member)
    pasta = Document.objects.for_tenant(corpus).get(external_id="recipes/pasta")
    assert client.get(document_url(pasta, version=version)).status_code == 404


def test_another_tenants_document_is_not_found(client, corpus, other_tenant_corpus, member):
    client.force_login(member)
    secret = Document.objects.for_tenant(other_tenant_corpus).get()
    response = client.get(document_url(secret))
    assert response.status_code == 404
    assert b"Secret" not in response.content
