"""Inputs that once made the API answer 500: each now gets a 4xx in the API's error shape."""

import json


def test_a_huge_limit_or_offset_is_capped_not_a_server_error(corpus, member_client):
    for query in ("limit=99999999999999999999", "offset=99999999999999999999", "limit=5&offset=99999999999999"):
        response = member_client.get(f"/api/v1/documents/?{query}")
        assert response.status_code == 200, query
    body = member_client.get("/api/v1/documents/?limit=99999999999999999999").json()
    assert len(body["results"]) == 3  # capped at max_limit, which is more than the corpus
    assert member_client.get("/api/v1/documents/?offset=99999999999999999999").json()["results"] == []


def test_a_json_body_nested_100000_levels_deep_is_a_400(corpus, member_client):
    body = "[" * 100_000 + "]" * 100_000
    for path in ("/api/v1/search/", "/api/v1/ask/"):
        response = member_client.generic("POST", path, body, content_type="application/json")
        assert response.status_code == 400, path
        error = response.json()["error"]
        assert error["code"] == "parse_error" and "nested too deeply" in json.dumps(error["message"])
