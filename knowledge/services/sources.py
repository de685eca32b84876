"""Creating, changing and deleting a tenant's sources, with their connector settings checked.

The checks live here once, for the CLI (``manage.py source``), the API and the admin: a source
that a connector syncs (folder, web, git) needs a ``location`` of the right shape; globs are
lists of strings. Every error is ``InvalidInput`` naming the field.

The tenant boundary (``docs/security.md``), checked on create and on edit, and again by the
connectors at every sync:

* a ``folder`` location, and a ``git`` location that is a local path or a ``file://`` URL, lies
  inside a folder the operator granted to the tenant (``knowledge.folder_grants``; code
  ``location_not_allowed``);
* a ``web`` location and a ``git`` remote are ``http(s)://`` URLs whose host resolves to public
  addresses only (``core.outbound``; code ``address_not_allowed``); ``ssh://``, ``git://`` and
  ``user@host:path`` remotes are refused (they would use the server's own keys);
* the operator's limits: ``page_limit`` at most ``KB_WEB_MAX_PAGES``, ``crawl_delay_s`` at least
  ``KB_WEB_MIN_CRAWL_DELAY_S``, ``sync_every`` at least ``KB_MIN_SYNC_EVERY_S``.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import timedelta
from functools import partial
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction

from core.audit import audit_record
from core.errors import InvalidInput
from core.models import Tenant
from core.outbound import host_check
from knowledge.connectors.git import cache_folder, location_is_url
from knowledge.folder_grants import folder_location_check
from knowledge.models import DocumentVersion, Source
from knowledge.quotas import quota_check
from knowledge.services.ingestion import version_reindex

# Fields a caller may set (besides tenant and name); the rest are the sync's own.
SOURCE_FIELDS = (
    "kind",
    "location",
    "branch",
    "include",
    "exclude",
    "text_format",
    "uri_prefix",
    "page_limit",
    "crawl_delay_s",
    "sync_every",
    "reliability",
    "half_life_days",
    "versions_kept",
    # service sources (knowledge.connectors.services)
    "secret",
    "options",
    "perm_every",
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def duration_parse(value) -> timedelta | None:
    """A schedule such as ``"30m"``, ``"1h"``, ``"2d"`` or ``"1w"`` (or a ``timedelta``, or seconds
    as a number) as a ``timedelta``; ``None``, ``""``, ``"off"`` and ``0`` mean no schedule.
    ``InvalidInput`` for anything else."""
    if value in (None, "", "off", 0):
        return None
    if isinstance(value, timedelta):
        return value
    invalid = InvalidInput(
        f"sync_every must be a duration such as 30m, 1h, 1d or 1w (or off), not {str(value)[:40]!r}.",
        code="invalid_sync_every",
    )
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return timedelta(seconds=value)
        match = _DURATION.match(str(value))
        if not match:
            raise invalid
        return timedelta(**{_UNITS[match[2]]: float(match[1])})
    except (OverflowError, ValueError):  # longer than timedelta holds, or NaN
        raise invalid from None


def _globs(value, field: str) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InvalidInput(f"{field} must be a list of glob patterns (strings).")
    if len(value) > 100 or any(len(v) > 500 for v in value):
        raise InvalidInput(f"{field}: at most 100 patterns of at most 500 characters.")
    return [v.strip() for v in value]


def _duration_text(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _http_location_check(location: str, *, what: str, hint: str = "") -> None:
    """An http(s) URL with a host that resolves to allowed addresses only (``core.outbound``)."""
    parts = urlsplit(location)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise InvalidInput(f"{what} is an http(s) URL{hint}, not {location!r}.", code="invalid_location")
    host_check(parts.hostname, port or (443 if parts.scheme == "https" else 80))


def _web_location_check(location: str) -> None:
    _http_location_check(location, what="A web source's location", hint=" (a start page or a sitemap.xml)")


def _git_location_check(source: Source) -> None:
    """A git location: an http(s) remote, or a local path or ``file://`` URL inside a grant."""
    location = source.location
    if location_is_url(location):
        scheme = urlsplit(location).scheme if "://" in location else "ssh"
        if scheme == "file":
            folder_location_check(tenant=source.tenant_id, location=urlsplit(location).path or "/")
            return
        if scheme not in ("http", "https"):
            raise InvalidInput(
                f"A git source's remote is an https:// URL (for a private repository, with an access token in "
                f"it: https://TOKEN@host/org/repo.git); {scheme} remotes are not supported, since they would "
                "use the server's own keys.",
                code="invalid_location",
            )
        _http_location_check(location, what="A git source's remote")
        return
    if not location.startswith(("/", "~")):
        raise InvalidInput("A git source's location is an https:// URL or an absolute path.", code="invalid_location")
    folder_location_check(tenant=source.tenant_id, location=location)


def _service_check(source: Source) -> None:
    """A service source: ``location`` defaults to the service's public API and is an http(s) URL
    whose host resolves to allowed addresses; ``options`` is a JSON object; ``perm_every`` is at
    least ``KB_MIN_PERM_SYNC_EVERY_S``. ``InvalidInput`` naming the field."""
    from knowledge.connectors.services import DEFAULT_LOCATIONS, LOCATION_HINTS

    if not source.location:
        default = DEFAULT_LOCATIONS.get(source.kind)
        if default is None:
            raise InvalidInput(
                f"A {source.kind} source needs a location: {LOCATION_HINTS[source.kind]}.", code="location_required"
            )
        source.location = default
    _http_location_check(source.location, what=f"A {source.kind} source's location (the API's base URL)")
    if source.options in (None, ""):
        source.options = {}
    if not isinstance(source.options, dict):
        raise InvalidInput('options is a JSON object, e.g. {"channels": ["general"]}.', code="invalid_options")
    if len(json.dumps(source.options)) > 20000:
        raise InvalidInput("options has at most 20,000 characters of JSON.", code="invalid_options")
    if not isinstance(source.secret, str) or len(source.secret) > 20000:
        raise InvalidInput("secret is a token or key of at most 20,000 characters.", code="invalid_secret")
    if not source.secret.strip():
        raise InvalidInput(
            f"A {source.kind} source needs its token or key (secret; the CLI reads it with --secret-env VAR).",
            code="secret_required",
        )
    source.perm_every = duration_parse(source.perm_every)
    if source.perm_every is not None:
        least = timedelta(seconds=settings.KB_MIN_PERM_SYNC_EVERY_S)
        if source.perm_every < least:
            raise InvalidInput(
                f"perm_every is at least {_duration_text(least)} on this server (the operator's "
                "KB_MIN_PERM_SYNC_EVERY_S).",
                code="invalid_perm_every",
            )


def _shown(value):
    """A source field as the audit log keeps it: JSON, durations in seconds, no URL credentials."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str) and "://" in value and "@" in value:
        parts = urlsplit(value)
        if parts.password or parts.username:
            return parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")).geturl()
    return value


def source_check(source: Source) -> None:
    """Check ``source``'s fields (module docstring); ``InvalidInput`` naming the first bad one.

    Normalizes in place what it accepts: ``location`` stripped, globs as lists of stripped
    strings, ``sync_every`` as a ``timedelta`` or ``None``. Saves nothing; ``source_create``,
    ``source_update`` and the admin's source form call it, so every way in agrees.
    """
    source.name = (source.name or "").strip()  # as source_create does, so an update cannot add spaces
    if not source.name:
        raise InvalidInput("A source needs a name.")
    if len(source.name) > 200:
        raise InvalidInput("A source's name has at most 200 characters.")
    if source.kind not in Source.Kind.values:
        raise InvalidInput(f"kind must be one of {', '.join(Source.Kind.values)}, not {source.kind!r}.")
    if source.kind == Source.Kind.CONVERSATION and source.pk is None:  # knowledge.attachments makes the one
        raise InvalidInput("A conversation source is made by attaching a file to a conversation.", code="invalid_kind")
    source.location = (source.location or "").strip()
    source.include = _globs(source.include, "include")
    source.exclude = _globs(source.exclude, "exclude")
    if source.kind in Source.SERVICE_KINDS:
        _service_check(source)
    elif source.secret or source.options or source.perm_every:
        raise InvalidInput("secret, options and perm_every are for service sources (Slack, Confluence, ...).")
    if source.kind in Source.SYNCED_KINDS:
        if not source.location:
            raise InvalidInput(f"A {source.kind} source needs a location.", code="location_required")
        if len(source.location) > 2000:
            raise InvalidInput("location has at most 2,000 characters.")
    if source.kind == Source.Kind.WEB:
        _web_location_check(source.location)
    if source.kind == Source.Kind.GIT:
        _git_location_check(source)
    if source.kind == Source.Kind.FOLDER:
        if not source.location.startswith(("/", "~")):
            raise InvalidInput(
                "A folder source's location is an absolute path the workers can read.", code="invalid_location"
            )
        folder_location_check(tenant=source.tenant_id, location=source.location)
    source.sync_every = duration_parse(source.sync_every)
    if source.sync_every is not None:
        if source.kind not in Source.SYNCED_KINDS:
            raise InvalidInput("Only connector sources (folder, web, git and the services) sync on a schedule.")
        least = timedelta(seconds=settings.KB_MIN_SYNC_EVERY_S)
        if source.sync_every < least:
            raise InvalidInput(
                f"sync_every is at least {_duration_text(least)} on this server (the operator's KB_MIN_SYNC_EVERY_S).",
                code="invalid_sync_every",
            )
    if source.text_format not in ("", "rst", "md", "txt"):
        raise InvalidInput("text_format is rst, md, txt or empty.")
    if not isinstance(source.page_limit, int) or isinstance(source.page_limit, bool) or source.page_limit < 1:
        raise InvalidInput("page_limit is a whole number of at least 1.")
    if source.page_limit > settings.KB_WEB_MAX_PAGES:
        raise InvalidInput(
            f"page_limit is at most {settings.KB_WEB_MAX_PAGES} on this server (the operator's KB_WEB_MAX_PAGES).",
            code="invalid_page_limit",
        )
    if not isinstance(source.crawl_delay_s, int | float) or source.crawl_delay_s < 0:
        raise InvalidInput("crawl_delay_s is a number of seconds, at least 0.")
    if source.kind == Source.Kind.WEB and source.crawl_delay_s < settings.KB_WEB_MIN_CRAWL_DELAY_S:
        raise InvalidInput(
            f"crawl_delay_s is at least {settings.KB_WEB_MIN_CRAWL_DELAY_S:g} s on this server "
            "(the operator's KB_WEB_MIN_CRAWL_DELAY_S).",
            code="invalid_crawl_delay",
        )
    if source.reliability is None or not 0 <= source.reliability <= 1:
        raise InvalidInput("reliability must be in [0, 1].")
    if source.half_life_days is not None and source.half_life_days <= 0:
        raise InvalidInput("half_life_days must be positive.")
    if source.versions_kept is not None and source.versions_kept < 0:
        raise InvalidInput("versions_kept is 0 or more (empty keeps all).")


def source_create(*, tenant: Tenant, name: str, kind: str = Source.Kind.FOLDER, **fields) -> Source:
    """Create the tenant's source ``name`` of ``kind`` with ``fields`` (any of ``SOURCE_FIELDS``).

    ``InvalidInput`` for a bad field (named) or a name the tenant already uses (code
    ``source_exists``); ``QuotaExceeded`` (403 ``quota_exceeded``) past the tenant's sources quota.
    """
    unknown = set(fields) - set(SOURCE_FIELDS)
    if unknown:
        raise InvalidInput(f"Unknown source field(s): {', '.join(sorted(unknown))}.")
    source = Source(tenant=tenant, name=(name or "").strip(), kind=kind, **fields)
    source_check(source)
    try:
        with transaction.atomic():
            quota_check(tenant=tenant, sources=1)  # under the tenant's quota lock until the source is saved
            source.save()
    except IntegrityError:
        raise InvalidInput(f"The tenant already has a source called {source.name!r}.", code="source_exists") from None
    audit_record(
        action="source.created",
        tenant=tenant,
        obj=source,
        changes={
            **{key: _shown(getattr(source, key)) for key in ("kind", "location", "sync_every")},
            **({"secret": "set"} if source.secret else {}),
        },
    )
    return source


def source_update(*, source: Source, **fields) -> Source:
    """Change ``fields`` (any of ``SOURCE_FIELDS`` and ``name``) of ``source``; checks as ``source_create``.

    Nothing is saved when a field is bad.
    """
    unknown = set(fields) - {*SOURCE_FIELDS, "name"}
    if unknown:
        raise InvalidInput(f"Unknown source field(s): {', '.join(sorted(unknown))}.")
    changed = Source.objects.get(pk=source.pk)
    secret_changed = "secret" in fields and fields["secret"] != changed.secret
    fields = {k: v for k, v in fields.items() if k != "secret" or secret_changed}
    before = {key: _shown(getattr(changed, key)) for key in fields if key != "secret"}
    for key, value in fields.items():
        setattr(changed, key, value)
    source_check(changed)
    try:
        with transaction.atomic():
            changed.save()
    except IntegrityError:
        raise InvalidInput(f"The tenant already has a source called {changed.name!r}.", code="source_exists") from None
    difference = {
        key: [before[key], _shown(getattr(changed, key))]
        for key in fields
        if key != "secret" and before[key] != _shown(getattr(changed, key))
    }
    if secret_changed:
        difference["secret"] = "changed"  # never the value
    if difference:
        audit_record(action="source.changed", tenant=changed.tenant_id, obj=changed, changes=difference)
    return changed


def source_delete(*, source: Source) -> None:
    """Delete ``source`` with its documents, versions, chunks and runs.

    Documents of other sources that were exact duplicates of its documents are indexed on their
    own afterwards (they would otherwise have no chunks); a git source's fetched repository and
    the kept original files of its documents (``knowledge.originals``) are removed once the
    deletion commits.
    """
    orphans = list(
        DocumentVersion.objects.filter(is_current=True, duplicate_of__document__source=source)
        .exclude(document__source=source)
        .values_list("pk", flat=True)
    )
    cache = cache_folder(source) if source.kind == Source.Kind.GIT else None
    audit_record(
        action="source.deleted",
        tenant=source.tenant_id,
        obj=source,
        changes={"kind": source.kind, "location": _shown(source.location)},
    )
    from knowledge.services.originals import document_originals_remove  # PDFs kept to be shown
    from knowledge.services.uploads import upload_files_remove  # uploads' stored files, removed on commit

    jobs = list(source.ingestion_jobs.all())  # read before the deletion takes them with it
    document_ids = list(source.documents.values_list("pk", flat=True))
    source.delete()
    upload_files_remove(jobs=jobs)
    document_originals_remove(tenant_id=source.tenant_id, document_ids=document_ids)
    for version_id in orphans:
        version_reindex(version_id=version_id)
    if cache is not None:  # a git source's fetched repository
        transaction.on_commit(partial(shutil.rmtree, cache, ignore_errors=True))


def source_test(*, source: Source) -> str:
    """ "Test connection" of a service source: one line saying what its credential can see
    (``Connector.check``). ``InvalidInput`` for a source that is not a service;
    ``CredentialRejected`` (400) or ``SourceUnreachable`` (502) saying why it cannot read."""
    from knowledge.connectors.services import service_connector

    return service_connector(source).check()
