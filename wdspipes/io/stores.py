"""Shards in object stores and other filesystems that fsspec knows: ``s3://``, ``gs://``,
``az://``, ``hf://``, ``memory://``, ...

A shard is read front to back in blocks, one ranged request each: the first block is small
(:data:`FIRST_BLOCK_SIZE`), so that the first sample arrives without waiting for a large
download, and each next block is twice the last, up to :data:`MAX_BLOCK_SIZE`, so that long
shards take few requests. Only the current block is held, never the whole shard.

For read-ahead (:mod:`wdspipes.io.readahead`), a shard's later parts can be read by ranged
requests of their own (:meth:`FsspecStream.open_range`), in parallel.

Filesystem instances come from fsspec's instance cache: one per process and set of options,
made afresh in a forked child (a ``DataLoader`` worker). ``storage_options`` are the
filesystem's own options, e.g. ``{"endpoint_url": "http://127.0.0.1:9000", "anon": True}`` for
s3fs; without them s3fs (through botocore) takes its endpoint, region and credentials from the
usual ``AWS_*`` environment variables and files, ``AWS_ENDPOINT_URL`` included.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Protocol

from wdspipes.errors import ShardError, ShardOpenError
from wdspipes.io.local import ClosingStream
from wdspipes.redaction import redact

__all__ = [
    "FIRST_BLOCK_SIZE",
    "MAX_BLOCK_SIZE",
    "STORE_EXTRAS",
    "FsspecRange",
    "FsspecStream",
    "fsspec_filesystem",
    "fsspec_protocols",
    "open_fsspec",
]

FIRST_BLOCK_SIZE = 1 << 20
"""Bytes fetched by a shard's first request."""

MAX_BLOCK_SIZE = 16 << 20
"""Bytes fetched by a request once blocks have grown (S3 serves ranges of 8 to 16 MB best)."""

_FILESYSTEMS: dict[int, object] = {}
"""Every filesystem this process or its parent opened a shard with, by ``id``. A forked child
inherits the parent's instances but fsspec forgets them there; collected in the child, s3fs's
would close the parent's sessions from it, stalling each child a second per instance and
touching the parent's event loop. Held here, they are never collected in a child."""

STORE_EXTRAS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3")}
"""URL scheme to its fsspec implementation's package and the wdspipes extra that installs it."""


class _File(Protocol):
    """What an fsspec file opened for reading offers here."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class _FileSystem(Protocol):
    def cat_file(self, path: str, start: int, end: int) -> bytes: ...


def fsspec_protocols() -> set[str]:
    """The URL schemes fsspec knows, installed or not; empty if fsspec itself is not installed.

    >>> {"s3", "gs", "memory"} <= fsspec_protocols()
    True
    """
    try:
        fsspec = importlib.import_module("fsspec")
    except ImportError:
        return set()
    return set(fsspec.available_protocols())


def open_fsspec(url: str, storage_options: Mapping[str, Any] | None = None) -> FsspecStream:
    """Open a shard through fsspec, for sequential reading in growing blocks.

    Args:
        url: an fsspec URL (``s3://bucket/key.tar``, ``memory://a.tar``, ...).
        storage_options: keyword arguments for the URL's filesystem (credentials,
            ``endpoint_url``, ...); None for none.

    Raises:
        ShardOpenError: fsspec or the URL's implementation is not installed (naming the package
            to install), or the object is missing, unreadable or not a file.

    >>> import fsspec
    >>> with fsspec.open("memory://doc/a.bin", "wb") as file:
    ...     _ = file.write(b"hello")
    >>> stream = open_fsspec("memory://doc/a.bin")
    >>> stream.read(2), stream.read()
    (b'he', b'llo')
    >>> stream.close()
    >>> fsspec.filesystem("memory").rm("doc", recursive=True)
    """
    fs, path = fsspec_filesystem(url, storage_options)
    try:
        file = fs.open(path, "rb", block_size=MAX_BLOCK_SIZE, cache_type="none")
    except FileNotFoundError as exn:
        raise ShardOpenError.like(exn)(f"not found: {exn}", url=url) from exn
    except IsADirectoryError as exn:
        raise ShardOpenError.like(exn)("is a directory, not a shard", url=url) from exn
    except PermissionError as exn:
        raise ShardOpenError.like(exn)(f"access denied: {exn}", url=url) from exn
    except Exception as exn:
        raise ShardOpenError(f"cannot open: {_describe(exn)}", url=url) from exn
    details = getattr(file, "details", None)
    if isinstance(details, dict) and details.get("type") == "directory":
        file.close()
        raise ShardOpenError("is a directory (a key prefix), not a shard", url=url)
    return FsspecStream(file, url)


def fsspec_filesystem(
    url: str, storage_options: Mapping[str, Any] | None = None, *, writing: bool = False
) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` (from fsspec's instance cache, kept for this process)
    and the object's path in it, to read from (or, ``writing``, to write to: the messages say
    so).

    Raises:
        ShardOpenError: fsspec or the URL's implementation is not installed (naming the package
            to install), or the filesystem cannot be made (bad options, say).
    """
    fsspec = _import_fsspec(url, writing)
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as exn:
        raise ShardOpenError(_install_advice(url, str(exn), writing), url=url) from exn
    except Exception as exn:
        cannot = "cannot write" if writing else "cannot open"
        raise ShardOpenError(f"{cannot}: {_describe(exn)}", url=url) from exn
    _FILESYSTEMS.setdefault(id(fs), fs)
    return fs, path


class FsspecStream(ClosingStream):
    """An fsspec file read in growing blocks: ``read(n)`` and ``close()``.

    A failed read raises :class:`~wdspipes.errors.ShardError` naming the URL and the byte
    offset at which the failed request began, with the store's error as ``__cause__``.
    """

    def __init__(self, file: _File, url: str) -> None:
        self.url = url
        self.closed = False
        self._file = file
        self._buffer = b""
        self._start = 0  # of the unread part of the buffer
        self._fetched = 0  # bytes of the shard fetched so far
        self._block = FIRST_BLOCK_SIZE

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (all the rest if negative); empty at the end of the shard."""
        if 0 <= size <= len(self._buffer) - self._start:
            data = self._buffer[self._start : self._start + size]
            self._start += size
            return data
        head = self._buffer[self._start :]
        self._buffer, self._start = b"", 0
        want = size - len(head) if size >= 0 else -1
        if 0 <= want < self._block:  # a block, partly kept for the next reads
            block = self._fetch(self._block)
            self._block = min(2 * self._block, MAX_BLOCK_SIZE)
            self._buffer, self._start = block, min(want, len(block))
            rest = block[:want]
        else:  # more than a block: exactly what was asked for
            rest = self._fetch(want)
        return head + rest if head else rest

    def close(self) -> None:
        """Close the file; later calls do nothing."""
        if not self.closed:
            self.closed = True
            self._buffer = b""
            self._file.close()

    def split_size(self) -> int | None:
        """The object's size, if nothing was read yet: its later parts may then be read by
        requests of their own (:meth:`open_range`); else None."""
        size = getattr(self._file, "size", None)
        return size if isinstance(size, int) and not self._fetched else None

    def open_range(self, start: int, end: int) -> FsspecRange:
        """Bytes ``[start, end)`` of the object, fetched by one ranged request."""
        fs: _FileSystem = self._file.fs  # type: ignore[attr-defined]
        return FsspecRange(fs, self._file.path, self.url, start, end)  # type: ignore[attr-defined]

    def _fetch(self, size: int) -> bytes:
        if self.closed:
            raise ValueError(f"read of a closed shard stream ({redact(self.url)})")
        try:
            data = self._file.read(size)
        except Exception as exn:
            raise ShardError(
                f"reading failed: {_describe(exn)}", url=self.url, offset=self._fetched
            ) from exn
        self._fetched += len(data)
        return data


class FsspecRange:
    """Bytes ``[start, end)`` of an object in a store: one ranged request, made by the first
    read. A failed request, or fewer bytes than asked for, raises
    :class:`~wdspipes.errors.ShardError` naming the URL and ``start``."""

    def __init__(self, fs: _FileSystem, path: str, url: str, start: int, end: int) -> None:
        self.url = url
        self._fs = fs
        self._path = path
        self._start = start
        self._end = end
        self._data: bytes | None = None
        self._pos = 0

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes of the range (all the rest if negative)."""
        if self._data is None:
            self._data = self._fetch()
        data, pos = self._data, self._pos
        if pos == 0 and (size < 0 or size >= len(data)):
            self._pos = len(data)
            return data
        end = len(data) if size < 0 else min(len(data), pos + size)
        self._pos = end
        return data[pos:end]

    def close(self) -> None:
        self._data = b""

    def _fetch(self) -> bytes:
        try:
            data = self._fs.cat_file(self._path, start=self._start, end=self._end)
        except Exception as exn:
            raise ShardError(
                f"reading failed: {_describe(exn)}", url=self.url, offset=self._start
            ) from exn
        if len(data) != self._end - self._start:
            raise ShardError(
                f"shard changed in the store: asked for bytes {self._start} to {self._end}, "
                f"got {len(data)}",
                url=self.url,
                offset=self._start,
            )
        return data


def _import_fsspec(url: str, writing: bool = False) -> ModuleType:
    try:
        return importlib.import_module("fsspec")
    except ImportError as exn:
        advice = _install_advice(url, "fsspec is not installed", writing)
        raise ShardOpenError(advice, url=url) from exn


def _install_advice(url: str, problem: str, writing: bool = False) -> str:
    """What to install for a URL whose implementation is missing: the wdspipes extra where
    there is one, else fsspec's own advice."""
    scheme = url.partition(":")[0].lower()
    if scheme not in STORE_EXTRAS:
        return f"cannot write: {problem}" if writing else problem
    package, extra = STORE_EXTRAS[scheme]
    doing = "writing" if writing else "reading"
    return f"{doing} {scheme}:// URLs needs {package}: pip install 'wdspipes[{extra}]' ({problem})"


def _describe(exn: Exception) -> str:
    return f"{type(exn).__name__}: {exn}"
