"""The tar writer: samples in, compact and reproducible tar archives out.

The archive is written directly, not through ``tarfile``: each member is one 512-byte POSIX
ustar header (mode 0644, uid and gid 0, no user or group names, the writer's mtime) and its data
padded to 512 bytes. A name over 100 bytes goes into the ustar prefix and name fields when it
splits at a slash into at most 155 and 100 bytes. A longer name, a non-ASCII name, or data of
8 GiB or more (beyond eleven octal digits) gets a PAX ``x`` header before its member, with
``path`` and ``size`` records (the size field then also holds the size in base-256, as GNU tar
writes it). The archive ends with two zero blocks, padded with zeros to a multiple of 10240
bytes (a record of 20 blocks, as GNU tar, bsdtar and ``tarfile`` write it). Nothing depends on
the time or the machine: the same samples give the same bytes.

A whole archive may be compressed with gzip (level 6; no file name, mtime 0 and OS "unknown" in
its header, so only the zlib version can change the bytes),
bzip2, xz or zstd (level 3; ``pip install 'wdspipes[zstd]'``).

>>> import io
>>> buffer = io.BytesIO()
>>> with TarWriter(buffer) as writer:
...     writer.write({"__key__": "0001", "txt": "hello", "cls": 3})
2048
>>> len(buffer.getvalue()), writer.count
(10240, 1)
>>> import wdspipes.read.walk
>>> members = wdspipes.read.walk.iter_tar(io.BytesIO(buffer.getvalue()), "mem")
>>> [(m.name, m.data) for m in members]
[('0001.cls', b'3'), ('0001.txt', b'hello')]
"""

from __future__ import annotations

import bz2
import lzma
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, BinaryIO, Protocol

from wdspipes.errors import EncodeError
from wdspipes.io.sinks import ByteSink, ClosesOrAborts, open_sink
from wdspipes.write.encoders import (
    BYTES_TYPES,
    SampleEncoder,
    check_fields,
    check_key,
    escape_error,
    escaping,
)

__all__ = [
    "COMPRESSIONS",
    "RECORD",
    "TarWriter",
    "Writable",
    "check_compress",
    "check_mtime",
    "member_blocks",
    "member_encoder",
    "sample_blocks",
]

BLOCK = 512
RECORD = 20 * BLOCK
"""The archive's length is padded to a multiple of this, as GNU tar, bsdtar and tarfile do."""
END_MARKER = bytes(2 * BLOCK)
COMPRESSIONS = (None, "gz", "bz2", "xz", "zst")

_OCTAL_LIMIT = 8**11  # eleven octal digits and a terminator in the size and mtime fields
_SMALL = 1 << 16  # data below this is joined with its header into one write
_MODE_UID_GID = b"0000644\0" + b"0000000\0" * 2
_CHECKSUM_SPACES = b" " * 8
# link name, then magic, version, user and group names, device numbers
_LINK_TO_DEVICES = bytes(100) + b"ustar\x0000" + bytes(64) + b"0000000\0" * 2
_PAX_NAME = b"././@PaxHeader"  # as tarfile names PAX headers: no pid or path in it

Members = list[tuple[str, bytes]]
"""One sample's tar members: ``(name, data)``, in order."""


class _Compressor(Protocol):
    def compress(self, data: bytes, /) -> bytes: ...

    def flush(self) -> bytes: ...


class Writable(Protocol):
    """What a writer writes to, when given a stream: a binary file, ``io.BytesIO``,
    ``sys.stdout.buffer``, a :class:`~wdspipes.io.sinks.ByteSink`."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> None: ...


class TarWriter(ClosesOrAborts):
    """Write samples to a tar archive, one member ``key.field`` per field, sorted by field.

    Args:
        target: a URL, opened for writing with ``open_url(target, "wb")``: a path (a
            ``pathlib.Path`` always is one), a ``file:`` URL, ``-`` (standard output),
            ``pipe:COMMAND``, or a URL of an fsspec store (``s3://...``); :meth:`close`
            completes it, so that it appears under its name only then where the target
            allows it (see :mod:`wdspipes.io.sinks`). Or a writable binary stream, flushed but
            not closed by :meth:`close`.
        encoder: ``True`` encodes values by field extension (:class:`SampleEncoder`);
            ``False`` takes ``bytes`` values only; a function maps each sample to a dict of
            field -> bytes (its ``__key__``, else the sample's, names the members).
        compress: ``None`` (plain tar), ``"gz"``, ``"bz2"``, ``"xz"`` or ``"zst"``.
        mtime: modification time of every member, in seconds since the epoch (truncated to
            an int).
        trusted: let the default encoder write pickle and ``torch.save`` fields.
        storage_options: for a URL of an fsspec store, its filesystem's options (credentials,
            ``endpoint_url``, ...).
        unsafe_names: write member names that escape the directory a tar tool extracts them
            into (a ``..`` component, a leading ``/``), which are refused by default with an
            :class:`~wdspipes.errors.EncodeError` (Python's ``tarfile.extractall`` without a
            filter writes them outside the target). A :class:`SampleEncoder` given as
            ``encoder`` keeps its own ``unsafe_names``.

    Attributes:
        count: samples written.
        size: bytes written to the target so far; when compressing, what the compressor has
            emitted so far (it holds back a buffer).

    Raises:
        ValueError: an unknown compression, or an mtime outside 0 .. 8**11 - 1.
        ImportError: ``"zst"`` without the ``zstandard`` package.
        ShardOpenError: the URL cannot be opened for writing (an unknown scheme, a missing
            directory, ...).

    A sample that fails to encode, or whose names escape, raises
    :class:`~wdspipes.errors.EncodeError` before any of its members is written: the archive
    stays valid. Given a URL, an exception inside
    ``with TarWriter(url)`` aborts the archive (:meth:`abort`): nothing appears under the
    URL where the target allows it, and no end-of-archive marker is written.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | Writable | BinaryIO,
        encoder: bool | SampleEncoder | Callable[[dict[str, Any]], dict[str, Any]] = True,
        compress: str | None = None,
        mtime: float = 0,
        trusted: bool = False,
        *,
        storage_options: Mapping[str, Any] | None = None,
        unsafe_names: bool = False,
    ) -> None:
        compressor = _compressor(compress)
        self.mtime = check_mtime(mtime)
        self.compress = compress
        self.unsafe_names = unsafe_names
        self._encode = member_encoder(encoder, trusted, unsafe_names)
        self._sink: ByteSink | None = None
        if isinstance(target, (str, os.PathLike)):
            self._sink = open_sink(target, storage_options)  # completed by close()
            self._stream: Writable = self._sink
        else:
            self._stream = target
        self._compressor = compressor
        self._offset = 0  # in the uncompressed tar stream
        self._closed = False
        self.count = 0
        self.size = 0

    def write(self, sample: Mapping[str, Any]) -> int:
        """Write one sample; returns the bytes it added to the (uncompressed) tar stream.

        Raises:
            EncodeError: the sample cannot be written (see :class:`SampleEncoder`); nothing
                of it was written.
        """
        blocks = sample_blocks(self._encode(sample), self.mtime)
        return self._write_blocks(blocks)

    def add_member(self, name: str, data: bytes) -> int:
        """Write one regular-file member as it is, without key or field checks; returns the
        bytes it added to the tar stream. It counts as no sample.

        Raises:
            ValueError: a name holding a NUL character, or empty.
            EncodeError: a name that escapes the directory it is extracted into (a ``..``
                component, a leading ``/``), unless the writer has ``unsafe_names``.
        """
        if not name or "\0" in name:
            raise ValueError(f"a member name must be non-empty and hold no NUL, got {name!r}")
        if not self.unsafe_names and (why := escaping(name)) is not None:
            raise escape_error(name, why)
        return self._write_blocks(member_blocks(name, bytes(data), self.mtime), samples=0)

    def _write_blocks(self, blocks: list[bytes], samples: int = 1) -> int:
        """Write the blocks of one sample (see :func:`sample_blocks`)."""
        if self._closed:
            raise ValueError("write to a closed TarWriter")
        size = 0
        for block in blocks:
            self._emit(block)
            size += len(block)
        self.count += samples
        return size

    def closed_size(self, more: int = 0) -> int:
        """The size of the archive if ``more`` bytes of members were added and it was closed:
        exact for a plain archive; when compressing, the compressed bytes so far plus ``more``,
        without the end marker (the compressor's buffer and ratio are unknown)."""
        if self._compressor is not None:
            return self.size + more
        end = self._offset + more + len(END_MARKER)
        return end + (-end % RECORD)

    def _emit(self, data: bytes) -> None:
        self._offset += len(data)
        if self._compressor is not None:
            data = self._compressor.compress(data)
            if not data:
                return
        self._stream.write(data)
        self.size += len(data)

    def close(self) -> None:
        """Write the end-of-archive marker and padding, flush, and complete a target opened
        from a URL (it appears under its name now). Closing again does nothing.

        Raises:
            ShardWriteError, CommandError: completing the target failed; it is aborted.
        """
        if self._closed:
            return
        self._closed = True
        try:
            end = self._offset + len(END_MARKER)
            self._emit(END_MARKER + bytes(-end % RECORD))
            if self._compressor is not None:
                tail = self._compressor.flush()
                self._stream.write(tail)
                self.size += len(tail)
            self._stream.flush()
        except BaseException:
            if self._sink is not None:
                self._sink.abort()
            raise
        if self._sink is not None:
            self._sink.close()

    def abort(self) -> None:
        """Stop writing without an end-of-archive marker. A target opened from a URL is given
        up: nothing appears under it where the target allows it (see
        :mod:`wdspipes.io.sinks`); a stream given is flushed. Once closed, nothing happens."""
        if self._closed:
            return
        self._closed = True
        if self._sink is not None:
            self._sink.abort()
        else:
            self._stream.flush()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._sink is None:  # a stream given: what was written stays a readable archive
            self.close()
        else:
            super().__exit__(exc_type, exc, traceback)

    def __repr__(self) -> str:
        return f"TarWriter(compress={self.compress!r}, count={self.count}, size={self.size})"


def member_encoder(
    encoder: bool | SampleEncoder | Callable[[dict[str, Any]], dict[str, Any]],
    trusted: bool = False,
    unsafe_names: bool = False,
) -> Callable[[Mapping[str, Any]], Members]:
    """A function from a sample to its members, for a writer's ``encoder`` argument; names
    that escape are refused unless ``unsafe_names`` (a :class:`SampleEncoder` given decides
    with its own)."""
    if encoder is True or isinstance(encoder, SampleEncoder):
        encode_sample = (
            SampleEncoder(trusted, unsafe_names=unsafe_names) if encoder is True else encoder
        )

        def encode(sample: Mapping[str, Any]) -> Members:
            key = check_key(sample)
            return [(f"{key}.{field}", data) for field, data in encode_sample(sample)]

        return encode
    if encoder is False:
        return lambda sample: _raw_members(check_key(sample), sample, unsafe_names)
    if callable(encoder):
        return lambda sample: _encoded_members(encoder, sample, unsafe_names)
    raise TypeError(f"encoder must be True, False or a function, got {encoder!r}")


def _encoded_members(
    encoder: Callable[[dict[str, Any]], dict[str, Any]],
    sample: Mapping[str, Any],
    unsafe_names: bool,
) -> Members:
    """The members of what a user's encoder makes of ``sample``."""
    result = encoder(dict(sample))
    if not isinstance(result, Mapping):
        raise EncodeError(
            f"the encoder returned a {type(result).__name__}, not a dict of field -> bytes",
            key=sample.get("__key__"),
        )
    key = check_key(result if "__key__" in result else sample)
    return _raw_members(key, result, unsafe_names)


def _raw_members(key: str, sample: Mapping[str, Any], unsafe_names: bool) -> Members:
    """The members of a sample whose values are bytes already."""
    members = []
    for field in check_fields(key, sample, unsafe_names):
        data = sample[field]
        if not isinstance(data, BYTES_TYPES):
            raise EncodeError(
                f"the value is a {type(data).__name__}, not bytes (the writer's encoder "
                "does not encode: encoder=False, or a function)",
                key=key,
                field=field,
            )
        members.append((f"{key}.{field}", bytes(data)))
    return members


# --- Headers ----------------------------------------------------------------------------------


def sample_blocks(members: Iterable[tuple[str, bytes]], mtime: int) -> list[bytes]:
    """The tar stream of one sample: headers, data and padding, small members joined."""
    blocks: list[bytes] = []
    small: list[bytes] = []
    for name, data in members:
        parts = member_blocks(name, data, mtime)
        if len(data) < _SMALL:
            small += parts
        else:
            if small:
                blocks.append(b"".join(small))
                small = []
            blocks += parts
    if small:
        blocks.append(b"".join(small))
    return blocks


def member_blocks(name: str, data: bytes, mtime: int) -> list[bytes]:
    """One member: its header (a PAX header before it if needed), its data, its padding.

    >>> [len(block) for block in member_blocks("a.txt", b"hi", 0)]
    [512, 2, 510]
    >>> [len(block) for block in member_blocks("é.txt", b"hi", 0)]  # PAX, records, ustar
    [1536, 2, 510]
    """
    encoded = name.encode("utf-8", "surrogateescape")
    size = len(data)
    split = _ustar_split(encoded) if encoded.isascii() else None
    if split is not None:
        header = _header(split[1], size, mtime, prefix=split[0])
        if size >= _OCTAL_LIMIT:
            header = _pax_header(encoded, size, mtime, path=False) + header
    else:  # the name in the PAX header; an ASCII stand-in, as tarfile writes, in the ustar one
        stand_in = bytes(c if c < 128 else 63 for c in encoded)[:100]
        header = _pax_header(encoded, size, mtime, path=True) + _header(stand_in, size, mtime)
    return [header, data, bytes(-size % BLOCK)]


def _ustar_split(name: bytes) -> tuple[bytes, bytes] | None:
    """``(prefix, name)`` fields holding ``name``, or None if it does not fit. Like
    ``tarfile``, the shortest prefix that leaves at most 100 bytes for the name."""
    if len(name) <= 100:
        return b"", name
    slash = name.find(b"/", max(len(name) - 101, 1))
    if slash == -1 or slash > 155 or slash == len(name) - 1:
        return None
    return name[:slash], name[slash + 1 :]


def _header(name: bytes, size: int, mtime: int, kind: bytes = b"0", prefix: bytes = b"") -> bytes:
    """A ustar header block; a size beyond the octal field is written in base-256."""
    fits = size < _OCTAL_LIMIT
    size_field = b"%011o\0" % size if fits else b"\x80" + size.to_bytes(11, "big")
    header = b"".join(
        [
            name.ljust(100, b"\0"),
            _MODE_UID_GID,
            size_field,
            b"%011o\0" % mtime,
            _CHECKSUM_SPACES,
            kind,
            _LINK_TO_DEVICES,
            prefix.ljust(155, b"\0"),
            bytes(12),
        ]
    )
    return header[:148] + b"%06o\0 " % sum(header) + header[156:]


def _pax_header(name: bytes, size: int, mtime: int, path: bool) -> bytes:
    """A PAX ``x`` header with its records (path if ``path``, size if it needs one), padded."""
    records = b""
    if path:
        try:
            name.decode("utf-8")
        except UnicodeDecodeError:  # a surrogate-escaped name: say its bytes are not UTF-8
            records += _pax_record(b"hdrcharset", b"BINARY")
        records += _pax_record(b"path", name)
    if size >= _OCTAL_LIMIT:
        records += _pax_record(b"size", b"%d" % size)
    return (
        _header(_PAX_NAME, len(records), mtime, kind=b"x") + records + bytes(-len(records) % BLOCK)
    )


def _pax_record(keyword: bytes, value: bytes) -> bytes:
    """``"<length> <keyword>=<value>\\n"``, the length counting its own digits."""
    line = b" %s=%s\n" % (keyword, value)
    length = len(line) + 1
    while length != len(line) + len(str(length)):
        length = len(line) + len(str(length))
    return b"%d%s" % (length, line)


class _GzipCompressor:
    """gzip with a fixed header: no file name, mtime 0, OS "unknown" (zlib's own header would
    name the OS it was built for, and gzip.GzipFile records a file name and the time)."""

    HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._crc = 0
        self._length = 0
        self._header = self.HEADER

    def compress(self, data: bytes, /) -> bytes:
        self._crc = zlib.crc32(data, self._crc)
        self._length += len(data)
        out = self._header + self._deflate.compress(data)
        self._header = b""
        return out

    def flush(self) -> bytes:
        trailer = struct.pack("<II", self._crc, self._length & 0xFFFFFFFF)
        return self._header + self._deflate.flush() + trailer


def check_mtime(mtime: float) -> int:
    """``mtime`` as the int written to headers.

    Raises:
        ValueError: outside 0 .. 8**11 - 1 (eleven octal digits).
    """
    if not 0 <= int(mtime) < _OCTAL_LIMIT:
        raise ValueError(f"mtime must be in 0 .. {_OCTAL_LIMIT - 1}, got {mtime}")
    return int(mtime)


def check_compress(compress: str | None) -> None:
    """Raise ValueError for an unknown compression, ImportError for zstd without zstandard."""
    _compressor(compress)


def _compressor(compress: str | None) -> _Compressor | None:
    if compress not in COMPRESSIONS:
        raise ValueError(
            f"compress must be one of {', '.join(map(repr, COMPRESSIONS))}, got {compress!r}"
        )
    if compress is None:
        return None
    if compress == "gz":
        return _GzipCompressor()
    if compress == "bz2":
        return bz2.BZ2Compressor()
    if compress == "xz":
        return lzma.LZMACompressor(format=lzma.FORMAT_XZ)
    try:
        import zstandard
    except ImportError as exn:
        raise ImportError(
            "compress='zst' needs the zstandard package: pip install 'wdspipes[zstd]'"
        ) from exn
    compressor: _Compressor = zstandard.ZstdCompressor(level=3).compressobj()
    return compressor
