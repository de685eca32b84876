"""Settings helpers that fail loudly: the local secret key, the security settings."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import local_secret_key

ROOT = Path(__file__).resolve().parents[2]


def test_the_local_secret_key_is_random_made_once_and_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "secret-key"
    key = local_secret_key(path)
    assert len(key) >= 50 and local_secret_key(path) == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert local_secret_key(tmp_path / "other") != key


def test_a_tampered_short_secret_key_stops_start_up(tmp_path):
    path = tmp_path / "secret-key"
    path.write_text("short")
    with pytest.raises(ImproperlyConfigured, match="too short"):
        local_secret_key(path)


def test_the_settings_never_use_a_built_in_key(settings):
    assert "insecure" not in settings.SECRET_KEY and len(settings.SECRET_KEY) >= 50


def settings_in_a_child_process(env: dict[str, str], expression: str) -> subprocess.CompletedProcess:
    """Evaluate ``expression`` on ``django.conf.settings`` loaded with ``env`` added."""
    code = f"import django; django.setup(); from django.conf import settings as s; print({expression})"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_login_failure_limit_and_cooloff_come_from_the_environment():
    result = settings_in_a_child_process(
        {"KB_LOGIN_FAILURE_LIMIT": "3", "KB_LOGIN_COOLOFF_MINUTES": "60"},
        "s.AXES_FAILURE_LIMIT, s.AXES_COOLOFF_TIME.total_seconds()",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3 3600.0"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("KB_LOGIN_FAILURE_LIMIT", "0", "KB_LOGIN_FAILURE_LIMIT=0 must be at least 1"),
        ("KB_LOGIN_COOLOFF_MINUTES", "soon", "KB_LOGIN_COOLOFF_MINUTES='soon' is not an integer"),
        ("KB_HTTPS", "maybe", "KB_HTTPS='maybe' is not a boolean"),
    ],
)
def test_a_bad_security_setting_stops_start_up_naming_it(name, value, message):
    result = settings_in_a_child_process({name: value}, "1")
    assert result.returncode != 0
    assert message in result.stderr


def test_without_kb_https_cookies_are_not_https_only_so_plain_http_sign_in_works(settings):
    assert not settings.SESSION_COOKIE_SECURE and not settings.CSRF_COOKIE_SECURE
    assert not settings.SECURE_SSL_REDIRECT and settings.SECURE_HSTS_SECONDS == 0
