"""Secrets stored encrypted at rest: connector tokens and keys, SSO client secrets.

``cryptography``'s ``MultiFernet`` (AES-128-CBC with HMAC-SHA256, a well-kept library) with the
keys of ``KB_SECRET_KEYS``: the first key encrypts, every key decrypts, so an operator rotates by
putting a new key first and running ``manage.py rotatekeys`` (``secrets_rotate``), which
re-encrypts every stored secret with it; the old key can then be dropped. Without
``KB_SECRET_KEYS`` the key is derived from ``SECRET_KEY`` (HKDF-SHA256), and ``check --deploy``
warns (``core.W006``). Keys derived from ``SECRET_KEY`` and ``SECRET_KEY_FALLBACKS`` always
decrypt too (never encrypt when ``KB_SECRET_KEYS`` is set), so setting ``KB_SECRET_KEYS`` for
the first time, or rotating ``SECRET_KEY`` with the old one in ``SECRET_KEY_FALLBACKS``, leaves
the stored secrets readable until ``rotatekeys`` re-encrypts them.

``EncryptedTextField`` holds the ciphertext in the database and the plain text in Python; it is
never shown by the API or the admin (their fields are write-only), and ``audit_record`` callers
record only that a secret changed.
"""

from __future__ import annotations

import base64
import binascii
import functools
from dataclasses import dataclass

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import models, transaction

PREFIX = "fernet:"  # marks a stored ciphertext (a value without it is plain text from before encryption)

KEY_MAKE = "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
KEY_HELP = (
    "KB_SECRET_KEYS holds Fernet keys, comma-separated: 32 url-safe base64-encoded bytes each; "
    f"make one with `{KEY_MAKE}`."
)


def _key_problem(key: str) -> str | None:
    """Why ``key`` is not a Fernet key (never quoting it), or ``None``."""
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return "it is not url-safe base64"
    if len(raw) != 32:
        return f"it decodes to {len(raw)} bytes, not 32"
    return None


def secret_keys_problems(keys) -> list[str]:
    """What is wrong with each malformed key of ``keys`` (by position, never quoting a key)."""
    keys = list(keys)
    return [
        f"KB_SECRET_KEYS key {position} of {len(keys)} is malformed: {problem}."
        for position, key in enumerate(keys, start=1)
        if (problem := _key_problem(key))
    ]


def _derived_key(secret_key: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"kb-secrets").derive(secret_key.encode())
    return base64.urlsafe_b64encode(derived)


@functools.cache
def _fernet(keys: tuple[str, ...], secret_keys: tuple[str, ...]):
    from cryptography.fernet import Fernet, MultiFernet

    problems = secret_keys_problems(keys)
    if problems:
        raise ImproperlyConfigured(" ".join([*problems, KEY_HELP]))
    derived = [_derived_key(secret_key) for secret_key in secret_keys if secret_key]
    return MultiFernet([Fernet(key) for key in [*(key.encode() for key in keys), *derived]])


def fernet():
    """The ``MultiFernet`` of the current settings: ``KB_SECRET_KEYS`` (the first encrypts), then the
    keys derived from ``SECRET_KEY`` and ``SECRET_KEY_FALLBACKS``. ``ImproperlyConfigured`` for a
    malformed key."""
    fallbacks = settings.SECRET_KEY_FALLBACKS
    return _fernet(tuple(settings.KB_SECRET_KEYS), (settings.SECRET_KEY, *fallbacks))


def secret_encrypt(plain: str) -> str:
    """``plain`` encrypted with the first key, as stored (``"fernet:..."``); ``""`` stays ``""``."""
    if not plain:
        return ""
    return PREFIX + fernet().encrypt(plain.encode()).decode()


class SecretUnreadable(ImproperlyConfigured):
    """A stored secret that none of ``KB_SECRET_KEYS`` decrypts (a key was dropped too early)."""

    def __init__(self):
        super().__init__(
            "A stored secret cannot be decrypted with any key of KB_SECRET_KEYS (was the key that encrypted it "
            "removed before `manage.py rotatekeys` re-encrypted it?)."
        )


def secret_decrypt(stored: str) -> str:
    """The plain text of a stored value; a value without the prefix is returned as it is (stored
    before encryption; ``rotatekeys`` encrypts it). ``SecretUnreadable`` when no key decrypts it."""
    from cryptography.fernet import InvalidToken

    if not stored or not stored.startswith(PREFIX):
        return stored or ""
    try:
        return fernet().decrypt(stored[len(PREFIX) :].encode()).decode()
    except (InvalidToken, UnicodeError):
        raise SecretUnreadable() from None


def secret_readable(value: str) -> bool:
    """Whether an ``EncryptedTextField``'s value was decrypted (false for a value still encrypted,
    which no key of ``KB_SECRET_KEYS`` opens)."""
    return not (value or "").startswith(PREFIX)


def secret_rotate(stored: str) -> str:
    """``stored`` re-encrypted with the first key (plain text from before encryption gets
    encrypted). ``SecretUnreadable`` when no key decrypts it."""
    return secret_encrypt(secret_decrypt(stored))


class EncryptedTextField(models.TextField):
    """A text field stored encrypted (``secret_encrypt``) and read decrypted; empty stays empty.

    A stored value no key decrypts is read as it is stored (``secret_readable`` is then false), so
    a dropped key makes the secrets it encrypted unusable without making their rows unreadable;
    saving the row keeps the stored value. A value that starts with ``"fernet:"`` is taken as
    already encrypted. Not searchable or orderable by value (the ciphertext changes at every save).
    """

    def from_db_value(self, value, expression, connection):
        if not value:
            return value
        try:
            return secret_decrypt(value)
        except SecretUnreadable:
            return value

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if not value or value.startswith(PREFIX):
            return value
        return secret_encrypt(value)


def encrypted_fields() -> list[tuple[type[models.Model], str]]:
    """Every ``(model, field name)`` of an ``EncryptedTextField`` in the installed apps, each table
    once (proxies and inherited fields are left to the model that holds the column)."""
    from django.apps import apps

    return [
        (model, field.name)
        for model in apps.get_models()
        if model._meta.managed and not model._meta.proxy
        for field in model._meta.local_concrete_fields
        if isinstance(field, EncryptedTextField)
    ]


@dataclass(frozen=True)
class SecretsRotated:
    """What ``secrets_rotate`` did to one field: ``label`` (``app.Model.field``), how many values
    it re-encrypted, and the primary keys of those no key decrypts (left as they were)."""

    label: str
    rewritten: int = 0
    unreadable: tuple = ()


def secrets_rotate() -> list[SecretsRotated]:
    """Re-encrypt every stored secret with the first key of ``KB_SECRET_KEYS`` (plain values from
    before encryption get encrypted); a value that no key decrypts is left as it is and reported.
    Each table is rewritten in one transaction, its rows locked."""
    results = []
    for model, name in encrypted_fields():
        rewritten, unreadable = 0, []
        with transaction.atomic():
            rows = model._base_manager.exclude(**{name: ""}).exclude(**{f"{name}__isnull": True})
            # values_list goes through from_db_value: ``value`` is the plain text, or the stored
            # ciphertext when no key decrypts it.
            for pk, value in rows.select_for_update().values_list("pk", name).iterator():
                if not secret_readable(value):
                    unreadable.append(pk)
                    continue
                model._base_manager.filter(pk=pk).update(**{name: secret_encrypt(value)})
                rewritten += 1
        results.append(SecretsRotated(f"{model._meta.label}.{name}", rewritten, tuple(unreadable)))
    return results


def secret_keys_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """System check: ``core.E001`` for each malformed key of ``KB_SECRET_KEYS`` (nothing could be
    encrypted or decrypted)."""
    return [
        checks.Error(problem, hint=KEY_HELP, id="core.E001")
        for problem in secret_keys_problems(settings.KB_SECRET_KEYS)
    ]


def secret_keys_deploy_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """System check (``manage.py check --deploy``): ``core.W006`` when ``KB_SECRET_KEYS`` is empty."""
    if settings.KB_SECRET_KEYS:
        return []
    return [
        checks.Warning(
            "KB_SECRET_KEYS is empty: stored secrets (connector tokens, SSO client secrets) are encrypted with a "
            "key derived from SECRET_KEY, so whoever learns SECRET_KEY can decrypt them, and a new SECRET_KEY "
            "without the old one in SECRET_KEY_FALLBACKS leaves them unreadable.",
            hint=f"Set KB_SECRET_KEYS to a key of its own (make one with `{KEY_MAKE}`) and run "
            "`manage.py rotatekeys` to re-encrypt the stored secrets with it (docs/security.md).",
            id="core.W006",
        )
    ]
