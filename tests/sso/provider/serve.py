"""Run the test provider: ``python -m tests.sso.provider.serve PORT`` with ``KB_TEST_IDP_DIR``
(its SQLite database and RSA key), ``KB_TEST_IDP_USERS`` (users and claims) and
``KB_TEST_IDP_CLIENT`` (JSON: ``client_id``, ``client_secret``, ``redirect_uris``) set.

Migrates its database, creates the users and the confidential client (authorization code,
RS256 ID tokens, no consent screen), then serves on 127.0.0.1:PORT until terminated.
"""

import json
import os
import sys


def main(port: int) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sso.provider.settings"
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from oauth2_provider.models import Application

    from tests.sso.provider.validator import users

    call_command("migrate", verbosity=0)
    User = get_user_model()
    for username, entry in users().items():
        user, _ = User.objects.get_or_create(username=username)
        user.set_password(entry["password"])
        user.save()
    client = json.loads(os.environ["KB_TEST_IDP_CLIENT"])
    Application.objects.filter(client_id=client["client_id"]).delete()
    Application.objects.create(
        name="knowledge base",
        client_id=client["client_id"],
        client_secret=client["client_secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(client["redirect_uris"]),
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True, verbosity=0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
