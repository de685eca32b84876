"""Typed readers for environment variables that fail loudly on a bad value.

Each helper returns the parsed value or the given default when the variable is unset or
empty, and raises ``django.core.exceptions.ImproperlyConfigured`` naming the variable and the
accepted values when it is set to something it cannot parse (the habit of healthchecks'
``hc/settings.py``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
# A DRF throttle rate: requests per period; DRF reads the period's first letter (s, m, h, d).
_RATE = re.compile(r"(?P<count>[0-9]+)/(?P<period>s|sec|second|m|min|minute|h|hour|d|day)s?")


def env_str(name: str, default: str = "") -> str:
    """Return the variable as a stripped string, or ``default`` when unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or default


def env_bool(name: str, default: bool = False) -> bool:
    """Return the variable as a bool; accepts 1/0, true/false, yes/no, on/off (any case)."""
    value = env_str(name).lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean; use true or false.")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """Return the variable as an int, at least ``minimum`` when one is given."""
    value = env_str(name)
    if not value:
        return default
    try:
        number = int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from exc
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}.")
    return number


def env_limit(name: str, default: int | None = None) -> int | None:
    """Return the variable as a whole number of at least 0, or ``None`` (no limit) when it is
    unset, empty or ``unlimited``."""
    value = env_str(name)
    if not value:
        return default
    if value.lower() == "unlimited":
        return None
    try:
        number = int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a whole number (or 'unlimited').") from exc
    if number < 0:
        raise ImproperlyConfigured(f"{name}={number} must be at least 0.")
    return number


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    """Return the variable as a float, at least ``minimum`` when one is given."""
    value = env_str(name)
    if not value:
        return default
    try:
        number = float(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number.") from exc
    if number != number or number in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={value!r} is not a finite number.")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}.")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """Return a comma-separated variable as a list of non-empty stripped items."""
    value = env_str(name)
    if not value:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: list[str]) -> str:
    """Return the variable if it is one of ``choices``."""
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}.")
    return value


def env_rate(name: str, default: str) -> str:
    """Return the variable if it is a DRF throttle rate ``N/period``: at least one request per
    second, minute, hour or day (``600/min``, ``10/s``, ``1000/hour``, ``5000/day``)."""
    value = env_str(name, default)
    match = _RATE.fullmatch(value)
    if match is None:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a rate; use requests per period: N/second, N/minute, N/hour or N/day "
            "(or N/s, N/min, N/h, N/d), e.g. 600/min."
        )
    if int(match["count"]) < 1:
        raise ImproperlyConfigured(f"{name}={value!r} must allow at least one request per period.")
    return value


def env_url(name: str, default: str = "", *, schemes: tuple[str, ...]) -> str:
    """Return the variable if it is a URL whose scheme is one of ``schemes``."""
    value = env_str(name, default)
    if value and value.split("://", 1)[0] not in schemes:
        raise ImproperlyConfigured(
            f"{name}={value!r} must be a URL starting with one of: " + ", ".join(f"{s}://" for s in schemes)
        )
    return value


def env_path(name: str, default: Path) -> Path:
    """Return the variable as an absolute path (created if missing)."""
    path = Path(env_str(name) or default).expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}={str(path)!r} cannot be created: {exc}") from exc
    return path


def env_json(name: str, default: object) -> object:
    """Return the variable parsed as JSON (any JSON value), or ``default`` when unset or empty."""
    value = env_str(name)
    if not value:
        return default
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}.") from exc


def local_secret_key(path: Path) -> str:
    """The secret key stored in ``path``, generated there (random, 50 URL-safe characters,
    file mode 0600) the first time; ``ImproperlyConfigured`` when it cannot be read or written."""
    import secrets

    try:
        if not path.exists():
            key = secrets.token_urlsafe(50)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(key)
            return key
        key = path.read_text().strip()
    except FileExistsError:  # another process made it first
        key = path.read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"Cannot keep the local secret key in {path}: {exc}. Set SECRET_KEY.") from exc
    if len(key) < 32:
        raise ImproperlyConfigured(f"The secret key in {path} is too short; delete the file or set SECRET_KEY.")
    return key
