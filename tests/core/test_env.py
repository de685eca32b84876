"""Settings helpers that fail loudly: the local secret key, the security settings."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_rate, local_secret_key

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
        ("KB_API_RATE", "600", "KB_API_RATE='600' is not a rate"),
        ("KB_API_ANON_RATE", "60/fortnight", "KB_API_ANON_RATE='60/fortnight' is not a rate"),
        ("LOG_LEVEL", "chatty", "LOG_LEVEL='chatty' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ],
)
def test_a_bad_security_setting_stops_start_up_naming_it(name, value, message):
    result = settings_in_a_child_process({name: value}, "1")
    assert result.returncode != 0
    assert message in result.stderr


def test_without_kb_https_cookies_are_not_https_only_so_plain_http_sign_in_works(settings):
    assert not settings.SESSION_COOKIE_SECURE and not settings.CSRF_COOKIE_SECURE
    assert not settings.SECURE_SSL_REDIRECT and settings.SECURE_HSTS_SECONDS == 0


@pytest.mark.parametrize("rate", ["600/min", "600/minute", "600/m", "10/s", "10/second", "2/hours", "5000/day", "1/d"])
def test_an_api_rate_is_requests_per_second_minute_hour_or_day(monkeypatch, rate):
    from rest_framework.throttling import SimpleRateThrottle

    monkeypatch.setenv("KB_API_RATE", rate)
    assert env_rate("KB_API_RATE", "600/min") == rate
    count, seconds = SimpleRateThrottle.parse_rate(None, rate)  # and DRF reads it the same way
    assert count == int(rate.split("/")[0]) and seconds in (1, 60, 3600, 86400)


@pytest.mark.parametrize(
    ("rate", "message"),
    [
        ("600", "KB_API_RATE='600' is not a rate"),
        ("600/fortnight", "is not a rate"),
        ("600/Min", "is not a rate"),  # DRF reads the period's first letter, lower case only
        ("six/min", "is not a rate"),
        ("-5/min", "is not a rate"),
        ("600/min/2", "is not a rate"),
        ("0/min", "KB_API_RATE='0/min' must allow at least one request per period"),
    ],
)
def test_a_bad_api_rate_is_refused_naming_the_variable(monkeypatch, rate, message):
    monkeypatch.setenv("KB_API_RATE", rate)
    with pytest.raises(ImproperlyConfigured, match=message):
        env_rate("KB_API_RATE", "600/min")


def test_an_unset_or_empty_api_rate_is_the_default(monkeypatch):
    monkeypatch.delenv("KB_API_RATE", raising=False)
    assert env_rate("KB_API_RATE", "600/min") == "600/min"
    monkeypatch.setenv("KB_API_RATE", "  ")
    assert env_rate("KB_API_RATE", "60/min") == "60/min"


def test_the_api_rates_come_from_the_environment():
    result = settings_in_a_child_process(
        {"KB_API_RATE": "100/hour", "KB_API_ANON_RATE": "5/s"},
        "s.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['user'], s.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['anon']",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "100/hour 5/s"
