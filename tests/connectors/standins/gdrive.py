"""A stand-in for Google Drive v3, Google's OAuth token endpoint and the Directory API's group
members, written from Google's API reference, for the real google-api-python-client and google-auth.

It keeps shared drives (organizers, members), folders and files (My Drive or a shared drive) with
their permissions, Google groups, and the change log (a page token is a position in it). As Google
does: ``POST /token`` checks the service account's RS256-signed JWT (``400 invalid_grant`` once
revoked); ``drive/v3/files`` takes ``q`` (``trashed``, ``mimeType``, ``in parents`` joined by
``and``), ``corpora`` and ``includeItemsFromAllDrives`` (only with ``supportsAllDrives``), 100 a
page by default and 1,000 at most; ``files/{id}`` (``alt=media``), ``/export`` (Docs, Sheets,
Slides as .docx, .xlsx, .pptx), ``/permissions`` (100 a page; a file's or a shared drive's id;
``permissionDetails`` for shared drives' items), ``changes`` (the latest change per file,
``newStartPageToken`` on the last page), ``drives``, ``about`` and
``admin/directory/v1/groups/{key}/members`` (``includeDerivedMembership``). Every answer keeps
only the ``fields`` asked for; shared drives' items need ``supportsAllDrives`` and never carry
``permissions`` in the file resource (``hasAugmentedPermissions`` instead).
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.connectors.standin import StandIn, route

FOLDER = "application/vnd.google-apps.folder"
DOC = "application/vnd.google-apps.document"
SHEET = "application/vnd.google-apps.spreadsheet"
SLIDES = "application/vnd.google-apps.presentation"
EXPORTS = {
    DOC: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    SHEET: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    SLIDES: "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}
EPOCH = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
# A file resource's fields when ``fields`` is not given (Drive's default).
DEFAULT_FILE_FIELDS = {"kind": None, "id": None, "name": None, "mimeType": None}
# A key generated once per test run: RSA generation is the slow part of a stand-in.
_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _error(status: int, reason: str, message: str):
    errors = [{"domain": "global", "reason": reason, "message": message}]
    return status, {"error": {"code": status, "message": message, "errors": errors}}


def fields_parse(text: str | None) -> dict | None:
    """``"nextPageToken,files(id,owners(emailAddress))"`` as ``{"nextPageToken": None, "files":
    {"id": None, "owners": {"emailAddress": None}}}`` (``None``: the whole value; ``*``: all)."""
    if not text or text.strip() == "*":
        return None
    tree: dict = {}
    stack = [tree]
    name = ""
    for char in text + ",":
        if char in ",()":
            if name.strip():
                stack[-1][name.strip()] = {} if char == "(" else None
            if char == "(":
                stack.append(stack[-1][name.strip()])
            elif char == ")":
                stack.pop()
            name = ""
        else:
            name += char
    return tree


def fields_keep(value, tree: dict | None):
    """``value`` with only the fields of ``tree`` (``fields_parse``), lists element by element."""
    if isinstance(value, list):
        return [fields_keep(element, tree) for element in value]
    if tree is None or "*" in tree or not isinstance(value, dict):
        return value
    return {key: fields_keep(value[key], sub) for key, sub in tree.items() if key in value}


class DriveStandIn(StandIn):
    """Google Drive, OAuth and the Directory API's members on loopback (module docstring)."""

    token = "ya29.stand-in-access-token"
    client_email = "kb-sync@kb-tests.iam.gserviceaccount.com"

    def __init__(self):
        super().__init__()
        self.files: dict[str, dict] = {}
        self.drives: dict[str, dict] = {}
        self.groups: dict[str, list[dict]] = {}
        self.log: list[str] = []  # file ids, one per change; page token N is log[N - 1:]
        self.grants: list[dict] = []  # the claims of every token request
        self.refused_scopes: set[str] = set()
        self.root = "0AroOtMyDrive"
        self._ids = itertools.count(1)
        self._tick = itertools.count(1)

    @property
    def secret(self) -> str:
        """A service account's JSON key file whose ``token_uri`` is this stand-in."""
        pem = _KEY.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        key = {"type": "service_account", "project_id": "kb-tests", "private_key_id": "k1", "client_id": "1001"}
        return json.dumps(
            {**key, "private_key": pem.decode(), "client_email": self.client_email, "token_uri": f"{self.url}token"}
        )

    # -- what tests change -----------------------------------------------------------------------

    def add_drive(self, name: str, *, organizers=(), members=()) -> str:
        """A shared drive: ``organizers`` and ``members`` (writers), by e-mail, read it all."""
        drive_id = f"0AdRv{next(self._ids)}"
        permissions = [self._grant("user", "organizer", emailAddress=e) for e in organizers]
        permissions += [self._grant("user", "writer", emailAddress=e) for e in members]
        self.drives[drive_id] = {"kind": "drive#drive", "id": drive_id, "name": name, "permissions": permissions}
        return drive_id

    def add_folder(self, name: str, *, parent=None, drive=None, readers=(), limited: bool = False) -> str:
        """A folder; ``limited``: its inherited permissions are disabled (limited access)."""
        folder_id = self.add_file(name, "", mime=FOLDER, parent=parent, drive=drive, readers=readers)
        self.files[folder_id]["inheritedPermissionsDisabled"] = limited
        return folder_id

    def add_file(
        self, name: str, text: str, *, mime=DOC, parent=None, drive=None, owner="owner@example.com",
        readers=(), groups=(), anyone=False, domain=None, can_share=True,
    ) -> str:  # fmt: skip
        """A file (a Google Doc by default) with ``text``, shared with ``readers`` (e-mails),
        ``groups`` (addresses), ``anyone`` with the link and ``domain``. In My Drive ``owner``
        owns it; in a shared drive its members read it, and these shares are on top (augmented).
        ``can_share=False``: the account may not see its sharing."""
        file_id, drive = f"1f{next(self._ids):04d}", drive or self.files.get(parent, {}).get("driveId")
        person = {"displayName": owner.split("@")[0].title(), "emailAddress": owner}
        permissions = [] if drive else [self._grant("user", "owner", emailAddress=owner)]
        permissions += [self._grant("user", "reader", emailAddress=e) for e in readers]
        permissions += [self._grant("group", "reader", emailAddress=e) for e in groups]
        permissions += [self._grant("anyone", "reader", allowFileDiscovery=False)] if anyone else []
        permissions += [self._grant("domain", "reader", domain=domain)] if domain else []
        link = f"https://docs.google.com/document/d/{file_id}/edit"
        if mime not in EXPORTS:
            link = f"https://drive.google.com/file/d/{file_id}/view"
        file = {"kind": "drive#file", "id": file_id, "name": name, "mimeType": mime, "trashed": False}
        file.update(parents=[parent or drive or self.root], version="0", webViewLink=link, lastModifyingUser=person)
        file.update(_text=text, _permissions=permissions, _can_share=can_share)
        file.update({"driveId": drive} if drive else {"owners": [person]})
        self.files[file_id] = file
        self._touch(file_id)
        return file_id

    def edit(self, file_id: str, text: str) -> None:
        self.files[file_id]["_text"] = text
        self._touch(file_id)

    def trash(self, file_id: str) -> None:
        self.files[file_id]["trashed"] = True
        self._touch(file_id)

    def delete(self, file_id: str) -> None:
        """Delete for good: the change log says ``removed``, ``files.get`` answers 404."""
        del self.files[file_id]
        self.log.append(file_id)

    def unshare(self, file_id: str, address: str) -> None:
        """Take the user's or group's permission on the file away."""
        file = self.files[file_id]
        file["_permissions"] = [p for p in file["_permissions"] if p.get("emailAddress") != address]
        self._touch(file_id)

    def add_group(self, address: str, members=(), *, groups=()) -> None:
        """A Google group with ``members`` (e-mails) and nested ``groups`` (addresses)."""
        entries = [("USER", email) for email in members] + [("GROUP", email) for email in groups]
        self.groups[address] = [
            {
                "kind": "admin#directory#member",
                "id": f"m{next(self._ids)}",
                "email": email,
                "role": "MEMBER",
                "type": kind,
            }
            for kind, email in entries
        ]

    def _grant(self, kind: str, role: str, **fields) -> dict:
        return {"kind": "drive#permission", "id": f"p{next(self._ids)}", "type": kind, "role": role, **fields}

    def _touch(self, file_id: str) -> None:
        file = self.files[file_id]
        file["version"] = str(int(file["version"]) + 1)
        file["modifiedTime"] = (EPOCH + timedelta(minutes=next(self._tick))).isoformat().replace("+00:00", ".000Z")
        self.log.append(file_id)

    # -- what Drive says about a file ------------------------------------------------------------

    def _resource(self, file: dict) -> dict:
        """The file resource as the API shows it (before ``fields``)."""
        shown = {key: value for key, value in file.items() if not key.startswith("_")}
        shown.setdefault("inheritedPermissionsDisabled", False)
        if file.get("driveId"):
            shown["hasAugmentedPermissions"] = bool(file["_permissions"])
        elif file["_can_share"]:
            shown["permissions"] = self._effective(file)
        if file["mimeType"] not in EXPORTS and file["mimeType"] != FOLDER:
            shown.update(size=str(len(file["_text"].encode())), md5Checksum=f"md5-{file['version']}")
        return shown

    def _effective(self, file: dict) -> list[dict]:
        """The file's permissions and those it inherits from its folders (and its shared drive's,
        with ``permissionDetails``: Drive gives them for shared drives' items only). Limited
        access is not applied here: Drive's own list still names everyone, as far as its
        reference says."""
        drive = file.get("driveId")

        def entry(permission: dict, kind: str, source: str | None = None) -> dict:
            if not drive:
                return dict(permission)
            detail = {"permissionType": kind, "role": permission["role"], "inherited": source is not None}
            return {**permission, "permissionDetails": [{**detail, **({"inheritedFrom": source} if source else {})}]}

        entries = [entry(p, "file") for p in file["_permissions"]]
        parent = file["parents"][0]
        while parent in self.files:
            entries += [entry(p, "file", parent) for p in self.files[parent]["_permissions"]]
            parent = self.files[parent]["parents"][0]
        if drive:
            entries = [entry(p, "member", drive) for p in self.drives[drive]["permissions"]] + entries
        return entries

    def _visible(self, file: dict, request) -> bool:
        return not file.get("driveId") or request.arg("supportsAllDrives") == "true"

    # -- OAuth -----------------------------------------------------------------------------------

    def authorized(self, request) -> bool:
        return request.path == "/token" or super().authorized(request)

    def unauthorized(self, request):
        if request.path == "/token":
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        return _error(401, "authError", "Request had invalid authentication credentials.")

    @route("POST", r"/token")
    def token_grant(self, request):
        if request.arg("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return 400, {"error": "unsupported_grant_type"}
        head, body, signature = (request.arg("assertion") or "..").split(".")
        try:
            _KEY.public_key().verify(_unpad(signature), f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except Exception:  # noqa: BLE001 (any bad signature is the same answer)
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        claims = json.loads(_unpad(body))
        if claims.get("iss") != self.client_email:
            return 400, {"error": "invalid_grant", "error_description": "Invalid issuer."}
        if set(claims.get("scope", "").split()) & self.refused_scopes:  # not granted to the delegation
            return 401, {"error": "unauthorized_client", "error_description": "Client is unauthorized for a scope."}
        self.grants.append(claims)
        return 200, {"access_token": self.token, "expires_in": 3599, "token_type": "Bearer"}

    # -- Drive v3 --------------------------------------------------------------------------------

    @route("GET", r"/drive/v3/about")
    def about(self, request):
        if not request.arg("fields"):
            return _error(400, "required", "The 'fields' parameter is required for this method.")
        subject = self.grants[-1].get("sub") if self.grants else None
        user = {"kind": "drive#user", "displayName": "Sync", "emailAddress": subject or self.client_email}
        return 200, fields_keep({"kind": "drive#about", "user": user}, fields_parse(request.arg("fields")))

    @route("GET", r"/drive/v3/drives")
    def drives_list(self, request):
        drives = [{k: v for k, v in d.items() if k != "permissions"} for d in self.drives.values()]
        return _page(drives, request, "drives", default=10, most=100, kind="drive#driveList")

    @route("GET", r"/drive/v3/files")
    def files_list(self, request):
        everywhere = request.arg("includeItemsFromAllDrives") == "true"
        if everywhere and request.arg("supportsAllDrives") != "true":
            return _error(403, "teamDrivesParameterNotSupported", "includeItemsFromAllDrives needs supportsAllDrives.")
        corpora = request.arg("corpora", "user")
        try:
            test = _query(request.arg("q", ""))
        except ValueError as exc:
            return _error(400, "invalid", f"Invalid Value: {exc}")
        chosen = []
        for file in self.files.values():
            if corpora == "drive" and file.get("driveId") != request.arg("driveId"):
                continue
            if file.get("driveId") and not (everywhere or corpora == "drive"):
                continue
            if test(file):
                chosen.append(self._resource(file))
        shown = {"kind": None, "nextPageToken": None, "incompleteSearch": None, "files": DEFAULT_FILE_FIELDS}
        return _page(
            chosen, request, "files", default=100, most=1000, shown=shown, kind="drive#fileList", incompleteSearch=False
        )

    @route("GET", r"/drive/v3/files/([^/]+)")
    def files_get(self, request, file_id):
        file = self.files.get(file_id)
        if file is None or not self._visible(file, request):
            return _error(404, "notFound", f"File not found: {file_id}.")
        if request.arg("alt") == "media":
            if file["mimeType"] in EXPORTS or file["mimeType"] == FOLDER:
                return _error(403, "fileNotDownloadable", "Only files with binary content can be downloaded.")
            return 200, file["_text"].encode(), {"Content-Type": file["mimeType"]}
        return 200, fields_keep(self._resource(file), fields_parse(request.arg("fields")) or DEFAULT_FILE_FIELDS)

    @route("GET", r"/drive/v3/files/([^/]+)/export")
    def files_export(self, request, file_id):
        file = self.files.get(file_id)  # files.export has no supportsAllDrives: any drive's file
        if file is None:
            return _error(404, "notFound", f"File not found: {file_id}.")
        wanted = request.arg("mimeType")
        if EXPORTS.get(file["mimeType"]) != wanted:
            return _error(403, "fileNotExportable", "Export only supports Docs Editors files.")
        return 200, _office(file["mimeType"], file["name"], file["_text"]), {"Content-Type": wanted}

    @route("GET", r"/drive/v3/files/([^/]+)/permissions")
    def permissions_list(self, request, file_id):
        if file_id in self.drives:
            if request.arg("supportsAllDrives") != "true":
                return _error(404, "notFound", f"File not found: {file_id}.")
            entries = self.drives[file_id]["permissions"]
        else:
            file = self.files.get(file_id)
            if file is None or not self._visible(file, request):
                return _error(404, "notFound", f"File not found: {file_id}.")
            if not file["_can_share"]:
                return _error(403, "insufficientFilePermissions", "The user may not see this file's sharing.")
            entries = self._effective(file)
        return _page(entries, request, "permissions", default=100, most=100, kind="drive#permissionList")

    @route("GET", r"/drive/v3/changes/startPageToken")
    def changes_start(self, request):
        return 200, {"kind": "drive#startPageToken", "startPageToken": str(len(self.log) + 1)}

    @route("GET", r"/drive/v3/changes")
    def changes_list(self, request):
        token = request.arg("pageToken")
        if not token or not token.isdigit() or not 1 <= int(token) <= len(self.log) + 1:
            return _error(400, "invalid", "Invalid Value: pageToken")
        size = int(request.arg("pageSize", "100"))
        if not 1 <= size <= 1000:
            return _error(400, "invalid", "Invalid Value: pageSize")
        everywhere = request.arg("includeItemsFromAllDrives") == "true" and request.arg("supportsAllDrives") == "true"
        start = int(token) - 1
        end = min(start + size, len(self.log))
        latest = {file_id: n for n, file_id in enumerate(self.log)}  # a file shows at its latest change only
        changes = []
        for n in range(start, end):
            file_id = self.log[n]
            if latest[file_id] != n:
                continue
            file = self.files.get(file_id)
            if file is not None and file.get("driveId") and not everywhere:
                continue
            when = (EPOCH + timedelta(minutes=n)).isoformat().replace("+00:00", ".000Z")
            change = {"kind": "drive#change", "changeType": "file", "fileId": file_id, "time": when}
            changes.append({**change, "removed": file is None, **({"file": self._resource(file)} if file else {})})
        answer = {"kind": "drive#changeList", "changes": changes}
        if end < len(self.log):
            answer["nextPageToken"] = str(end + 1)
        else:
            answer["newStartPageToken"] = str(len(self.log) + 1)
        return 200, fields_keep(answer, fields_parse(request.arg("fields")))

    # -- Admin SDK Directory ---------------------------------------------------------------------

    @route("GET", r"/admin/directory/v1/groups/([^/]+)/members")
    def members_list(self, request, key):
        key = unquote(key)  # the client sends board%40example.com
        if key not in self.groups:
            return _error(404, "notFound", f"Resource Not Found: {key}")
        entries = list(self.groups[key])
        if request.arg("includeDerivedMembership") == "true":
            seen = {key}
            for entry in entries:
                if entry["type"] == "GROUP" and entry["email"] not in seen and entry["email"] in self.groups:
                    seen.add(entry["email"])
                    entries += [e for e in self.groups[entry["email"]] if e not in entries]
        request.query.setdefault("pageSize", request.query.get("maxResults", ["200"]))
        return _page(entries, request, "members", default=200, most=200, kind="admin#directory#members")


def _unpad(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _page(entries: list, request, name: str, *, default: int, most: int, shown=None, **extra):
    """The answer with one page of ``entries`` by ``pageSize`` and ``pageToken`` (an offset):
    ``{name: [...], "nextPageToken": ..., **extra}`` with the ``fields`` asked for (else ``shown``);
    a 400 for a size past ``most``."""
    size = int(request.arg("pageSize", str(default)))
    if not 1 <= size <= most:
        return _error(400, "invalid", f"Invalid Value: pageSize must be between 1 and {most}")
    start = int(request.arg("pageToken", "0") or 0)
    answer = {**extra, name: entries[start : start + size]}
    if start + size < len(entries):
        answer["nextPageToken"] = str(start + size)
    return 200, fields_keep(answer, fields_parse(request.arg("fields")) or shown)


_TERM = re.compile(
    r"^(?:trashed\s*=\s*(true|false)|mimeType\s*(=|!=)\s*'([^']*)'|'([^']*)'\s+in\s+parents)$", re.IGNORECASE
)


def _query(q: str):
    """A test of a file for Drive's ``q``: terms of ``trashed``, ``mimeType`` and ``in parents``
    joined by ``and`` (``ValueError`` for anything else)."""
    tests = []
    for term in filter(None, (t.strip() for t in re.split(r"\s+and\s+", q.strip(), flags=re.IGNORECASE))):
        match = _TERM.match(term)
        if not match:
            raise ValueError(term)
        trashed, operator, mime, parent = match.groups()
        if trashed is not None:
            wanted = trashed.lower() == "true"
            tests.append(lambda f, t=wanted: f["trashed"] == t)
        elif operator is not None:
            tests.append(lambda f, o=operator, m=mime: (f["mimeType"] == m) == (o == "="))
        else:
            tests.append(lambda f, p=parent: p in f["parents"])
    return lambda file: all(test(file) for test in tests)


def _office(mime: str, name: str, text: str) -> bytes:
    """``text`` as Drive exports it: a .docx (lines starting "# " are headings), an .xlsx (one
    row per line, cells split at ","), a .pptx (one slide per paragraph, its first line the title)."""
    out = io.BytesIO()
    if mime == DOC:
        import docx

        document = docx.Document()
        for line in text.splitlines():
            if line.startswith("# "):
                document.add_heading(line[2:], level=1)
            elif line.strip():
                document.add_paragraph(line)
        document.save(out)
    elif mime == SHEET:
        import openpyxl

        book = openpyxl.Workbook()
        for line in text.splitlines():
            book.active.append([cell.strip() for cell in line.split(",")])
        book.save(out)
    else:
        import pptx

        deck = pptx.Presentation()
        for block in filter(None, (b.strip() for b in text.split("\n\n"))):
            title, _, body = block.partition("\n")
            slide = deck.slides.add_slide(deck.slide_layouts[1])
            slide.shapes.title.text = title
            slide.placeholders[1].text = body or title
        deck.save(out)
    return out.getvalue()


def company(standin: DriveStandIn) -> dict[str, str]:
    """Fill ``standin`` with a small company's Drive; returns the ids by name.

    My Drive (owner@example.com): the folder "Handbook" with "Onboarding guide" (shared with the
    example.com domain), "Salary bands" (Alice), "expenses.md" (anyone with the link) and
    "logo.png" (not readable); "Board deck", shared with the board@example.com group (Carol, and
    Dave through the nested execs@example.com). The shared drive "Engineering" (Alice organizes,
    Bob is a member) with "Deploy runbook", the sheet "Quarterly revenue" and "Offsite plan", also
    shared with Dave.
    """
    ids = {"Handbook": standin.add_folder("Handbook")}
    ids["Engineering"] = standin.add_drive("Engineering", organizers=["alice@example.com"], members=["bob@example.com"])
    files = [
        ("Onboarding guide", "# Welcome\nNew joiners get a laptop on their first day and meet their buddy.",
         {"parent": "Handbook", "domain": "example.com"}),
        ("Salary bands", "Salary bands for 2025: engineers at level three earn between 90k and 110k.",
         {"parent": "Handbook", "readers": ["alice@example.com"]}),
        ("expenses.md", "# Expenses\n\nTravel expenses are reimbursed within 30 days.",
         {"parent": "Handbook", "mime": "text/markdown", "anyone": True}),
        ("logo.png", "not really a picture", {"parent": "Handbook", "mime": "image/png"}),
        ("Board deck", "Acquisition of Globex\nThe board approved the Globex acquisition for spring.",
         {"mime": SLIDES, "groups": ["board@example.com"]}),
        ("Deploy runbook", "# Deploys\nDeploy freeze starts Friday for the payment service.", {"drive": "Engineering"}),
        ("Quarterly revenue", "Region,Revenue\nEMEA,1200\nAPAC,900", {"drive": "Engineering", "mime": SHEET}),
        ("Offsite plan", "The engineering offsite happens in Lisbon in October.",
         {"drive": "Engineering", "readers": ["dave@example.com"]}),
    ]  # fmt: skip
    for name, text, options in files:
        places = {key: ids[options[key]] for key in ("parent", "drive") if key in options}
        ids[name] = standin.add_file(name, text, **{**options, **places})
    standin.add_group("board@example.com", ["carol@example.com"], groups=["execs@example.com"])
    standin.add_group("execs@example.com", ["dave@example.com"])
    return ids
