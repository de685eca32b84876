"""Claims of the test provider's users, from the JSON file ``KB_TEST_IDP_USERS`` names:
``{"username": {"password": "...", "claims": {"email": ..., "groups": [...], ...}}}``."""

import json
import os

from oauth2_provider.oauth2_validators import OAuth2Validator


def users() -> dict:
    with open(os.environ["KB_TEST_IDP_USERS"]) as file:
        return json.load(file)


class ClaimsValidator(OAuth2Validator):
    oidc_claim_scope = None  # every claim, whatever the scopes

    def get_additional_claims(self, request):
        return dict(users().get(request.user.username, {}).get("claims", {}))
