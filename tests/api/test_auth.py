import pytest
from rest_framework.test import APIClient

from tests.api.conftest import client_for
from tests.factories import UserFactory

ENDPOINTS = [
    ("get", "/api/v1/documents/"),
    ("post", "/api/v1/documents/"),
    ("get", "/api/v1/documents/1/"),
    ("delete", "/api/v1/documents/1/"),
    ("get", "/api/v1/jobs/1/"),
    ("post", "/api/v1/search/"),
    ("post", "/api/v1/ask/"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
def test_an_unauthenticated_request_gets_401_in_the_error_shape(method, url):
    response = getattr(APIClient(), method)(url)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response.json()["error"]["message"]
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.django_db
def test_a_wrong_token_gets_401_in_the_error_shape():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = client.get("/api/v1/documents/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_a_token_authenticates_a_member_of_the_tenant(corpus, member_client):
    response = member_client.get("/api/v1/documents/")
    assert response.status_code == 200
    assert response.json()["count"] == 3


@pytest.mark.django_db
def test_a_user_without_a_tenant_is_refused_with_403():
    response = client_for(UserFactory()).get("/api/v1/documents/")
    assert response.status_code == 403
    assert response.json() == {
        "error": {
            "code": "permission_denied",
            "message": "Your account does not belong to any tenant.",
        }
    }


def test_the_openapi_schema_is_served_to_a_signed_in_caller_only(member_client):
    assert APIClient().get("/api/schema/").status_code in (401, 403)
    response = member_client.get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/v1/documents/" in response.content
