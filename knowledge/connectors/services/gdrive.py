"""Google Drive through Drive API v3 (google-api-python-client, its bundled discovery document)
with a service account's key (google-auth): the files of My Drive and of the shared drives it sees.

``options``: ``subject`` (the user it acts as, domain-wide delegation), ``domain`` (the
organisation's; default the subject's), ``drives`` (ids or names) and ``folders`` (ids; files at
any depth) to limit the source, ``directory`` (Google groups' members from the Admin SDK).

Docs, Sheets and Slides are exported as .docx, .xlsx, .pptx; other files are downloaded when the
readers take their extension and size. Key: the Drive id; fingerprint: the ``version``. A full
pass (``files.list``) from a start token, then the Changes API. Permissions: a My Drive file's own
list; a shared drive's file its drive's members, or its own list when it or a folder above it is
shared beyond the drive or limits access. Users map by e-mail, groups by address
(``gdrive:group:<address>``), "anyone with the link" and the organisation's domain to public; a
list that cannot be read gives no permission (fail closed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import PurePosixPath

from django.conf import settings

from core.errors import ApplicationError
from core.outbound import AddressNotAllowed
from knowledge.connectors.base import PUBLIC, CredentialRejected, Item, Permission, SourceGroup, SourceUnreachable
from knowledge.connectors.http import MAX_RESPONSE_BYTES, guarded_session, status_raise
from knowledge.ingestion.readers import SUPPORTED_EXTENSIONS, read_bytes

logger = logging.getLogger(__name__)

DEFAULT_LOCATION = "https://www.googleapis.com/"
DRIVE_SCOPE = "https://www.googleapis.com/auth/drive.readonly"
MEMBERS_SCOPE = "https://www.googleapis.com/auth/admin.directory.group.member.readonly"
FOLDER = "application/vnd.google-apps.folder"
# Google's own formats (Docs, Sheets, Slides), exported as the office file the readers take.
_GOOGLE, _OOXML = "application/vnd.google-apps.", "application/vnd.openxmlformats-officedocument."
EXPORTS = {
    f"{_GOOGLE}document": (f"{_OOXML}wordprocessingml.document", ".docx"),
    f"{_GOOGLE}spreadsheet": (f"{_OOXML}spreadsheetml.sheet", ".xlsx"),
    f"{_GOOGLE}presentation": (f"{_OOXML}presentationml.presentation", ".pptx"),
}
# My Drive and every shared drive the account is a member of.
ALL_DRIVES = {"supportsAllDrives": True, "includeItemsFromAllDrives": True}
PAGE_SIZE = 1000  # files.list and changes.list allow 1,000 a page
PERMISSION_FIELDS = "permissions(type,role,emailAddress,domain,deleted,permissionDetails(inherited,inheritedFrom))"
SHARING_FIELDS = f"hasAugmentedPermissions,inheritedPermissionsDisabled,{PERMISSION_FIELDS}"
FILE_FIELDS = (
    "id,name,mimeType,modifiedTime,version,size,parents,driveId,trashed,webViewLink,"
    f"owners(displayName,emailAddress),lastModifyingUser(displayName,emailAddress),{SHARING_FIELDS}"
)
LISTING_FIELDS = "id,name,mimeType,modifiedTime,md5Checksum,version,size,parents,driveId"
ACCESS_FIELDS = f"id,name,mimeType,size,parents,driveId,{SHARING_FIELDS}"
FOLDER_FIELDS = "id,name,parents,driveId,hasAugmentedPermissions,inheritedPermissionsDisabled"
# 403 reasons that mean "slow down" (Drive's per-user quotas) or "the token lacks a scope".
RATE_REASONS = {"rateLimitExceeded", "userRateLimitExceeded", "sharingRateLimitExceeded"}
SCOPE_REASONS = {"insufficientPermissions", "ACCESS_TOKEN_SCOPE_INSUFFICIENT"}
DOWNLOADED = set(SUPPORTED_EXTENSIONS) - {".jsonl"}  # read by extension; .jsonl holds records, not one document
# Answers about one file that fail that file alone (not found, not exportable, too large to export).
ONE_FILE = (400, 403, 404, 410)


class GuardedHttp:
    """googleapiclient's ``http``: ``request(uri, method, body, headers)`` -> ``(Response, bytes)``
    over ``guarded_session`` (the address guard; urllib3 retries 429 and 5xx, honouring
    ``Retry-After``) with the account's bearer token, refreshed through the same session.
    ``CredentialRejected`` when the token endpoint refuses the key, ``SourceUnreachable`` when a
    server cannot be reached or an answer passes ``MAX_RESPONSE_BYTES``."""

    def __init__(self, credentials, scope: str):
        from google.auth.transport.requests import Request

        self.session, self.credentials, self.scope = guarded_session(), credentials, scope
        self._token_request = Request(session=self.session)

    def request(self, uri, method="GET", body=None, headers=None, redirections=5, connection_type=None):
        import httplib2  # google-api-python-client's own dependency
        import requests
        from google.auth.exceptions import RefreshError, TransportError

        headers = dict(headers or {})
        try:
            self.credentials.before_request(self._token_request, method, uri, headers)
            response = self.session.request(method, uri, data=body, headers=headers, stream=True)
            content = _read_capped(response)
        except RefreshError as exc:
            raise CredentialRejected(
                f"Google refused the service account's key ({_short(exc)}): the key was deleted or disabled, or "
                f"the subject may not delegate {self.scope} to it. Give the source a valid key, or grant the scope."
            ) from exc
        except AddressNotAllowed as exc:
            raise SourceUnreachable(f"Google Drive cannot be reached: {exc}") from exc
        except (requests.RequestException, TransportError) as exc:
            raise SourceUnreachable(f"Google Drive cannot be reached ({_short(exc)}).") from exc
        answer = httplib2.Response({**response.headers, "status": str(response.status_code)})
        answer.reason = response.reason or ""
        return answer, content


def _read_capped(response) -> bytes:
    chunks, size = [], 0
    for chunk in response.iter_content(2**16):
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            response.close()
            raise SourceUnreachable(f"An answer of Google Drive is larger than {MAX_RESPONSE_BYTES // 2**20} MB.")
        chunks.append(chunk)
    return b"".join(chunks)


def _short(exc: Exception) -> str:
    return str(exc)[:200]


class DriveConnector:
    """The ``Connector`` of Google Drive (module docstring)."""

    kind = "gdrive"
    follows_permissions = True

    def __init__(self, source, secret: str):
        options = source.options or {}
        self.location = (source.location or DEFAULT_LOCATION).rstrip("/") + "/"
        self.subject = options.get("subject") or ""
        self.domain = (options.get("domain") or self.subject.rpartition("@")[2]).lower()
        self.wanted_drives = set(options.get("drives") or [])
        self.wanted_folders = set(options.get("folders") or [])
        self.directory = bool(options.get("directory"))
        self._secret = secret
        self.drive = self._client("drive", "v3", DRIVE_SCOPE, f"{self.location}drive/v3/")
        self._admin = None
        self._drive_names: dict[str, str] | None = None
        self._folders: dict[str, dict] | None = None
        self._drive_access: dict[str, list | None] = {}
        self._groups: set[str] = set()
        self._access: dict[str, Permission | None] | None = None
        self._groups_complete = False

    def _credentials(self, scopes: list[str]):
        from google.oauth2 import service_account

        try:
            credentials = service_account.Credentials.from_service_account_info(json.loads(self._secret), scopes=scopes)
        except (ValueError, TypeError, KeyError) as exc:
            raise CredentialRejected(f"The key is not a Google service account's JSON key file ({exc}).") from exc
        return credentials.with_subject(self.subject) if self.subject else credentials

    def _client(self, api: str, version: str, scope: str, endpoint: str):
        """A client from the bundled discovery document, for ``scope`` alone (one missing fails alone)."""
        from googleapiclient.discovery import build

        http = GuardedHttp(self._credentials([scope]), scope)
        options = {"api_endpoint": endpoint}
        return build(api, version, http=http, static_discovery=True, cache_discovery=False, client_options=options)

    def _call(self, request, what: str, *, allow: tuple[int, ...] = ()):
        """``request.execute()`` (retries are the HTTP layer's). 401, 429 and 5xx, a 403 for a
        missing scope or a spent quota, and any status not in ``allow`` raise the connector's
        errors; an ``HttpError`` whose status is in ``allow`` (404, 403 on one file) passes."""
        from googleapiclient.errors import HttpError

        try:
            return request.execute(num_retries=0)
        except HttpError as exc:
            status, reasons = exc.resp.status, _reasons(exc)
            status_raise(status, what=f"Google ({what})", detail=exc.reason)
            if status == 403 and reasons & SCOPE_REASONS:
                raise CredentialRejected(
                    f"Google refused {what}: the service account's token lacks a scope ({DRIVE_SCOPE}, and "
                    f"{MEMBERS_SCOPE} for group members). Grant it, then sync again."
                ) from exc
            if status == 403 and reasons & RATE_REASONS:
                raise SourceUnreachable(f"Google kept answering 403 (rate limited) to {what}.") from exc
            if status in allow:
                raise
            raise SourceUnreachable(f"Google answered HTTP {status} to {what} ({_short(exc.reason)}).") from exc

    def _pages(self, method, what: str, key: str, *, allow=(), **params) -> Iterator[tuple[list[dict], str | None]]:
        """``(entries, token of this page)`` for each page of a list method, following ``nextPageToken``."""
        token = params.pop("pageToken", None)
        while True:
            answer = self._call(method(pageToken=token, **params), what, allow=allow)
            yield answer.get(key, []), token
            token = answer.get("nextPageToken")
            if not token:
                return

    def _files(self, fields: str, *, folders: bool = False, page: str | None = None):
        """Pages of ``files.list`` over every drive: files not trashed (or folders), from ``page``."""
        query = f"trashed = false and mimeType {'=' if folders else '!='} '{FOLDER}'"
        params = {"q": query, "corpora": "allDrives", "pageSize": PAGE_SIZE, "pageToken": page, **ALL_DRIVES}
        params["fields"] = f"nextPageToken,files({fields})"
        return self._pages(self.drive.files().list, "files.list", "files", **params)

    def _documents(self, fields: str, page: str | None = None) -> Iterator[tuple[dict, str | None]]:
        """``(file, token of its page)`` for each readable file in scope, from ``page`` on."""
        for files, token in self._files(fields, page=page):
            yield from ((file, token) for file in files if self._document(file) and self._in_scope(file))

    # -- the Connector protocol -----------------------------------------------------------

    def check(self) -> str:
        """What the account sees, e.g. "Google Drive as alice@example.com: 3 shared drives, 42 readable
        files" (``about.get``, ``drives.list``, the first page of ``files.list``: "at least" if full)."""
        about = self._call(self.drive.about().get(fields="user(emailAddress)"), "about.get")
        first, _token = next(iter(self._files("id,name,mimeType,size,parents,driveId")))
        readable = sum(1 for file in first if self._document(file) and self._in_scope(file))
        drives, who = len(self._drives()), about.get("user", {}).get("emailAddress", "?")
        plural, least = "" if drives == 1 else "s", "at least " if len(first) == PAGE_SIZE else ""
        return f"Google Drive as {who}: {drives:,} shared drive{plural}, {least}{readable:,} readable files"

    def changes(self, checkpoint: dict) -> Iterator[Item]:
        """The Changes API's changes since ``page_token``, else a full pass (from ``files_page``)."""
        if checkpoint.get("page_token"):
            final: dict = {}
            return _settled(self._feed(checkpoint["page_token"], final), final)
        start = checkpoint.get("start_page_token")
        if not start:
            request = self.drive.changes().getStartPageToken(supportsAllDrives=True)
            start = self._call(request, "changes.getStartPageToken")["startPageToken"]
        return _settled(self._full_pass(start, checkpoint.get("files_page")), {"page_token": start})

    def listing(self) -> Iterator[tuple[str, str]]:
        return ((file["id"], _fingerprint(file)) for file, _token in self._documents(LISTING_FIELDS))

    def fetch(self, keys: list[str]) -> Iterator[Item]:
        for key in keys:
            file = self._get(key, FILE_FIELDS)
            yield Item(key, deleted=True) if file is None else self._item(file)

    def permissions(self, keys: list[str]) -> Iterator[tuple[str, Permission | None]]:
        """From one walk of the listing (``_access_pass``); a key it did not find by ``files.get``."""
        if self._access is None:
            self._access_pass()
        for key in keys:
            if key in self._access:
                yield key, self._access[key]
            else:
                file = self._get(key, ACCESS_FIELDS)
                yield key, None if file is None else self._permission(file)

    def groups(self) -> Iterator[SourceGroup]:
        """The groups the documents' permissions name (walking the listing if not done yet)."""
        if not self._groups_complete:
            self._access_pass()
        for address in sorted(self._groups):
            members = self._members(address) if self.directory else {address}
            yield SourceGroup(address, f"gdrive:group:{address}", frozenset(members))

    def _full_pass(self, start: str, page: str | None) -> Iterator[Item]:
        for file, token in self._documents(FILE_FIELDS, page):
            item = self._item(file)
            item.checkpoint = {"start_page_token": start, "files_page": token}
            yield item
        self._groups_complete = page is None

    def _feed(self, token: str, final: dict) -> Iterator[Item]:
        """Items of ``changes.list`` from ``token``; ``final`` gets the next sync's token."""
        page, fields = token, f"nextPageToken,newStartPageToken,changes(changeType,fileId,removed,file({FILE_FIELDS}))"
        while page:
            params = {"pageToken": page, "pageSize": PAGE_SIZE, "includeRemoved": True, "fields": fields}
            answer = self._call(self.drive.changes().list(**params, **ALL_DRIVES), "changes.list")
            for change in answer.get("changes", []):
                item = self._change_item(change)
                if item is not None:
                    item.checkpoint = {"page_token": page}
                    yield item
            if answer.get("newStartPageToken"):
                final["page_token"] = answer["newStartPageToken"]
            page = answer.get("nextPageToken")

    def _change_item(self, change: dict) -> Item | None:
        if change.get("changeType", "file") != "file":
            return None
        file = change.get("file")
        if change.get("removed") or file is None:
            return Item(change["fileId"], deleted=True)
        if file.get("mimeType") == FOLDER:  # no document: "deleted" only carries the checkpoint on
            if self._folders is not None:
                self._folders[file["id"]] = file
            return Item(file["id"], deleted=True)
        return self._item(file)

    def _access_pass(self) -> None:
        """Every document's permission (``_access``) from one walk of the listing: all groups are known."""
        self._access = {file["id"]: self._permission(file) for file, _token in self._documents(ACCESS_FIELDS)}
        self._groups_complete = True

    def _get(self, key: str, fields: str) -> dict | None:
        """The file resource of ``key``; ``None`` when Drive says it is gone (404)."""
        from googleapiclient.errors import HttpError

        try:
            request = self.drive.files().get(fileId=key, supportsAllDrives=True, fields=fields)
            return self._call(request, "files.get", allow=(404,))
        except HttpError:
            return None

    def _document(self, file: dict) -> bool:
        """Whether the file is read: Docs, Sheets, Slides, or a file of a readable type and size."""
        readable = PurePosixPath(file.get("name", "")).suffix.lower() in DOWNLOADED
        small = int(file.get("size") or 0) <= settings.KB_MAX_UPLOAD_BYTES
        return file.get("mimeType") in EXPORTS or (readable and small)

    def _item(self, file: dict) -> Item:
        """A file's item (``FILE_FIELDS``); ``deleted`` when trashed, out of scope or not readable."""
        from googleapiclient.errors import HttpError

        key = file["id"]
        if file.get("trashed") or not self._document(file) or not self._in_scope(file):
            return Item(key, deleted=True)
        fingerprint = _fingerprint(file)
        permission = self._permission(file)
        try:
            documents = self._read(file)
        except (CredentialRejected, SourceUnreachable):
            raise
        except HttpError as exc:
            error = f"Google Drive answered HTTP {exc.resp.status}: {_short(exc.reason)}"
            return Item(key, fingerprint, error=error, permission=permission)
        except ApplicationError as exc:
            return Item(key, fingerprint, error=str(exc), permission=permission)
        return Item(key, fingerprint, documents=documents, permission=permission)

    def _read(self, file: dict):
        """The file's ``ReadDocument``s: exported or downloaded, then read by its extension."""
        files = self.drive.files()
        if file["mimeType"] in EXPORTS:
            export, suffix = EXPORTS[file["mimeType"]]
            data = self._call(files.export_media(fileId=file["id"], mimeType=export), "files.export", allow=ONE_FILE)
            name = file["name"] + suffix
        else:
            data = self._call(files.get_media(fileId=file["id"], supportsAllDrives=True), "files.get", allow=ONE_FILE)
            name = file["name"]
        updated = file.get("modifiedTime", "")
        person = (file.get("owners") or [file.get("lastModifyingUser") or {}])[0]
        documents = read_bytes(data, name=name, external_id=f"gdrive/{file['id']}", uri=file.get("webViewLink", ""))
        for document in documents:
            document.title = file["name"]
            document.published_at = datetime.fromisoformat(updated) if updated else None  # RFC 3339
            document.metadata = {
                "author": person.get("displayName") or person.get("emailAddress") or "",
                "place": self._place(file),
                "updated_at": updated,
                "source_kind": self.kind,
            }
        return documents

    # -- where a file is -------------------------------------------------------------------------

    def _drives(self) -> dict[str, str]:
        """Shared drives the account is a member of: id -> name (``drives.list``, 100 a page)."""
        if self._drive_names is None:
            self._drive_names = {}
            fields = "nextPageToken,drives(id,name)"
            for drives, _token in self._pages(
                self.drive.drives().list, "drives.list", "drives", pageSize=100, fields=fields
            ):
                self._drive_names.update((d["id"], d.get("name", "")) for d in drives)
        return self._drive_names

    def _folder_map(self) -> dict[str, dict]:
        """Every folder the account sees: id -> resource (``FOLDER_FIELDS``), listed once."""
        if self._folders is None:
            self._folders = {}
            for folders, _token in self._files(FOLDER_FIELDS, folders=True):
                self._folders.update((f["id"], f) for f in folders)
        return self._folders

    def _ancestors(self, file: dict) -> Iterator[dict]:
        """The folders above ``file``, nearest first, as far as the account sees them."""
        folders, seen = self._folder_map(), set()
        parent = (file.get("parents") or [None])[0]
        while parent in folders and parent not in seen:
            seen.add(parent)
            yield folders[parent]
            parent = (folders[parent].get("parents") or [None])[0]

    def _in_scope(self, file: dict) -> bool:
        if not self.wanted_drives and not self.wanted_folders:
            return True
        drive = file.get("driveId")
        if drive and (drive in self.wanted_drives or self._drives().get(drive) in self.wanted_drives):
            return True
        return bool(self.wanted_folders) and any(f["id"] in self.wanted_folders for f in self._ancestors(file))

    def _place(self, file: dict) -> str:
        """The parent folder's name, else the shared drive's, else "My Drive"."""
        parent = next(self._ancestors(file), None)
        if parent is not None:
            return parent.get("name", "")
        if file.get("driveId"):
            return self._drives().get(file["driveId"], "")
        return "My Drive"

    # -- who may read it -------------------------------------------------------------------------

    def _permission(self, file: dict) -> Permission | None:
        """Who may read ``file`` (module docstring); ``None`` when its sharing cannot be read. Under
        a limited-access folder, only organizers and what is shared from the limit down count."""
        drive = file.get("driveId")
        if drive:
            chain = [file, *self._ancestors(file)]
            limit = next((n for n, f in enumerate(chain) if f.get("inheritedPermissionsDisabled")), None)
            if limit is not None:
                entries = _below_limit(self._permission_list(file["id"]), {f["id"] for f in chain[: limit + 1]})
            elif any(f.get("hasAugmentedPermissions") for f in chain):
                entries = self._permission_list(file["id"])
            else:
                entries = self._drive_permissions(drive)
        elif "permissions" in file:
            entries = file["permissions"]
        else:
            entries = self._permission_list(file["id"])
        return None if entries is None else self._mapped(entries)

    def _drive_permissions(self, drive: str) -> list[dict] | None:
        if drive not in self._drive_access:
            self._drive_access[drive] = self._permission_list(drive)
        return self._drive_access[drive]

    def _permission_list(self, file_id: str) -> list[dict] | None:
        """``permissions.list`` of a file or shared drive (100 a page); ``None`` on 403 or 404."""
        fields = f"nextPageToken,{PERMISSION_FIELDS}"
        method = self.drive.permissions().list
        return self._collect(method, "permissions", fileId=file_id, supportsAllDrives=True, pageSize=100, fields=fields)

    def _collect(self, method, key: str, **params) -> list[dict] | None:
        """Every page's ``key`` entries of a list method; ``None`` when it answers 403 or 404."""
        from googleapiclient.errors import HttpError

        try:
            return [
                entry for page, _token in self._pages(method, key, key, allow=(403, 404), **params) for entry in page
            ]
        except HttpError as exc:
            logger.info("gdrive: %s of %s cannot be read (HTTP %s)", key, params, exc.resp.status)
            return None

    def _mapped(self, entries: Iterable[dict]) -> Permission:
        """Anyone with the link or the organisation's domain: public; else its users and groups."""
        entries = [entry for entry in entries if not entry.get("deleted")]
        ours = lambda e: e.get("type") == "domain" and e.get("domain", "").lower() == self.domain  # noqa: E731
        if any(e.get("type") == "anyone" or (self.domain and ours(e)) for e in entries):
            return PUBLIC
        emails, groups = (
            {e.get("emailAddress", "").lower() for e in entries if e.get("type") == t} for t in ("user", "group")
        )
        self._groups |= groups - {""}
        return Permission.of(emails=emails, groups=groups - {""})

    def _members(self, address: str) -> set[str]:
        """A group's users, nested groups' included (Directory API); its own address on 403, 404."""
        if self._admin is None:
            self._admin = self._client("admin", "directory_v1", MEMBERS_SCOPE, self.location)
        params = {"groupKey": address, "includeDerivedMembership": True, "maxResults": 200}
        members = self._collect(
            self._admin.members().list, "members", fields="nextPageToken,members(email,type)", **params
        )
        if members is None:
            return {address}
        return {m["email"].lower() for m in members if m.get("type") == "USER" and m.get("email")}


def _settled(items: Iterator[Item], final: dict) -> Iterator[Item]:
    """``items``, the last with ``final`` as its checkpoint (``final`` is read once they end)."""
    held = None
    for item in items:
        if held is not None:
            yield held
        held = item
    if held is not None:
        if final:
            held.checkpoint = dict(final)
        yield held


def _below_limit(entries: list[dict] | None, below: set[str]) -> list[dict] | None:
    """The entries still giving access under a limited-access folder: the drive's organizers, and
    what is shared on the file or a folder in ``below`` (the file up to the limiting folder)."""
    if entries is None:
        return None
    kept = lambda d: not d.get("inherited") or d.get("inheritedFrom") in below  # noqa: E731
    return [e for e in entries if e.get("role") == "organizer" or any(map(kept, e.get("permissionDetails") or [{}]))]


def _fingerprint(file: dict) -> str:
    return f"v{file['version']}" if file.get("version") else file.get("modifiedTime", "")


def _reasons(exc) -> set[str]:
    """The ``reason`` of each error (and error detail) in a Google error body."""
    try:
        error = json.loads(exc.content or b"{}")["error"]
        return {e.get("reason", "") for e in error.get("errors", []) + error.get("details", [])} - {""}
    except (ValueError, KeyError, TypeError, AttributeError):
        return set()
