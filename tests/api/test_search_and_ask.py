from knowledge.ingestion.readers import ReadDocument
from knowledge.models import Chunk
from knowledge.services import documents_ingest
from tests.factories import SourceFactory


def test_search_returns_ranked_chunks_with_timings(corpus, member_client):
    response = member_client.post("/api/v1/search/", {"query": "how long do I boil spaghetti?", "k": 3}, format="json")
    assert response.status_code == 200
    body = response.json()
    top = body["results"][0]
    assert top["document"] == "recipes/pasta"
    assert "nine to eleven minutes" in top["text"]
    assert top["rank"] == 1
    assert set(top["components"]) == {"lexical", "dense"}
    assert len(body["results"]) <= 3
    assert "total_ms" in body["timings_ms"]


def test_search_modes_and_source_filter_are_applied(corpus, member_client):
    notes = SourceFactory(tenant=corpus, name="notes")
    documents_ingest(
        tenant=corpus,
        source=notes,
        documents=[
            ReadDocument(external_id="notes/pasta", title="Pasta", text="Pasta\n\nBoil spaghetti in salted water.")
        ],
    )
    response = member_client.post(
        "/api/v1/search/", {"query": "boil spaghetti", "mode": "lexical", "sources": ["notes"]}, format="json"
    )
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["document"] for r in results] == ["notes/pasta"]
    assert set(results[0]["components"]) == {"lexical"}


def test_search_rejects_bad_input_in_the_error_shape(corpus, member_client):
    for payload in (
        {"query": "pasta", "k": 0},
        {"query": "pasta", "k": 51},
        {"query": "pasta", "mode": "magic"},
        {"query": ""},
        {},
    ):
        response = member_client.post("/api/v1/search/", payload, format="json")
        assert response.status_code == 400, payload
        assert response.json()["error"]["code"] == "invalid_input"


def test_search_with_an_unknown_source_is_a_400(corpus, member_client):
    response = member_client.post("/api/v1/search/", {"query": "pasta", "sources": ["nope"]}, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == {"code": "unknown_source", "message": "Unknown source(s): nope."}


def test_ask_answers_with_citations(corpus, member_client):
    response = member_client.post(
        "/api/v1/ask/", {"question": "How long should spaghetti cook?", "extractive": True}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert body["mode"] == "extractive"
    assert body["found"] is True
    assert body["citations"][0]["document"] == "recipes/pasta"
    assert "[1]" in body["answer"]
    assert "total_ms" in body["timings_ms"]


def test_ask_returns_the_short_answer_and_the_explanations_cited_sentences(
    corpus, member_client, monkeypatch, written_style
):
    from tests.retrieval.doubles import ScriptedLLM

    reply = {"short_answer": "Nine to eleven minutes", "answer": "Cook it for nine to eleven minutes [1]."}
    monkeypatch.setattr("retrieval.pipeline.configured_llm", lambda: ScriptedLLM(answer_reply=reply))
    body = member_client.post("/api/v1/ask/", {"question": "How long should spaghetti cook?"}, format="json").json()
    assert body["short_answer"] == "Nine to eleven minutes"
    assert body["answer"] == "Cook it for nine to eleven minutes [1]."
    assert body["sentences"] == [
        {"text": "Cook it for nine to eleven minutes.", "citations": [1], "supported": True, "added": False}
    ]
    assert body["citation_coverage"] == 1.0 and body["unsupported"] == []
    extractive = member_client.post(
        "/api/v1/ask/", {"question": "How long should spaghetti cook?", "extractive": True}, format="json"
    ).json()
    assert extractive["short_answer"] and extractive["citation_coverage"] == 1.0


def test_ask_accepts_the_top_n_strategy(corpus, member_client):
    response = member_client.post(
        "/api/v1/ask/",
        {
            "question": "Who approves expense reports?",
            "strategy": "top_n",
            "k": 2,
            "reverse_pack": False,
            "extractive": True,
        },
        format="json",
    )
    assert response.status_code == 200
    citations = response.json()["citations"]
    assert citations and citations[0]["document"] == "finance/expenses"
    assert citations[0]["text"] == Chunk.objects.get(pk=citations[0]["chunk_id"]).text


def test_ask_rejects_an_unknown_strategy(corpus, member_client):
    response = member_client.post("/api/v1/ask/", {"question": "pasta?", "strategy": "magic"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_input"


def test_ask_names_its_pipeline_and_returns_steps_and_a_trace_the_caller_can_read(corpus, member_client):
    response = member_client.post(
        "/api/v1/ask/",
        {"question": "How do I fix a flat tyre?", "pipeline": "expand", "extractive": True},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert body["pipeline"] == "expand" and body["degraded"] is False
    assert [s["stage"] for s in body["steps"]] == ["scope", "expand", "retrieve", "fuse", "pack", "generate"]
    assert body["usage"]["llm_calls"] == 0 and body["citations"]
    trace = member_client.get(f"/api/v1/traces/{body['trace_id']}/").json()
    assert trace["pipeline"] == "expand" and trace["steps"][1]["summary"]["method"] == "rm3"


def test_ask_with_an_unknown_pipeline_is_a_400(corpus, member_client):
    response = member_client.post("/api/v1/ask/", {"question": "pasta?", "pipeline": "telepathy"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_input"
