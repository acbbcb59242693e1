"""The tar walk behind ``load_tar``: a direct header walk, not the ``tarfile`` module, and no
torch (the ``wdspipes`` command reads through it without loading torch).

Reads ustar, GNU (``L``/``K`` long names and link names) and PAX (``x`` headers overriding
path and size, ``g`` global headers) archives in one forward pass, yielding every regular
file as a :class:`TarMember`. Directories, links, devices and FIFOs are skipped. A shard
compressed as a whole with gzip, bzip2, xz or zstd (with ``zstandard`` installed) is
recognised by its magic bytes. Header checksums are verified; a shard that ends early inside
a header or a member's data is an error that names the URL, the member and the byte offset
(in the uncompressed tar stream). A compressed shard cut short gives every member
decompressed before the cut, then that error, which also says where the compressed data ends.

A shard that ends exactly after a member, with no end-of-archive marker (a writer that was
never closed), is read whole, as GNU tar, bsdtar and webdataset read it, with a
:class:`~wdspipes.errors.NoEndMarkerWarning` naming it; ``strict_end=True`` makes it a
:class:`~wdspipes.errors.TruncatedShardError` instead: a shard cut by accident exactly at a
member's end looks the same.

The end-of-archive marker is a zero block. Bytes other than zeros after it (archives joined
with ``cat``, or a header zeroed by damage) are a :class:`~wdspipes.errors.DataAfterEndError`,
never dropped silently; with ``ignore_zeros=True`` the walk reads on past zero blocks, as GNU
tar's ``--ignore-zeros`` does, and so reads joined archives whole.

Member names are decoded as UTF-8 (undecodable bytes kept as surrogate escapes), as
``tarfile`` does. A regular file whose name comes out empty (a header or a GNU long-name record
zeroed by damage) is a :class:`~wdspipes.errors.TarFormatError`, as bsdtar refuses it, never
skipped in silence.

Memory stays bounded whatever the headers declare: a member declaring more than
``max_member_size`` bytes (:data:`MAX_MEMBER_SIZE` by default) is a
:class:`~wdspipes.errors.MemberTooLargeError` before any of it is read, and so is an extension
header (GNU long name, PAX records) over :data:`MAX_EXTENSION_SIZE`. A member is read into one
buffer of its size, filled in place (never parts joined), so reading it takes about its size.

>>> import io, tarfile
>>> buf = io.BytesIO()
>>> with tarfile.open(fileobj=buf, mode="w") as tf:
...     info = tarfile.TarInfo("0001.txt"); info.size = 2
...     tf.addfile(info, io.BytesIO(b"hi"))
>>> list(iter_tar(io.BytesIO(buf.getvalue()), "mem.tar"))
[TarMember(name='0001.txt', data=b'hi', offset=0, url='mem.tar')]
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

from wdspipes.core.arguments import int_at_least
from wdspipes.errors import (
    DataAfterEndError,
    MemberTooLargeError,
    NoEndMarkerWarning,
    ShardError,
    TarFormatError,
    TruncatedShardError,
    WdsError,
)
from wdspipes.io.local import BUFFER_SIZE
from wdspipes.io.urls import ByteStream, discard
from wdspipes.read.compression import CorruptDataError, Inflated, inflate
from wdspipes.redaction import redact

__all__ = [
    "BLOCK",
    "MAX_EXTENSION_SIZE",
    "MAX_MEMBER_SIZE",
    "Member",
    "TarMember",
    "TarWalk",
    "iter_tar",
    "iter_tar_tuples",
    "plain_header",
    "plain_members",
    "warn_unmarked",
]

BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
_TAIL_CHUNK = 1 << 16
_ONE_READ = 1 << 26  # larger members are read in parts of this size, into one buffer

MAX_MEMBER_SIZE = 4 << 30
"""The most bytes a member may declare by default (4 GiB): more is a
:class:`~wdspipes.errors.MemberTooLargeError` before anything is read (a forged header, or a
limit to raise with ``max_member_size``). Reading a member takes about its size in memory."""

MAX_EXTENSION_SIZE = 1 << 20
"""The most bytes of a GNU long-name or long-link record or of PAX records (1 MiB): a path is
at most a few KiB."""
_SLICE_LIMIT = 1 << 16
_TERMINATORS = frozenset(b"\0 ")

_REGULAR = frozenset(b"07\0")  # regular file, contiguous file, old-style regular file
_PLAIN = frozenset(b"07")  # regular files that need no further look at the name
_POSIX_MAGIC = b"ustar\0"
_NO_DATA = frozenset(b"123456")  # links, devices, directories, FIFOs: the size field is ignored
_LONG_NAME, _LONG_LINK, _SPARSE, _PAX_GLOBAL = b"L"[0], b"K"[0], b"S"[0], b"g"[0]
_PAX_LOCAL = frozenset(b"xX")

Read = Callable[[int], bytes]
Member = tuple[str, bytes, int, str]

_CHECKSUMS: dict[bytes, int] = {}
"""Checksum field (8 bytes) -> ``(stored - 255 + byte sum of the field) % 65521``.

A header with stored checksum C is valid when its byte sum, counting the checksum field as
eight spaces, is C. Then ``zlib.adler32(header) & 0xFFFF``, which is (1 + byte sum) mod 65521,
equals this cached value: one dict lookup and one adler32 instead of parsing and summing the
field. A match modulo 65521 could only be wrong if the byte sum were off by a multiple of
65521, far beyond any accidental damage. Filled with fields whose exact check passed; the
field takes a bounded number of values, and the cache stops growing at a limit anyway.
"""
_CHECKSUM_CACHE_LIMIT = 1 << 16


class TarMember(NamedTuple):
    """A regular file of a tar shard.

    ``offset`` is the byte offset of the member's first header block (including any
    long-name or PAX headers before it) in the uncompressed tar stream.
    """

    name: str
    data: bytes
    offset: int
    url: str


def warn_unmarked(problem: str) -> None:
    """Warn that a shard ended after a member without the end-of-archive marker."""
    warnings.warn(
        NoEndMarkerWarning(f"{problem}: its members were read; strict_end=True refuses it"),
        stacklevel=4,
    )


def iter_tar(
    stream: ByteStream,
    url: str,
    *,
    ignore_zeros: bool = False,
    strict_end: bool = False,
    unmarked_end: Callable[[str], None] = warn_unmarked,
    max_member_size: int = MAX_MEMBER_SIZE,
) -> Iterator[TarMember]:
    """Yield the regular files of the tar archive in ``stream`` (named ``url`` in errors).

    Reads to the end of the stream (so that a command feeding it finishes, a compressed
    stream's checksum is verified, and nothing after the end-of-archive marker goes unseen),
    but does not close it.

    Args:
        stream: the shard's bytes, compressed or not.
        url: names the shard in errors.
        ignore_zeros: read on past zero blocks (an end-of-archive marker followed by more
            members, as in archives joined with ``cat``) instead of raising
            :class:`~wdspipes.errors.DataAfterEndError`.
        strict_end: a shard that ends after a member without the end-of-archive marker is a
            :class:`~wdspipes.errors.TruncatedShardError`, not a warning.
        unmarked_end: called with the problem, instead of the warning, when the shard ends
            after a member without the end-of-archive marker.
        max_member_size: the most bytes a member may declare (:data:`MAX_MEMBER_SIZE`).

    Warns:
        NoEndMarkerWarning: the shard ends after a member without the end-of-archive marker;
            every member was read (unless another ``unmarked_end`` is given).

    Raises:
        TruncatedShardError: the archive ends early, inside a header or a member's data.
        DataAfterEndError: bytes other than zeros follow the end-of-archive marker.
        TarFormatError: a header is corrupt, a member is of an unsupported kind (sparse) or
            its name is empty.
        MemberTooLargeError: a member declares more than ``max_member_size`` bytes, or an
            extension header more than :data:`MAX_EXTENSION_SIZE`.
        ShardError: reading the stream failed.
    """
    members = iter_tar_tuples(
        stream,
        url,
        ignore_zeros=ignore_zeros,
        strict_end=strict_end,
        unmarked_end=unmarked_end,
        max_member_size=max_member_size,
    )
    for member in members:
        yield TarMember._make(member)


def iter_tar_tuples(
    stream: ByteStream,
    url: str,
    *,
    ignore_zeros: bool = False,
    strict_end: bool = False,
    unmarked_end: Callable[[str], None] = warn_unmarked,
    max_member_size: int = MAX_MEMBER_SIZE,
) -> Iterator[Member]:
    """:func:`iter_tar` yielding plain ``(name, data, offset, url)`` tuples: the fast path."""
    walk = TarWalk(
        stream,
        url,
        ignore_zeros=ignore_zeros,
        strict_end=strict_end,
        unmarked_end=unmarked_end,
        max_member_size=max_member_size,
    )
    return walk.members()


class TarWalk:
    """One forward pass over an archive: position, pending extension headers, last member."""

    def __init__(
        self,
        stream: ByteStream,
        url: str,
        start: int = 0,
        *,
        ignore_zeros: bool = False,
        strict_end: bool = False,
        unmarked_end: Callable[[str], None] = warn_unmarked,
        max_member_size: int = MAX_MEMBER_SIZE,
    ) -> None:
        self.stream = stream
        self.url = redact(url)  # as errors, warnings and the members show it
        self.max_member_size = check_member_size(max_member_size)
        self.start = start  # where the walk begins: a member's first header (see skip)
        self.ignore_zeros = ignore_zeros
        self.strict_end = strict_end
        self.unmarked_end = unmarked_end
        """Told when the shard ends after a member without the end-of-archive marker (not
        ``strict_end``): warns by default; a reader grouping samples judges the last one."""
        self.inflated: Inflated | None = None  # the decompressor's output, if compressed
        self.offset = 0  # of the header being read
        self.member: str | None = None  # last member seen, to locate errors
        self.pending: list[dict[str, str]] = []  # GNU long names and PAX records, in order
        self.entry_offset = 0  # first header of the entry being read
        self.global_pax: dict[str, str] = {}

    def members(self) -> Iterator[Member]:
        """Yield ``(name, data, offset, url)`` per regular file: the hot loop.

        A plain header (a cached checksum field, no pending extension headers, no name
        prefix, under 64 KiB of data) is handled inline, with one read for the data, its
        padding and the next header; everything else by :meth:`_entry`. Failures of the
        stream itself become located errors.
        """
        url = self.url
        adler32 = zlib.adler32
        checksums = _CHECKSUMS
        most = self.max_member_size
        small = min(_SLICE_LIMIT, most + 1)  # larger members have their size checked
        try:
            read, header = _open_payload(self.stream, self)
            if self.start:
                header = self._skip(read)
            while True:
                # adler32's low half is (1 + byte sum) mod 65521: see _CHECKSUMS.
                if (
                    len(header) != BLOCK
                    or checksums.get(header[148:156]) != adler32(header) & 0xFFFF
                ):
                    header = self._unusual(read, header)
                    if not header:
                        return
                kind = header[156]
                try:  # the usual size field: eleven octal digits and a terminator
                    size = int(header[124:135], 8) if header[135] in _TERMINATORS else -1
                except ValueError:
                    size = -1
                if size < 0:
                    size = self._size(header)
                # A name field beginning with NUL (an empty name) goes the slow way, to fail.
                if (
                    kind in _PLAIN
                    and header[0]
                    and not (header[345] or self.pending or self.global_pax)
                ):
                    name = header[:100].partition(b"\0")[0].decode("utf-8", "surrogateescape")
                    offset = self.offset
                    end = size + (-size % BLOCK)
                    if size < small:
                        # One read for the data, its padding and the next header (a whole
                        # archive always has at least the end marker after a member).
                        chunk = read(end + BLOCK)
                        if len(chunk) == end + BLOCK:
                            self.offset = offset + BLOCK + end
                        else:
                            chunk = self._rest_of_chunk(read, chunk, name, size, end)
                        data, header = chunk[:size], chunk[end:]
                    else:  # large: the data into a bytes object of its own, without a copy
                        if size > most:
                            raise self._too_large(name, size, "member", most, "max_member_size")
                        data = read(size) if size <= _ONE_READ else _read_exact(read, size)
                        after = read(end - size + BLOCK) if len(data) == size else b""
                        if len(after) == end - size + BLOCK:
                            self.offset = offset + BLOCK + end
                        else:
                            data, after = self._rest_of_large(read, name, size, end, data, after)
                        header = after[end - size :]
                    self.member = name
                    yield name, data, offset, url
                    continue
                member = self._entry(read, header, kind, size)
                if member is not None:
                    yield member
                header = _read_exact(read, BLOCK)
        except WdsError:
            raise
        except EOFError as exn:
            raise self.truncated(f"compressed data ends early ({exn})") from exn
        except CorruptDataError as exn:
            raise self.corrupt(self._damaged(exn)) from exn.__cause__
        except Exception as exn:
            raise ShardError(
                self._after_member(f"reading failed: {exn}"), url=url, offset=self.offset
            ) from exn

    def _skip(self, read: Read) -> bytes:
        """Go on to offset ``start`` of the tar bytes, past the first block already read: by
        seeking a local, uncompressed shard, else by reading (and decompressing) up to it.
        Returns the block there."""
        stream = self.stream
        if read == stream.read and getattr(stream, "seekable", lambda: False)():
            stream.seek(self.start)  # type: ignore[attr-defined]
        elif not discard(read, self.start - BLOCK):
            raise self.truncated(f"the shard ends before byte {self.start}, where a sample was")
        self.offset = self.entry_offset = self.start
        return _read_exact(read, BLOCK)

    def _rest_of_chunk(self, read: Read, chunk: bytes, name: str, size: int, end: int) -> bytes:
        """Complete a short read of data, padding and next header; raise if the data is cut.
        A short header after whole data is reported by the next iteration."""
        chunk = _read_exact(read, end + BLOCK, chunk)
        if len(chunk) < size:
            raise self._data_cut(name, len(chunk), size)
        self.offset += BLOCK + min(end, len(chunk))
        return chunk

    def _rest_of_large(
        self, read: Read, name: str, size: int, end: int, data: bytes, after: bytes
    ) -> tuple[bytes, bytes]:
        """Complete short reads of a large member's data (into the same buffer) and of the
        padding and header after it (``after``, not read yet if the data was short); raise if
        the data is cut."""
        data = _read_exact(read, size, data)
        if len(data) < size:
            raise self._data_cut(name, len(data), size)
        after = _read_exact(read, end - size + BLOCK, after or None)
        self.offset += BLOCK + min(end, size + len(after))
        return data, after

    def _data_cut(self, name: str | None, got: int, size: int) -> TruncatedShardError:
        """The error for member ``name`` whose data ends after ``got`` of ``size`` bytes."""
        self.member = name
        return self.truncated(f"member data ends after {got} of {size} bytes", in_member=True)

    def _unusual(self, read: Read, header: bytes) -> bytes:
        """A header the hot loop does not recognise at once: a short one (the shard ended
        early: raises), a corrupt one (raises), the end-of-archive marker, or a valid header
        whose checksum field is not cached yet. Returns the header to go on with, b"" at the
        end of the archive."""
        while True:
            if len(header) != BLOCK:
                self._end_without_marker(len(header))
                return b""
            if header != _ZERO_BLOCK:
                self._check(header)
                return header
            if self.pending:
                raise self.corrupt("extension header with no member after it")
            header = self._past_zero_block(read)
            if not header:
                inflated = self.inflated
                if inflated is not None and inflated.cut:
                    raise self.truncated("the archive is whole, but its compressed stream is not")
                return b""

    def _past_zero_block(self, read: Read) -> bytes:
        """The block after the zero block at the current offset if ``ignore_zeros``, skipping
        zero blocks; else b"", after checking that only zeros follow to the end of the stream.
        Also b"" at the end of the stream (a short run of zeros there ends it too)."""
        marker = self.offset
        if self.ignore_zeros:
            self.offset += BLOCK
            block = _read_exact(read, BLOCK)
            while block and block.count(0) == len(block):
                if len(block) < BLOCK:
                    return b""
                self.offset += BLOCK
                block = _read_exact(read, BLOCK)
            return block
        position = marker + BLOCK
        while chunk := read(_TAIL_CHUNK):
            if chunk.count(0) != len(chunk):
                position += len(chunk) - len(chunk.lstrip(b"\0"))
                raise DataAfterEndError(
                    self._after_member(
                        f"bytes other than zeros follow the end-of-archive marker (a zero "
                        f"block) at byte {marker}"
                    )
                    + ": archives joined with cat, or a header zeroed by damage? They are not "
                    "read; ignore_zeros=True reads on past zero blocks",
                    url=self.url,
                    offset=position,
                )
            position += len(chunk)
        return b""

    def _check(self, header: bytes) -> None:
        """Verify a header's checksum exactly; raise if it is wrong."""
        problem = _checksum_problem(header)
        if problem is None:
            return
        if self.offset == 0:
            raise self.corrupt("not a tar archive (nor gzip, bzip2, xz or zstd compressed)")
        raise self.corrupt(problem)

    def _entry(self, read: Read, header: bytes, kind: int, size: int) -> Member | None:
        """Any header but a plain one: extension headers, non-regular members, and regular
        files that are named by extension headers or a prefix, or are large."""
        if kind not in _REGULAR:
            self._special(read, kind, size)
            return None
        offset = self.entry_offset if self.pending else self.offset
        name, size = self._name_and_size(header, size)
        if kind == 0 and name.endswith("/"):  # an old-style directory
            self.offset += BLOCK
            return None
        if not name:
            self.offset = offset
            raise self.corrupt(
                "a regular file with an empty name (a header or a GNU long-name record zeroed "
                "by damage?)"
            )
        if size > self.max_member_size:
            self.offset = offset
            raise self._too_large(name, size, "member", self.max_member_size, "max_member_size")
        self.member = name
        return name, self._read_data(read, size), offset, self.url

    def _read_data(self, read: Read, size: int) -> bytes:
        """A member's data (without copying it) and the padding after it. Short padding is
        left for the next header read to report: the member itself is whole."""
        data = _read_exact(read, size)
        if len(data) < size:
            raise self._data_cut(self.member, len(data), size)
        self.offset += BLOCK + size + len(_read_exact(read, -size % BLOCK))
        return data

    def _size(self, header: bytes) -> int:
        """The size field in any of its forms; a negative size is corrupt."""
        size = self._number(header[124:136], "size")
        if size < 0:
            raise self.corrupt(f"negative member size {size}")
        return size

    def _number(self, field: bytes, what: str) -> int:
        """A numeric header field: octal digits, or base-256 when the top bit is set."""
        if field[0] in (0o200, 0o377):
            value = int.from_bytes(field[1:], "big")
            return value - 256 ** (len(field) - 1) if field[0] == 0o377 else value
        digits = field.split(b"\0", 1)[0].strip()
        try:
            return int(digits, 8) if digits else 0
        except ValueError:
            raise self.corrupt(f"invalid {what} field {field!r}") from None

    def _name_and_size(self, header: bytes, size: int) -> tuple[str, int]:
        """The member's name and data size, after any long-name and PAX overrides."""
        if self.pending or self.global_pax:
            overrides = self._take_overrides()
            if "path" in overrides and "size" in overrides:
                return overrides["path"], self._pax_size(overrides["size"])
            if "size" in overrides:
                size = self._pax_size(overrides["size"])
            if "path" in overrides:
                return overrides["path"], size
        name = header[:100].partition(b"\0")[0]
        # A name prefix exists only in POSIX ustar headers; GNU headers keep times there.
        if header[345] and header[257:263] == _POSIX_MAGIC:
            name = header[345:500].partition(b"\0")[0] + b"/" + name
        return name.decode("utf-8", "surrogateescape"), size

    def _take_overrides(self) -> dict[str, str]:
        """Merge the pending extension records: the first header of an entry wins, as in
        ``tarfile``; global PAX records apply where no local one does."""
        merged: dict[str, str] = {}
        for records in self.pending:
            for key, value in records.items():
                merged.setdefault(key, value)
        for key, value in self.global_pax.items():
            merged.setdefault(key, value)
        self.pending = []
        if any(key.startswith("GNU.sparse.") for key in merged):
            raise self.corrupt("sparse members are not supported")
        return {key: value for key, value in merged.items() if value != ""}

    def _pax_size(self, value: str) -> int:
        try:
            size = int(value)
        except ValueError:
            size = -1
        if size < 0:
            raise self.corrupt(f"invalid PAX size {value!r}")
        return size

    def _special(self, read: Read, kind: int, size: int) -> None:
        """Extension headers and non-regular members: remember or skip, never yield."""
        if not self.pending:
            self.entry_offset = self.offset
        self.offset += BLOCK
        if kind in _NO_DATA:
            self.pending = []
            return
        if kind == _SPARSE:
            raise self.corrupt("sparse members are not supported")
        if size > MAX_EXTENSION_SIZE:
            self.offset -= BLOCK
            what = f"extension header (type {bytes([kind])!r})"
            raise self._too_large(None, size, what, MAX_EXTENSION_SIZE, "MAX_EXTENSION_SIZE")
        data = _read_exact(read, size + (-size % BLOCK))
        if len(data) < size:
            raise self.truncated(f"extension header data ends after {len(data)} of {size} bytes")
        self.offset += len(data)
        data = data[:size]
        if kind == _LONG_NAME:
            name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            if not name:
                self.offset = self.entry_offset
                raise self.corrupt("a GNU long-name record holds an empty name (zeroed by damage?)")
            self.pending.append({"path": name})
        elif kind == _LONG_LINK:
            self.pending.append({})
        elif kind in _PAX_LOCAL:
            self.pending.append(self._pax_records(data))
        elif kind == _PAX_GLOBAL:
            self.global_pax.update(self._pax_records(data))
        else:  # an unknown kind (GNU dumpdir, volume label, ...): skipped like tarfile does
            self.pending = []

    def _pax_records(self, data: bytes) -> dict[str, str]:
        """Parse ``"<length> <key>=<value>\\n"`` records."""
        records: dict[str, str] = {}
        pos = 0
        while pos < len(data) and data[pos] != 0:
            space = data.find(b" ", pos)
            try:
                length = int(data[pos:space])
            except ValueError:
                raise self.corrupt("malformed PAX record") from None
            record = data[space + 1 : pos + length]
            key, equals, value = record.partition(b"=")
            if not 0 < length <= len(data) - pos or not equals or not record.endswith(b"\n"):
                raise self.corrupt("malformed PAX record")
            records[key.decode("utf-8", "surrogateescape")] = value[:-1].decode(
                "utf-8", "surrogateescape"
            )
            pos += length
        return records

    def _end_without_marker(self, got: int) -> None:
        """The stream ended where a header should be, after ``got`` bytes of it: raise, or
        warn where it ended right after a whole member (a writer never closed)."""
        if got:
            raise self.truncated(f"header ends after {got} of {BLOCK} bytes")
        if self.offset == 0:
            raise self.truncated("the shard is empty (0 bytes)")
        if self.offset % BLOCK:
            raise self.truncated(
                f"the shard ends {BLOCK - self.offset % BLOCK} bytes short of the padding after "
                "the last member's data: it was cut short"
            )
        inflated = self.inflated
        if self.strict_end or self.pending or (inflated is not None and inflated.cut):
            raise self.truncated(
                "the shard ends without the end-of-archive marker: it was cut short, or its "
                "writer was never closed"
            )
        self.unmarked_end(
            f"{self.url}: the shard ends at byte {self.offset}, after member {self.member!r}, "
            "without the end-of-archive marker (a writer never closed, or a cut at a member's "
            "end)"
        )

    def _too_large(
        self, name: str | None, size: int, what: str, most: int, setting: str
    ) -> MemberTooLargeError:
        """The error for an entry at the current offset declaring ``size`` bytes, over
        ``most``."""
        if name is not None:
            self.member = name
        problem = (
            f"the {what} declares {size:,} bytes, over the limit of {most:,} ({setting}): a "
            "damaged or forged header, or a limit to raise"
        )
        if name is None:
            return MemberTooLargeError(
                self._after_member(problem), url=self.url, offset=self.offset
            )
        return MemberTooLargeError(problem, url=self.url, member=name, offset=self.offset)

    def truncated(self, problem: str, in_member: bool = False) -> TruncatedShardError:
        """An error for a shard ending early at the current offset: inside the current member
        if ``in_member``, else at a header, after the last member read. For a compressed
        shard cut short, it also says where the compressed data and the tar data end."""
        inflated = self.inflated
        if inflated is not None and inflated.cut:
            problem += (
                f"; the compressed data ends early, after {inflated.source.position} bytes, "
                f"at byte {inflated.produced} of the tar data"
            )
        if in_member:
            return TruncatedShardError(
                problem, url=self.url, member=self.member, offset=self.offset
            )
        return TruncatedShardError(self._after_member(problem), url=self.url, offset=self.offset)

    def corrupt(self, problem: str) -> TarFormatError:
        """An error for corrupt data at the header at the current offset."""
        return TarFormatError(self._after_member(problem), url=self.url, offset=self.offset)

    def _after_member(self, problem: str) -> str:
        return problem if self.member is None else f"{problem} (after member {self.member!r})"

    def _damaged(self, exn: Exception) -> str:
        """What to say of corrupt compressed data: gzip and zstd check a stream's data only
        at its end, so the members delivered before may be damaged too."""
        problem = f"corrupt compressed data: {exn}"
        if self.member is None:
            return problem
        return (
            f"{problem}; the members before byte {self.offset}, from byte {self.start} up to "
            f"{self.member!r}, were delivered before the damage was found and may be damaged "
            "too (the checksum of a compressed stream is checked at its end)"
        )


def _checksum_problem(header: bytes) -> str | None:
    """None if the header's checksum is right (unsigned, or signed as some old tars wrote it),
    else what is wrong with it. Valid unsigned checksum fields are cached in _CHECKSUMS."""
    field = header[148:156]
    digits = field.partition(b"\0")[0].strip()
    try:
        stored = int(digits, 8) if digits else 0
    except ValueError:
        return f"invalid checksum field {field!r}"
    unsigned = 256 + sum(header[:148]) + sum(header[156:])
    if stored == unsigned:
        if len(_CHECKSUMS) < _CHECKSUM_CACHE_LIMIT:
            _CHECKSUMS[field] = (stored - 255 + sum(field)) % 65521
        return None
    signed = (
        256 + sum(struct.unpack_from("148b", header)) + sum(struct.unpack_from("356b", header, 156))
    )
    if stored == signed:
        return None
    return f"bad header checksum {stored} (computed {unsigned})"


def plain_header(header: bytes) -> tuple[bytes, int] | None:
    """The name (as bytes) and data size of a plain header, as the hot loop of
    :meth:`TarWalk.members` reads it inline (a valid checksum, a regular file, no name prefix,
    an octal size); None for any other block, which a :class:`TarWalk` reads or reports.

    >>> import tarfile
    >>> info = tarfile.TarInfo("a.txt"); info.size = 3
    >>> plain_header(info.tobuf(tarfile.USTAR_FORMAT))
    (b'a.txt', 3)
    """
    if (
        len(header) != BLOCK
        or header[156] not in _PLAIN
        or header[345]
        or header[135] not in _TERMINATORS
    ):
        return None
    if _CHECKSUMS.get(header[148:156]) != zlib.adler32(header) & 0xFFFF and (
        header == _ZERO_BLOCK or _checksum_problem(header) is not None
    ):
        return None
    try:
        size = int(header[124:135], 8)
    except ValueError:
        return None
    if size < 0:
        return None
    return header[:100].partition(b"\0")[0], size


def plain_members(chunk: bytes) -> list[tuple[str, bytes]] | None:
    """The ``(name, data)`` of the members that fill ``chunk`` (bytes of an archive from a
    member's first header up to another's), if every header is a :func:`plain_header`; None
    otherwise. For reads of one sample at a known offset.

    >>> import io, tarfile
    >>> buf = io.BytesIO()
    >>> with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
    ...     for name in ("a.txt", "a.cls"):
    ...         info = tarfile.TarInfo(name); info.size = 1
    ...         tf.addfile(info, io.BytesIO(b"1"))
    >>> plain_members(buf.getvalue()[:2048])
    [('a.txt', b'1'), ('a.cls', b'1')]
    >>> plain_members(buf.getvalue()[:1000]) is None  # cut inside the second member
    True
    """
    members: list[tuple[str, bytes]] = []
    position = 0
    length = len(chunk)
    while position < length:
        start = position + BLOCK
        plain = plain_header(chunk[position:start])
        if plain is None:
            return None
        name, size = plain
        position = start + size + (-size % BLOCK)
        if position > length:
            return None
        members.append((name.decode("utf-8", "surrogateescape"), chunk[start : start + size]))
    return members


def _read_exact(read: Read, size: int, data: bytes | None = None) -> bytes:
    """``read(size)``, continued after a short read until ``size`` bytes or the end.

    ``data`` is what a first ``read(size)`` already returned, if it was called. The rest goes
    into one buffer that grows in place as the bytes come, never parts joined (which would
    hold the data twice), in reads of at most :data:`_ONE_READ` bytes: a size forged in a
    damaged header allocates no more than the data there is.
    """
    if data is None:
        data = read(min(size, _ONE_READ))
    if len(data) >= size or not data:
        return data
    buffer = io.BytesIO()
    buffer.write(data)
    del data
    while (missing := size - buffer.tell()) > 0:
        chunk = read(min(missing, _ONE_READ))
        if not chunk:
            break
        buffer.write(chunk)
    return buffer.getvalue()  # the buffer itself, not a copy


def check_member_size(size: int) -> int:
    """``size`` as a limit of member sizes.

    Raises:
        ValueError: not an int of at least 1.
    """
    return int_at_least("max_member_size", size)


def _open_payload(stream: ByteStream, walk: TarWalk) -> tuple[Read, bytes]:
    """The function reading the tar bytes and their first block, decompressing if needed.

    A first block that is a tar header (or the end marker) means an uncompressed archive;
    otherwise the magic bytes pick the decompressor.
    """
    first = _read_exact(stream.read, BLOCK)
    if first == _ZERO_BLOCK or (len(first) == BLOCK and _checksum_problem(first) is None):
        return stream.read, first
    try:
        inflated = inflate(stream, first)
    except ImportError as exn:
        raise walk.corrupt(str(exn)) from None
    if inflated is None:
        return stream.read, first  # not compressed: let the walk report what is wrong
    walk.inflated = inflated
    reader = io.BufferedReader(inflated, BUFFER_SIZE)
    return reader.read, _read_exact(reader.read, BLOCK)
