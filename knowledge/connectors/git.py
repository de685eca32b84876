"""The git connector: every supported file of a branch of a git repository, read with dulwich.

``source.location`` is a repository on the workers' disk (a path or a ``file://`` URL: a working
copy or a bare repository, read in place, ``knowledge.connectors.git_local``) or an http(s) URL,
fetched into a bare repository kept at ``KB_DATA_DIR/git/<tenant id>/<source id>`` (created and
fetched in full the first time, then only new commits are fetched). Either way, files are read
from the commit at the tip of ``source.branch`` (empty: the repository's default branch, its
``HEAD``), never from a working tree, so uncommitted edits do not count.

* Selected files: regular files with a supported extension that match the source's include and
  exclude globs; hidden files and folders, symbolic links and submodules are skipped.
* A file's key is its path in the repository and its fingerprint its blob id, so a file whose
  content did not change since the last sync is neither read nor embedded.
* Document ids are ``<repository name>/<path without suffix>`` (the repository name is the last
  part of the location, without ``.git``), so two repositories' READMEs do not clash; JSONL
  files name their own documents. A document's URI is ``uri_prefix`` + the path (with its
  suffix), or the path itself without a prefix.
* ``published_at`` is the committer date (UTC) of the last commit that gave the file its
  current content. Only the files read in this sync are dated, in one walk of the history from
  the tip that ends as soon as they all are, so a sync with few changes stays cheap
  (``knowledge.connectors.git_history``).
* A renamed file is a deleted document at the old path and a new one at the new path.

The tenant boundary (``docs/security.md``), checked at every sync:

* a local path or ``file://`` URL is read only inside a folder the operator granted to the
  tenant (``knowledge.folder_grants``), still the folder granted; it is opened by descriptor
  from ``/`` down, without following links, and read through those descriptors
  (``knowledge.connectors.git_local``), so a repository swapped after the check is not read;
  every link inside the object store and every ``objects/info/alternates`` entry must resolve
  inside a grant too, so a repository cannot borrow another tenant's objects;
* ``http(s)://`` remotes connect through ``core.outbound`` (public addresses only, every
  redirect hop included, no proxy from the environment); ``ssh://``, ``git://`` and
  ``user@host:path`` remotes are refused (they would use the server's own keys or reach any port);
* dulwich gets a configuration of its own (``_transport_config``): the workers' ``~/.gitconfig``,
  ``$XDG_CONFIG_HOME/git/config``, ``/etc/gitconfig`` and ``GIT_CONFIG_*`` are never read, so a
  ``url.<base>.insteadOf`` there cannot turn a checked https URL into ssh (the server's keys) or
  ``file://`` (another tenant's repository), and the client dulwich makes must still be an HTTP
  one to the location's own host (``_transport_check``);
* a fetch downloads at most ``KB_GIT_MAX_MB``, its responses unpack (``Content-Encoding``) to at
  most as much, and it lasts at most ``KB_GIT_TIMEOUT_S`` (each read waits at most
  ``HTTP_TIMEOUT_S``); past any it stops, and nothing of it is kept (``knowledge.connectors.git_fetch``);
* every file's blob is sized from its headers before it is inflated
  (``knowledge.connectors.git_objects``), in a fetched and a local repository alike: one that
  inflates past ``KB_PARSE_MAX_UNPACKED_MB``, or past ``KB_PARSE_MAX_RATIO`` times its stored size
  (over 1 MiB), is skipped and named in the run's errors with its size and ratio;
* the cache lives in the data directory, which can never be granted.

A fetch that fails says only what a tenant may know: "address not allowed", "could not fetch",
no repository there (404), or the server wants credentials.
"""

from __future__ import annotations

import re
import shutil
import stat
import time
import zlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from dulwich.client import AbstractHttpGitClient, HTTPUnauthorized, get_transport_and_path
from dulwich.config import ConfigDict
from dulwich.errors import NotGitRepository
from dulwich.objects import Commit, Tree
from dulwich.repo import Repo

from core.errors import ApplicationError, InvalidInput
from core.outbound import FETCH_FAILED, NOT_ALLOWED, AddressNotAllowed, FetchLimitExceeded, guarded_pool_manager
from core.uploads import size_text
from knowledge.connectors.base import FileConnector, Item, SourceUnreachable, path_selected
from knowledge.connectors.git_fetch import FetchLimit, fetch_limited
from knowledge.connectors.git_history import commit_dates
from knowledge.connectors.git_local import local_repository_open
from knowledge.connectors.git_objects import ObjectDamaged, ObjectSizes
from knowledge.folder_grants import NOT_ALLOWED as LOCATION_NOT_ALLOWED
from knowledge.folder_grants import folder_location_check
from knowledge.ingestion.readers import RATIO_EXEMPT_BYTES, SUPPORTED_EXTENSIONS, read_bytes
from knowledge.models import Source

# Seconds an HTTP(S) fetch may wait for the server before the sync gives up on it.
HTTP_TIMEOUT_S = 60

_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:")
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def location_is_url(location: str) -> bool:
    """Whether a git ``location`` is fetched (a URL or ``user@host:path``) rather than read in place."""
    return "://" in location or bool(_SCP_LIKE.match(location))


def repository_name(location: str) -> str:
    """The last part of a repository's location without ``.git``: ``https://host/org/docs.git`` -> ``docs``.

    ``repository`` when the location has no usable last part.
    """
    location = location.strip().rstrip("/\\")
    if location.endswith(("/.git", "\\.git")):  # a working copy's .git folder
        location = location[:-5]
    name = re.split(r"[/\\:]", location)[-1]
    name = name.removesuffix(".git")
    return name or "repository"


def cache_folder(source: Source) -> Path:
    """Where a URL source's repository is fetched to: ``KB_DATA_DIR/git/<tenant id>/<source id>``."""
    return Path(settings.KB_DATA_DIR) / "git" / str(source.tenant_id) / str(source.pk)


def _shown(location: str) -> str:
    """``location`` without a password or token (for messages)."""
    if "://" not in location:
        return location
    parts = urlsplit(location)
    if parts.username is None and parts.password is None:
        return location
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=host))


def _transport_config() -> ConfigDict:
    """dulwich's configuration for a fetch: an HTTP timeout (``HTTP_TIMEOUT_S``) and nothing else.

    Never the workers' own git configuration (``~/.gitconfig``, ``/etc/gitconfig``,
    ``GIT_CONFIG_*``): its ``url.<base>.insteadOf`` rewrites would apply after the location's
    checks (an https URL turned into ssh with the server's keys, or into another tenant's
    ``file://`` repository), and its ``http.*`` settings (extra headers, proxies) to every tenant.
    """
    config = ConfigDict()
    config.set((b"http",), b"timeout", str(HTTP_TIMEOUT_S).encode())
    return config


def _transport_check(location: str, client, path: str) -> None:
    """Refuse (``SourceUnreachable``) a client that would not fetch ``location`` itself: anything but
    an HTTP client, or one whose URL names another scheme, host or port than the checked location."""
    wanted = urlsplit(location)
    try:
        got = urlsplit(client.get_url(path)) if isinstance(client, AbstractHttpGitClient) else None
        same = got is not None and (got.scheme, got.hostname, got.port) == (wanted.scheme, wanted.hostname, wanted.port)
    except ValueError:
        same = False
    if not same:
        raise SourceUnreachable(
            f"{_shown(location)}: the git client would not fetch this URL itself (a rewrite of it?); nothing was "
            "fetched.",
            code=AddressNotAllowed.code,
        )


def _blob_refusal(path: str, sizes: ObjectSizes, blob_id: bytes) -> str:
    """Why the blob ``blob_id`` of the file ``path`` is not read, from its headers alone (nothing is
    inflated): it unpacks past ``KB_PARSE_MAX_UNPACKED_MB`` (or a base of its delta chain does), or
    past ``KB_PARSE_MAX_RATIO`` times its stored size (above 1 MiB). "" when it may be read.

    ``KeyError`` when the blob is missing; ``ObjectDamaged``, ``OSError`` or ``zlib.error`` when its
    headers cannot be read."""
    cap, max_ratio = settings.KB_PARSE_MAX_UNPACKED_MB * 2**20, settings.KB_PARSE_MAX_RATIO
    sized = sizes.of(blob_id)
    if sized.largest <= cap and sized.size <= RATIO_EXEMPT_BYTES:
        return ""
    sized = sizes.of(blob_id, stored=True)
    if sized.largest > cap:
        return (
            f"{path}: the file unpacks to {size_text(sized.largest)} from {size_text(sized.stored)} stored in the "
            f"repository ({sized.ratio:,} times), more than the limit of {size_text(cap)}; skipped. The file may "
            "be built to exhaust the server."
        )
    if sized.size > max(sized.stored, 1) * max_ratio:
        return (
            f"{path}: the file unpacks to {sized.ratio:,} times its stored size ({size_text(sized.size)} from "
            f"{size_text(sized.stored)}); the limit is {max_ratio} times; skipped. The file may be built to exhaust "
            "the server."
        )
    return ""


def _fetch_refusal(shown: str, exc: Exception) -> SourceUnreachable:
    """The ``SourceUnreachable`` for what talking to a remote raised (a fetch, ``ls-remote``)."""
    if isinstance(exc, (FetchLimit, FetchLimitExceeded)):
        return SourceUnreachable(f"{shown}: {exc}; nothing of it was kept.")
    if isinstance(exc, AddressNotAllowed):
        return SourceUnreachable(f"{shown}: {NOT_ALLOWED}.", code=AddressNotAllowed.code)
    if isinstance(exc, NotGitRepository):
        return SourceUnreachable(f"{shown}: the repository could not be fetched (no repository there).")
    if isinstance(exc, HTTPUnauthorized):
        return SourceUnreachable(
            f"{shown}: the repository could not be fetched (the server asks for credentials).", code="unauthorized"
        )
    # network, protocol: anything the transport raises, told apart no further
    return SourceUnreachable(f"{shown}: the repository could not be fetched ({FETCH_FAILED}).")


def _reason(exc: BaseException) -> str:
    """An exception as a short text, without credentials from any URL it quotes."""
    text = re.sub(r"//[^/@\s]+@", "//", str(exc).strip())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class GitConnector(FileConnector):
    """Reads a branch of the repository at ``source.location`` (see the module docstring)."""

    kind = "git"

    def __init__(self, source: Source):
        self.source = source
        self.location = source.location.strip()
        self.branch = source.branch.strip()
        self.name = repository_name(self.location)

    # -- the repository and its tip ---------------------------------------------------------

    def _open(self) -> tuple[Repo, bytes, object]:
        """The repository to read, the commit id to read, and what to close when done.

        ``SourceUnreachable`` when the location is not allowed (code ``location_not_allowed`` or
        ``invalid_location``), the repository is missing, cannot be fetched or lacks the branch.
        """
        if location_is_url(self.location) and not self._file_url():
            repo, tip = self._fetched()
            return repo, tip, repo
        local = (urlsplit(self.location).path or "/") if self._file_url() else self.location
        path = self._granted(local)
        if not path.exists():
            raise SourceUnreachable(f"{self.location}: no such repository (or the workers cannot read it).")
        opened = local_repository_open(
            tenant_id=self.source.tenant_id, path=path, shown=_shown(self.location), granted=self._granted
        )
        try:
            return opened.repo, opened.tip(self.branch), opened
        except BaseException:
            opened.close()
            raise

    def _file_url(self) -> bool:
        """Whether the location is a ``file://`` URL, read in place like a path."""
        return self.location.lower().startswith("file://")

    def _granted(self, location: str) -> Path:
        """The real path of a local ``location`` if a grant of the tenant holds it; ``SourceUnreachable`` otherwise."""
        try:
            return folder_location_check(tenant=self.source.tenant_id, location=location)
        except InvalidInput as exc:
            raise SourceUnreachable(exc.message, code=LOCATION_NOT_ALLOWED) from None

    @staticmethod
    def _branches(refs) -> str:
        heads = sorted(
            r.removeprefix(b"refs/heads/").decode(errors="replace") for r in refs if r.startswith(b"refs/heads/")
        )
        return ", ".join(heads) or "none"

    def _cache(self) -> Repo:
        """The bare repository URL sources are fetched into, created when missing (or unusable)."""
        folder = cache_folder(self.source)
        if folder.exists():
            try:
                return Repo(str(folder))
            except (NotGitRepository, OSError):
                shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        return Repo.init_bare(str(folder))

    def _client(self, deadline: float):
        """(dulwich client, path) for an http(s) remote behind ``core.outbound`` whose responses may
        read at most ``KB_GIT_MAX_MB``, and unpack to at most as much (``Content-Encoding``), until
        ``deadline``; made without the workers' git configuration (``_transport_config``,
        ``_transport_check``). ``SourceUnreachable`` for any other kind of URL."""
        shown = _shown(self.location)
        scheme = urlsplit(self.location).scheme.lower() if "://" in self.location else "ssh"
        if scheme not in ("http", "https"):
            raise SourceUnreachable(
                f"{shown}: {scheme} remotes are not supported; use an https:// URL.", code="invalid_location"
            )
        pool_manager = guarded_pool_manager(
            timeout=HTTP_TIMEOUT_S,
            max_bytes=settings.KB_GIT_MAX_MB * 2**20,
            max_decoded_bytes=settings.KB_GIT_MAX_MB * 2**20,
            deadline=deadline,
            what="the repository",
            headers={"User-Agent": "git/dulwich"},
        )
        try:
            client, path = get_transport_and_path(self.location, config=_transport_config(), pool_manager=pool_manager)
        except ValueError as exc:
            raise SourceUnreachable(f"{shown}: not a repository URL ({exc}).") from None
        _transport_check(self.location, client, path)
        return client, path

    def _fetched(self) -> tuple[Repo, bytes]:
        """Fetch the branch (or the remote ``HEAD``) into the cache; (cache repository, tip)."""
        shown = _shown(self.location)
        deadline = time.monotonic() + settings.KB_GIT_TIMEOUT_S
        client, path = self._client(deadline)
        try:
            repo = self._cache()
        except OSError as exc:
            raise SourceUnreachable(f"{shown}: the cache folder cannot be written ({_reason(exc)}).") from None
        found: dict[str, object] = {}

        def determine_wants(refs: Mapping[bytes, bytes], depth: int | None = None) -> list[bytes]:
            found["refs"] = dict(refs)
            ref = self._remote_ref(refs)
            tip = refs.get(ref) if ref else None
            if tip is None:
                return []
            found["ref"], found["tip"] = ref, tip
            return [] if tip in repo.object_store else [tip]

        try:
            try:
                result = fetch_limited(client, path, repo, determine_wants, deadline=deadline)
            except Exception as exc:
                raise _fetch_refusal(shown, exc) from None
            if "tip" not in found:
                refs = found.get("refs") or result.refs or {}
                if self.branch:
                    raise SourceUnreachable(f"{shown}: no branch {self.branch!r} (branches: {self._branches(refs)}).")
                raise SourceUnreachable(f"{shown}: the repository has no commits yet.")
            tip, ref = found["tip"], found["ref"]
            # Keep the tip under its ref, like a bare clone: the next fetch tells the server it has it.
            if ref == b"HEAD" and (default := (result.symrefs or {}).get(b"HEAD")):
                repo.refs[default] = tip
                repo.refs.set_symbolic_ref(b"HEAD", default)
            else:
                repo.refs[ref] = tip
            if not isinstance(repo.get_object(tip), Commit):
                raise SourceUnreachable(f"{shown}: {ref.decode()} is not a commit.")
            return repo, tip
        except BaseException:
            repo.close()
            raise

    def reach(self) -> str:
        """The branch's tip (or the remote ``HEAD``): a remote's advertised refs (``ls-remote``,
        through ``core.outbound``'s guard, within ``KB_GIT_TIMEOUT_S``), or a granted local
        repository opened as a sync opens it. Nothing is fetched or walked; ``SourceUnreachable``
        as ``items`` says."""
        shown = _shown(self.location)
        if not location_is_url(self.location) or self._file_url():
            _repo, tip, opened = self._open()
            opened.close()
        else:
            client, path = self._client(time.monotonic() + settings.KB_GIT_TIMEOUT_S)
            try:
                refs = dict(client.get_refs(path).refs)
            except Exception as exc:
                raise _fetch_refusal(shown, exc) from None
            ref = self._remote_ref(refs)
            tip = refs.get(ref) if ref else None
            if tip is None:
                if self.branch:
                    raise SourceUnreachable(f"{shown}: no branch {self.branch!r} (branches: {self._branches(refs)}).")
                raise SourceUnreachable(f"{shown}: the repository has no commits yet.")
        where = f"branch {self.branch!r}" if self.branch else "its default branch"
        return f"{shown}: {where} at {tip.decode()[:12]}"

    def _remote_ref(self, refs: Mapping[bytes, bytes]) -> bytes | None:
        """Which advertised ref to read: the branch's, else ``HEAD`` (else main, master or the only branch)."""
        if self.branch:
            return b"refs/heads/" + self.branch.encode()
        if b"HEAD" in refs:
            return b"HEAD"
        heads = [r for r in refs if r.startswith(b"refs/heads/")]
        for name in (b"refs/heads/main", b"refs/heads/master"):
            if name in refs:
                return name
        return heads[0] if len(heads) == 1 else None

    # -- files ------------------------------------------------------------------------------

    def _files(self, repo: Repo, tree_id: bytes, prefix: bytes = b"") -> Iterator[tuple[str, bytes, bytes]]:
        """(path, path as stored, blob id) of every selected, supported, not hidden regular file under
        ``tree_id``. ``KeyError`` when a tree is missing (a damaged repository)."""
        tree = repo.object_store[tree_id]
        if not isinstance(tree, Tree):
            raise KeyError(tree_id)
        for entry in tree.iteritems():
            if entry.path.startswith(b"."):
                continue
            raw = prefix + entry.path
            if stat.S_ISDIR(entry.mode):
                yield from self._files(repo, entry.sha, raw + b"/")
                continue
            if not stat.S_ISREG(entry.mode):  # symbolic links, submodules
                continue
            path = raw.decode("utf-8", errors="replace")
            if PurePosixPath(path).suffix.lower() in SUPPORTED_EXTENSIONS and path_selected(
                path, self.source.include, self.source.exclude
            ):
                yield path, raw, entry.sha

    def _read(self, repo: Repo, sizes: ObjectSizes, path: str, blob_id: bytes, published_at: datetime | None) -> Item:
        fingerprint = blob_id.decode("ascii")
        try:
            refusal = _blob_refusal(path, sizes, blob_id)
            if refusal:
                return Item(path, fingerprint, error=refusal)
            data = repo.object_store[blob_id].as_raw_string()
        except KeyError:
            return Item(path, fingerprint, error=f"{path}: the file's content is missing from the repository.")
        except (ObjectDamaged, OSError, zlib.error):
            return Item(
                path, fingerprint, error=f"{path}: the file's content cannot be read (the repository is damaged)."
            )
        if data.startswith(_LFS_POINTER):
            return Item(path, fingerprint, error=f"{path}: the file is stored in Git LFS, which is not read.")
        suffix = PurePosixPath(path).suffix
        try:
            documents = read_bytes(
                data,
                name=path,
                external_id=f"{self.name}/{path.removesuffix(suffix)}",
                uri=f"{self.source.uri_prefix}{path}" if self.source.uri_prefix else path,
                fmt=self.source.text_format or None,
            )
        except ApplicationError as exc:
            return Item(path, fingerprint, error=exc.message)
        for document in documents:
            if document.published_at is None:  # JSONL rows may carry their own dates
                document.published_at = published_at
        return Item(path, fingerprint, documents=documents)

    def items(self, known: Mapping[str, str]) -> Iterator[Item]:
        """Yield an ``Item`` per selected file at the branch tip (see ``knowledge.connectors.base``).

        ``SourceUnreachable`` when the repository is missing or is not one, the branch does not
        exist, or the fetch fails; nothing is yielded then.
        """
        repo, tip, opened = self._open()
        sizes = ObjectSizes(repo.object_store)
        try:
            try:
                commit = repo[tip]
                files = sorted(self._files(repo, commit.tree))
                changed = {raw: blob for path, raw, blob in files if known.get(path) != blob.decode("ascii")}
                dates = commit_dates(repo, tip, changed)
            except KeyError as exc:
                raise SourceUnreachable(
                    f"{_shown(self.location)}: the repository is damaged ({_reason(exc)})."
                ) from None
            for path, raw, blob in files:
                if known.get(path) == blob.decode("ascii"):
                    yield Item(path, blob.decode("ascii"), unchanged=True)
                else:
                    yield self._read(repo, sizes, path, blob, dates.get(raw))
        finally:
            sizes.close()
            opened.close()
