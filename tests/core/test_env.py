"""Settings helpers that fail loudly: the local secret key."""

import stat

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import local_secret_key


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
