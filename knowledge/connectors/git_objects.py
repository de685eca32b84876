"""How large a git object is once inflated, read from its headers before anything is inflated.

A git blob is stored deflated, in a loose file or in a pack (maybe as a delta against another
object). dulwich inflates a whole object into memory when it is read, so an 8 KB blob of zeros
costs 8 MB, and a 1 MB one a gigabyte. ``ObjectSizes`` reads only what names the size: a loose
object's header (its first inflated bytes), a pack entry's header and, for a delta, the first
bytes of the delta (which name the size of the result), following the delta chain to its base.
The git connector (``knowledge.connectors.git``) refuses a blob over the parse caps
(``KB_PARSE_MAX_UNPACKED_MB``, ``KB_PARSE_MAX_RATIO``) before reading it.
"""

from __future__ import annotations

import bisect
import os
import zlib
from dataclasses import dataclass

from dulwich.object_store import BaseObjectStore

_OFS_DELTA, _REF_DELTA = 6, 7
_MAX_CHAIN = 10_000  # a longer delta chain is taken for a damaged (or hostile) pack
_HEADER_READ = 64


class ObjectDamaged(ValueError):
    """An object's headers cannot be read (a truncated or hostile repository)."""


@dataclass(frozen=True)
class ObjectSize:
    """``size``: the object's inflated size; ``largest``: the most bytes inflated at once to build
    it (the object itself, or a larger base or delta of its chain); ``stored``: the bytes it takes
    in the repository, its chain included (0 unless asked for)."""

    size: int
    largest: int
    stored: int = 0

    @property
    def ratio(self) -> int:
        """How many times its stored size the object inflates to (0 when ``stored`` is unknown)."""
        return self.size // self.stored if self.stored else 0


class ObjectSizes:
    """Sizes of the objects of one repository's object store (its alternates included), for one
    sync; ``close()`` releases the pack files it opened."""

    def __init__(self, store: BaseObjectStore):
        self.store = store
        self._fds: dict[str, int] = {}  # pack file -> descriptor
        self._ends: dict[str, list[int]] = {}  # pack file -> its entries' offsets, sorted, then its end

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def of(self, object_id: bytes, *, stored: bool = False) -> ObjectSize:
        """The sizes of the object ``object_id`` (40 hex digits); ``stored`` also counts its stored
        bytes (which reads the pack's index once). ``KeyError`` when the object is missing;
        ``ObjectDamaged`` or ``OSError`` when its headers cannot be read."""
        size: int | None = None
        largest = 0
        entries: list[tuple[str, int]] = []  # (pack file, offset) of each entry of the chain
        loose_stored = 0
        where = self._locate(object_id)
        for _ in range(_MAX_CHAIN):
            if where[0] == "loose":
                loose_size, loose_stored = _loose_header(where[1])
                size = loose_size if size is None else size
                largest = max(largest, loose_size)
                break
            _, pack_file, offset = where
            entries.append((pack_file, offset))
            fd = self._fd(pack_file)
            kind, entry_size, base, data_at = _entry_header(fd, offset)
            largest = max(largest, entry_size)
            if kind not in (_OFS_DELTA, _REF_DELTA):
                size = entry_size if size is None else size
                break
            target = _delta_target_size(fd, data_at)
            size = target if size is None else size
            largest = max(largest, target)
            if kind == _OFS_DELTA:
                if not 0 < base <= offset:
                    raise ObjectDamaged(f"a delta at {offset} names a base at {offset - base}")
                where = ("pack", pack_file, offset - base)
            else:
                where = self._locate(base)
        else:
            raise ObjectDamaged("the delta chain is too long")
        assert size is not None
        total = 0
        if stored:
            total = loose_stored + sum(self._entry_length(pack_file, offset) for pack_file, offset in entries)
        return ObjectSize(size=size, largest=largest, stored=total)

    # -- finding an object ----------------------------------------------------------------------

    def _locate(self, object_id: bytes) -> tuple:
        """("pack", pack file, offset) or ("loose", file) of ``object_id`` (hex or binary)."""
        hex_id = object_id.hex().encode() if len(object_id) == 20 else object_id
        for store in _stores(self.store):
            for pack in store.packs:
                try:
                    offset = pack.index.object_offset(hex_id)
                except KeyError:
                    continue
                return ("pack", os.fspath(pack.data.path), offset)
            path = getattr(store, "path", None)
            if path is not None:
                loose = os.path.join(os.fspath(path), hex_id[:2].decode(), hex_id[2:].decode())
                if os.path.isfile(loose):
                    return ("loose", loose)
        raise KeyError(hex_id)

    def _fd(self, pack_file: str) -> int:
        if pack_file not in self._fds:
            self._fds[pack_file] = os.open(pack_file, os.O_RDONLY | os.O_CLOEXEC)
        return self._fds[pack_file]

    def _entry_length(self, pack_file: str, offset: int) -> int:
        """The bytes the pack entry at ``offset`` takes: up to the next entry, or the pack's checksum."""
        if pack_file not in self._ends:
            pack = next(p for s in _stores(self.store) for p in s.packs if os.fspath(p.data.path) == pack_file)
            offsets = sorted(entry[1] for entry in pack.index.iterentries())
            offsets.append(os.fstat(self._fd(pack_file)).st_size - 20)
            self._ends[pack_file] = offsets
        offsets = self._ends[pack_file]
        following = bisect.bisect_right(offsets, offset)
        return offsets[min(following, len(offsets) - 1)] - offset


def _stores(store: BaseObjectStore):
    """``store`` and its alternates, theirs included (at most 4 deep)."""
    todo, seen = [(store, 0)], set()
    while todo:
        current, depth = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if depth < 4:
            todo.extend((alternate, depth + 1) for alternate in getattr(current, "alternates", ()))


def _varint_le(data: bytes, at: int) -> tuple[int, int]:
    """A delta header's size: 7 bits a byte, least significant first. (value, next position)."""
    value = shift = 0
    while True:
        if at >= len(data):
            raise ObjectDamaged("a size is cut short")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        shift += 7
        if not byte & 0x80:
            return value, at
        if shift > 70:
            raise ObjectDamaged("a size is too long")


def _entry_header(fd: int, offset: int) -> tuple[int, int, int | bytes, int]:
    """(type, size, delta base, where the deflated data starts) of the pack entry at ``offset``.

    The delta base is the distance back to it (an offset delta) or its id (a ref delta)."""
    data = os.pread(fd, _HEADER_READ, offset)
    if not data:
        raise ObjectDamaged(f"no pack entry at {offset}")
    byte = data[0]
    kind, size, shift, at = (byte >> 4) & 7, byte & 0x0F, 4, 1
    while byte & 0x80:
        if at >= len(data) or shift > 70:
            raise ObjectDamaged(f"the entry at {offset} has no end to its size")
        byte = data[at]
        size |= (byte & 0x7F) << shift
        shift += 7
        at += 1
    base: int | bytes = 0
    if kind == _OFS_DELTA:
        if at >= len(data):
            raise ObjectDamaged(f"the entry at {offset} is cut short")
        byte = data[at]
        at += 1
        base = byte & 0x7F
        while byte & 0x80:
            if at >= len(data):
                raise ObjectDamaged(f"the entry at {offset} is cut short")
            byte = data[at]
            at += 1
            base = ((base + 1) << 7) | (byte & 0x7F)
    elif kind == _REF_DELTA:
        base = data[at : at + 20]
        if len(base) != 20:
            raise ObjectDamaged(f"the entry at {offset} is cut short")
        at += 20
    elif kind not in (1, 2, 3, 4):
        raise ObjectDamaged(f"the entry at {offset} has an unknown type {kind}")
    return kind, size, base, offset + at


def _delta_target_size(fd: int, data_at: int) -> int:
    """The size a delta builds, from the first inflated bytes of the delta at ``data_at``."""
    inflater = zlib.decompressobj()
    head, position = b"", data_at
    while len(head) < 20 and not inflater.eof:
        pending = inflater.unconsumed_tail
        if not pending:
            pending = os.pread(fd, 512, position)
            if not pending:
                break
            position += len(pending)
        head += inflater.decompress(pending, 32 - len(head))
    _base_size, at = _varint_le(head, 0)
    target, _ = _varint_le(head, at)
    return target


def _loose_header(path: str) -> tuple[int, int]:
    """(inflated size, file size) of the loose object at ``path``, from its ``<type> <size>\\0`` header."""
    inflater = zlib.decompressobj()
    head = b""
    with open(path, "rb") as file:
        stored = os.fstat(file.fileno()).st_size
        while b"\0" not in head and len(head) < _HEADER_READ and not inflater.eof:
            pending = inflater.unconsumed_tail or file.read(512)
            if not pending:
                break
            head += inflater.decompress(pending, _HEADER_READ - len(head))
    kind, _, size = head.partition(b"\0")[0].partition(b" ")
    if b"\0" not in head or kind not in (b"blob", b"tree", b"commit", b"tag") or not size.isdigit():
        raise ObjectDamaged(f"{os.path.basename(path)}: not a loose object header")
    return int(size), stored
