"""A small OpenID Connect provider for the single sign-on tests: django-oauth-toolkit's OIDC
support in a Django project of its own, with its own SQLite database, started by
``tests/sso/conftest.py`` as a subprocess on a free loopback port (``serve.py``).

Its users and their claims come from the JSON file ``KB_TEST_IDP_USERS`` names, read at every
request, so a test changes a user's claims by rewriting it.
"""

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

DATA = Path(os.environ["KB_TEST_IDP_DIR"])
SECRET_KEY = "test-identity-provider-" + "x" * 40
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.sso.provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DATA / "idp.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
LOGIN_URL = "/accounts/login/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast; test accounts only

_key_file = DATA / "rsa.pem"
if not _key_file.exists():
    _key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _key_file.write_bytes(
        _key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": _key_file.read_text(),
    "PKCE_REQUIRED": True,  # a token request without the verifier fails
    "OAUTH2_VALIDATOR_CLASS": "tests.sso.provider.validator.ClaimsValidator",
    "ALLOW_LOCALHOST_LOOPBACK": True,  # the live server's callback on any port of localhost
    "SCOPES": {"openid": "OpenID Connect", "email": "Email", "profile": "Profile"},
}
