"""Parsing in a child process with its own memory and CPU limits.

The readers of formats that decompress (PDF, and the zip-based .docx .pptx .xlsx .odt .epub), of
reST and HTML files, and the web connector's reading of a page, run through ``parse_isolated``:
the process forks, the child lowers its own limits, parses, sends the result (a pickled list of
``ReadDocument``, the pictures an office reader keeps among them, or the pickled
``ApplicationError``) back through a pipe and leaves with
``os._exit``; the parent waits for it at most ``KB_PARSE_TIMEOUT_S`` wall seconds (+ ``GRACE_S``)
and kills it after that. A file that would take gigabytes or minutes to read costs the child,
never the web process or the worker that asked; every path that reads such a file goes through
here (upload jobs, folder and git syncs, ``manage.py ingest``), because
``knowledge.ingestion.readers.read_bytes`` does.

The child's limits:

* ``RLIMIT_AS``: its address space when it starts + ``KB_PARSE_MEMORY_MB`` (what the fork shares
  with the parent is already mapped and does not count again);
* ``RLIMIT_CPU``: ``KB_PARSE_TIMEOUT_S`` seconds, plus what OCR adds (``SIGXCPU``; ``SIGKILL`` one
  second after the most OCR may add);
* ``RLIMIT_CORE``: 0, so a crash never writes a core file of the size of the parent;
* and it closes the file descriptors it inherited (database and broker connections, sockets), so
  a parser subverted by its file cannot use them.

How an ending becomes an error (all ``InvalidInput``, a 400 or a failed job, naming the file):

* the child raised an ``ApplicationError`` (a cap, a damaged file): that error, its code kept;
* it ran out of memory (``MemoryError``; SIGKILLed, not for CPU; or a library's "cannot read"
  after using 3/4 of its memory or more, as lxml says "unknown error"): ``document_too_large``;
* it passed its CPU time (``SIGXCPU``) or the wall time: ``parse_timeout``;
* it raised anything else, crashed, or sent nothing readable: ``parse_failed``.

OCR extends the time: each image a reader OCRs in the child (``knowledge.ingestion.ocr``) calls
``parse_time_extend(KB_OCR_PAGE_TIMEOUT_S)``, which adds that many seconds to the child's CPU
limit and to the parent's wall deadline, up to ``KB_OCR_MAX_PAGES`` pages' worth in all. The child
writes the seconds it was given into a small shared mapping made before the fork (``_TimeGrant``);
the parent reads it while it waits and never grants more than that cap, whatever a subverted child
writes there. A file without scanned pages keeps the short limit; a scanned one gets the time its
pages need, found as the reader meets them. The CPU limit counts all of the child's threads
(RapidOCR runs on one; Tesseract is a process of its own, under the CPU limit it inherits, and
finishes its page even when the child is killed at the wall deadline). A caller may allow more
(``more_time_s``): the PDF reader adds a little time for each page it reads
(``knowledge.ingestion.pdf.PAGE_TIMEOUT_S``), drawn from the same grant.

The parent unpickles the reply with an allow-list of the classes a reply holds, so even a child
subverted by a malicious file cannot make the parent build an arbitrary object. A parse that
calls ``parse_isolated`` again (a web page read as Markdown or HTML) runs that parse in the same
child, under the same limits.

The cost per file (fork, pipe, wait), measured with ``python benchmarks/parse_sandbox.py`` on a
2-core VM (Linux 6.18, Python 3.11, medians of 30 reads): 24-32 ms for a one-page PDF and 31-41 ms
for a 37 KB .docx, from a 231 MB to a 363 MB process (the embedder loaded); it grows with the
resident size of the process that forks (its page tables are copied, then torn down with the
child). Details in ``docs/security.md`` ("Uploads and parsing").
"""

from __future__ import annotations

import gc
import importlib
import io
import logging
import math
import mmap
import os
import pickle
import resource
import select
import signal
import struct
import time
import zoneinfo
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.conf import settings

from core.errors import ApplicationError, InvalidInput

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Wall seconds the parent waits beyond KB_PARSE_TIMEOUT_S (the child's start and its reply).
GRACE_S = 2.0
# The most the parent reads back: a reply is the extracted text (KB_PARSE_MAX_CHARS, up to 4 bytes
# each in UTF-8), its sections and the pictures an office reader keeps (at most this many bytes of
# PNGs: ``knowledge.ingestion.office_images``); anything longer is not a reply of ours.
_REPLY_OVERHEAD = 16 * 2**20
REPLY_PICTURES_BYTES = 32 * 2**20
# A library's "cannot read this file" after the child's address space grew by this share of its
# memory limit (``VmPeak``) is taken for running out of memory.
_LIBRARY_FAILURES = {"invalid_document", "invalid_pdf", "parse_failed"}
_NEAR_THE_LIMIT = 0.75
# The child's first words: its resident memory (kB) when it starts, before the pickled reply.
_HEADER = struct.Struct("<Q")
# Exit statuses of the child (its reply says what happened; these only matter without one).
_EXIT_OK, _EXIT_BROKEN = 0, 70
# True in a child: a parse_isolated there parses at once (it is already limited).
_in_child = False
# In a child: the seconds its OCR added to its time limits, and its CPU limit before them.
_grant: _TimeGrant | None = None
_cpu_base_s = 0


def parse_isolated(parse: Callable[[], T], *, name: str, preload: Iterable[str] = (), more_time_s: float = 0.0) -> T:
    """Run ``parse()`` in a forked child under the limits above and return what it returned.

    ``name`` names the file in error messages. ``preload`` lists modules to import in this process
    first (once), so the child does not import them again for every file. ``more_time_s``: the most
    seconds ``parse_time_extend`` may add besides OCR's. The value returned must
    be made of ``ReadDocument``, ``Section``, datetimes and plain Python data (the allow-list).

    Raises the ``ApplicationError`` the parse raised, or ``InvalidInput`` with code
    ``document_too_large`` (memory), ``parse_timeout`` (CPU or wall time) or ``parse_failed``.
    Called in a child (a parse that reads another file's bytes), it runs ``parse()`` there.
    """
    if _in_child:
        return parse()
    for module in preload:
        importlib.import_module(module)
    memory_mb, timeout_s = settings.KB_PARSE_MEMORY_MB, settings.KB_PARSE_TIMEOUT_S
    grant = _TimeGrant(most=settings.KB_OCR_MAX_PAGES * settings.KB_OCR_PAGE_TIMEOUT_S + max(more_time_s, 0.0))
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    try:
        pid = os.fork()
    except OSError:  # no process to be had (EAGAIN, ENOMEM): the caller's job fails or retries
        os.close(read_fd)
        os.close(write_fd)
        grant.close()
        raise
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child(parse, write_fd, name=name, memory_mb=memory_mb, timeout_s=timeout_s, grant=grant)
    os.close(write_fd)
    start_rss_kb, reply, timed_out = _collect(read_fd, pid, deadline=started + timeout_s + GRACE_S, grant=grant)
    _, status, usage = os.wait4(pid, 0)
    timeout_s += grant.seconds()
    grant.close()
    wall_s, cpu_s = time.monotonic() - started, usage.ru_utime + usage.ru_stime
    logger.debug(
        "Parsed %s in a child in %.3f s (%.2f s CPU; its resident memory grew by %d MB)",
        name,
        wall_s,
        cpu_s,
        (usage.ru_maxrss - start_rss_kb) // 1024,
        extra={
            "parse_wall_s": wall_s,
            "parse_cpu_s": cpu_s,
            "child_peak_rss_kb": usage.ru_maxrss,
            "child_start_rss_kb": start_rss_kb,
        },
    )
    if timed_out or _killed_by(status, signal.SIGXCPU) or (_killed_by(status, signal.SIGKILL) and cpu_s >= timeout_s):
        raise InvalidInput(
            f"{name}: reading the file took longer than {timeout_s:g} s, the limit; it may be damaged or built "
            "to exhaust the server, or split it into smaller files.",
            code="parse_timeout",
        )
    if reply is not None:
        outcome, value = reply
        if outcome == "error":
            raise value
        return value
    if _killed_by(status, signal.SIGKILL):  # not by us, not for CPU: the kernel, for memory
        raise _too_large(name, memory_mb)
    how = f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) else "no reply"
    raise InvalidInput(
        f"{name}: the reader stopped unexpectedly ({how}); the file may be damaged.", code="parse_failed"
    )


def _too_large(name: str, memory_mb: int) -> InvalidInput:
    return InvalidInput(
        f"{name}: reading the file needs more than {memory_mb} MB of memory, the limit; split it into smaller files.",
        code="document_too_large",
    )


def _killed_by(status: int, signum: int) -> bool:
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signum


def _collect(read_fd: int, pid: int, *, deadline: float, grant: _TimeGrant) -> tuple[int, tuple | None, bool]:
    """Read the child's reply until it closes the pipe or ``deadline`` (monotonic) plus the
    seconds ``grant`` holds passes; then SIGKILL it. Returns (the child's resident memory when it
    began, in kB, or 0 if it never said;
    the unpickled reply or None; whether the deadline passed)."""
    limit = _HEADER.size + settings.KB_PARSE_MAX_CHARS * 4 + _REPLY_OVERHEAD + REPLY_PICTURES_BYTES
    received = bytearray()
    timed_out = False
    poller = select.poll()  # not select(): a busy process's descriptors may be past 1024
    poller.register(read_fd, select.POLLIN)
    try:
        while True:
            remaining = deadline + grant.seconds() - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if not poller.poll(max(remaining * 1000, 1)):
                continue
            chunk = os.read(read_fd, 2**20)
            if not chunk:
                break
            received += chunk
            if len(received) > limit:
                break
    finally:
        os.close(read_fd)
        if timed_out or len(received) > limit:
            _kill(pid)
    start_rss_kb = _HEADER.unpack_from(received)[0] if len(received) >= _HEADER.size else 0
    body = received[_HEADER.size :]
    if timed_out or len(received) > limit or not body:
        return start_rss_kb, None, timed_out
    try:
        return start_rss_kb, _ReplyUnpickler(io.BytesIO(body)).load(), False
    except Exception:  # a reply cut short (the child died writing it) or not ours
        logger.warning("The parse child's reply could not be read", exc_info=True)
        return start_rss_kb, None, False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _child(
    parse: Callable[[], object], write_fd: int, *, name: str, memory_mb: int, timeout_s: int, grant: _TimeGrant
) -> None:
    """The child: limits, parse, reply, ``os._exit`` (no atexit handlers, no database connection
    closed under the parent's feet, no buffers flushed twice)."""
    global _in_child, _grant, _cpu_base_s
    status = _EXIT_BROKEN
    try:
        _in_child, _grant, _cpu_base_s = True, grant, timeout_s
        gc.freeze()  # the parent's objects: the child's collections never walk (and copy) them
        _close_inherited(keep=write_fd)
        _write_all(write_fd, _HEADER.pack(_status_kb(b"VmRSS")))  # what its memory grows from
        # Made before the parse: when memory runs out, even the error may not be made any more
        # (the parse's objects are still held while its MemoryError is handled).
        too_large = pickle.dumps(("error", _too_large(name, memory_mb)))
        start = _address_space_bytes()
        _limit_self(start, memory_mb=memory_mb, timeout_s=timeout_s, extra_s=math.ceil(grant.most))
        try:
            reply = _outcome(parse, name=name, memory_mb=memory_mb)
            if reply[0] == "error" and reply[1].code in _LIBRARY_FAILURES:
                # A library that cannot allocate often says something else (lxml: "unknown error"):
                # a failure after the address space came near its limit is taken for memory.
                peak = _status_kb(b"VmPeak") * 1024 - start
                if peak >= _NEAR_THE_LIMIT * memory_mb * 2**20:
                    reply = ("error", _too_large(name, memory_mb))
            try:
                payload = _reply_dumps(reply)
            except MemoryError:
                payload = too_large
            except Exception:
                payload = pickle.dumps(("error", _failed(name, "its text could not be passed on")))
        except MemoryError:
            payload = too_large
        _write_all(write_fd, payload)
        status = _EXIT_OK
    except BaseException:  # noqa: BLE001 - whatever happens, the child must end here
        pass
    finally:
        os._exit(status)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _close_inherited(*, keep: int) -> None:
    """Close what the child inherited besides stdin, stdout, stderr and the reply pipe: the
    parent's database and broker connections, listening sockets, open files. A parser subverted
    by its file then holds none of them (closing a copy leaves the parent's connection open)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.closerange(3, keep)
    os.closerange(keep + 1, soft if soft != resource.RLIM_INFINITY else 2**20)


def _limit_self(address_space: int, *, memory_mb: int, timeout_s: int, extra_s: int) -> None:
    """``extra_s``: the most CPU seconds ``parse_time_extend`` may add (the hard limit leaves room)."""
    _lower(resource.RLIMIT_AS, address_space + memory_mb * 2**20)
    _lower(resource.RLIMIT_CPU, timeout_s, hard=timeout_s + extra_s + 1)
    _lower(resource.RLIMIT_CORE, 0)


def parse_time_extend(seconds: float) -> None:
    """In a parse child, add ``seconds`` to this parse's time limits: its CPU limit and the
    parent's wall deadline (up to ``KB_OCR_MAX_PAGES * KB_OCR_PAGE_TIMEOUT_S`` in all; the OCR of
    a page calls it). Outside a child, nothing: there is no limit to extend."""
    if _grant is None:
        return
    granted = _grant.add(seconds)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    wanted = _cpu_base_s + math.ceil(granted)
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard - 1)
    if soft != resource.RLIM_INFINITY and wanted > soft:
        resource.setrlimit(resource.RLIMIT_CPU, (wanted, hard))


class _TimeGrant:
    """The seconds a child added to its time limits (``parse_time_extend``), in an anonymous
    mapping shared across the fork: the child writes it, the parent reads it, capped at ``most``."""

    _FORMAT = struct.Struct("<d")

    def __init__(self, *, most: float):
        self.most = float(most)
        self._map = mmap.mmap(-1, self._FORMAT.size)  # MAP_SHARED | MAP_ANONYMOUS: zeros

    def seconds(self) -> float:
        """What was granted so far; ``most`` for anything a child should not have written."""
        value = self._FORMAT.unpack_from(self._map)[0]
        return value if 0 <= value <= self.most else self.most

    def add(self, seconds: float) -> float:
        granted = min(self.seconds() + max(seconds, 0), self.most)
        self._FORMAT.pack_into(self._map, 0, granted)
        return granted

    def close(self) -> None:
        self._map.close()


def _lower(which: int, soft: int, *, hard: int | None = None) -> None:
    """Set a limit to ``soft`` (and ``hard``, default ``soft``), never above the hard limit there is."""
    _, current_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def _address_space_bytes() -> int:
    """This process's address space (``VmSize``), in bytes."""
    return _status_kb(b"VmSize") * 1024


def _status_kb(field: bytes) -> int:
    """A field of ``/proc/self/status`` given in kB (``VmSize``, ``VmRSS``)."""
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(field + b":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field.decode()} not found in /proc/self/status")


def _outcome(parse: Callable[[], object], *, name: str, memory_mb: int) -> tuple[str, object]:
    try:
        return "ok", parse()
    except ApplicationError as exc:
        return "error", exc
    except MemoryError:
        return "error", _too_large(name, memory_mb)
    except RecursionError:
        return "error", _failed(name, "it is nested too deeply")
    except Exception as exc:  # a library's own error for a file it cannot read
        return "error", _failed(name, f"{type(exc).__name__}")


def _failed(name: str, why: str) -> InvalidInput:
    return InvalidInput(f"{name}: the file could not be read ({why}); it may be damaged.", code="parse_failed")


def _reply_dumps(reply: tuple[str, object]) -> bytes:
    """The child's reply, pickled for ``_ReplyUnpickler``."""
    out = io.BytesIO()
    _ReplyPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(reply)
    return out.getvalue()


class _ReplyPickler(pickle.Pickler):
    """Pickles a time zone as ``ZoneInfo(key)``: pickle's own form (``getattr`` of the class's
    cache method) would need ``getattr`` on the allow-list. A date a reader made aware in the
    current time zone (``django.utils.timezone.make_aware``) holds one."""

    def reducer_override(self, obj):
        if isinstance(obj, zoneinfo.ZoneInfo) and obj.key:
            return zoneinfo.ZoneInfo, (obj.key,)
        return NotImplemented


class _ReplyUnpickler(pickle.Unpickler):
    """Builds only what a reply holds: readers' documents, the domain's errors, dates."""

    ALLOWED = {
        ("knowledge.ingestion.documents", "ReadDocument"),
        ("knowledge.ingestion.documents", "Section"),
        ("datetime", "datetime"),
        ("datetime", "date"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("zoneinfo", "ZoneInfo"),
        ("zoneinfo", "_unpickle"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        if module in ("core.errors", "knowledge.ingestion.ocr"):  # the domain's errors, OCR's among them
            cls = super().find_class(module, name)
            if isinstance(cls, type) and issubclass(cls, ApplicationError):
                return cls
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a parse reply")
