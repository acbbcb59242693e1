"""Local shards: plain paths, ``file:`` URLs, and ``-`` for standard input; and what every
opened shard is, whatever its URL (:class:`ByteStream`, :class:`ClosingStream`)."""

from __future__ import annotations

import logging
import os
import re
import sys
from types import TracebackType
from typing import BinaryIO, Protocol, TypeVar
from urllib.parse import urlparse
from urllib.request import url2pathname

from wdspipes.errors import ShardOpenError

__all__ = [
    "BUFFER_SIZE",
    "ByteStream",
    "ClosingStream",
    "local_path",
    "open_file",
    "open_stdin",
    "reading_path",
    "url_scheme",
]

log = logging.getLogger(__name__)

BUFFER_SIZE = 1 << 14
"""Read buffer of an opened shard (files, commands, decompressors).

Small members are served from it, one system call per buffer. A read larger than the buffer
copies what is buffered and reads most of the rest straight into the result, so the smaller
the buffer, the fewer bytes of large members are copied twice. 16 KiB read 100 KB members 6%
faster than 64 KiB and 25% faster than 1 MiB, and 1 KB members within 4% of the fastest
(best of 8 interleaved runs; benchmarks/README.md)."""


_Stream = TypeVar("_Stream", bound="ClosingStream")


class ByteStream(Protocol):
    """What an opened shard offers: ``read(n)`` returning bytes, and ``close()``.

    ``close()`` may raise when the source failed (a ``pipe:`` command's exit status).
    """

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class ClosingStream:
    """What opened streams share with files: used with ``with``, as webdataset's
    ``with gopen(url, "rb") as stream``, a stream is closed as the block ends: :meth:`close`
    if the block succeeded, :meth:`abort` if it raised.

    A read stream's ``close`` may raise (a ``pipe:`` command's failure status); its ``abort``
    closes it and only logs such a failure, so that the block's own error goes on. A writer's
    ``abort`` gives up what was written (:class:`~wdspipes.io.sinks.ClosesOrAborts`)."""

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        """Close the stream after an error, which a failure of closing does not hide."""
        try:
            self.close()
        except Exception:
            log.debug("closing a stream after an error failed", exc_info=True)

    def __enter__(self: _Stream) -> _Stream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")


def url_scheme(url: str) -> str | None:
    """The scheme of a shard URL, lower-cased; None for a plain path. A one-letter prefix
    such as ``C:`` is a drive, not a scheme.

    >>> [url_scheme(u) for u in ("a.tar", "C:/a.tar", "FILE:/a.tar", "pipe:cat a.tar")]
    [None, None, 'file', 'pipe']
    """
    match = _SCHEME.match(url)
    return None if match is None else match.group(1).lower()


def local_path(url: str) -> str | None:
    """The file a local shard URL names (a plain path or a ``file:`` URL), else None
    (``-`` and every other scheme).

    >>> [local_path(u) for u in ("a.tar", "FILE:///data/a.tar", "pipe:cat a.tar", "-")]
    ['a.tar', '/data/a.tar', None, None]
    """
    if url == "-":
        return None
    scheme = url_scheme(url)
    if scheme is None:
        return url
    return url2pathname(urlparse(url).path) if scheme == "file" else None


def reading_path(url: str) -> str | None:
    """The local file that reading ``url`` reads: the file of a plain path or ``file:`` URL,
    and any URL that names an existing file (or directory, or link), whatever its prefix; else
    None (``-`` and remote URLs).

    A file named ``pipe:touch x;y.tar`` that a glob found is that file: it is read, never run.

    >>> reading_path("data/a.tar"), reading_path("pipe:cat a.tar"), reading_path("-")
    ('data/a.tar', None, None)
    """
    path = local_path(url)
    if path is not None or url == "-":
        return path
    return url if os.path.lexists(url) else None


def open_file(url: str) -> BinaryIO:
    """Open a local path, a ``file:`` URL, or an existing file whose name looks like a URL (see
    :func:`reading_path`) for reading.

    Raises:
        ShardOpenError: the file is missing, a directory, or unreadable; also the
            ``OSError`` subclass ``open`` raised (``FileNotFoundError``, ...).
    """
    path = local_path(url) or url
    shown = "" if path == url else f" ({path})"  # the error names the URL already
    try:
        return open(path, "rb", buffering=BUFFER_SIZE)
    except FileNotFoundError as exn:
        raise ShardOpenError.like(exn)(f"no such file{shown}", url=url) from exn
    except IsADirectoryError as exn:
        raise ShardOpenError.like(exn)(f"is a directory, not a shard{shown}", url=url) from exn
    except OSError as exn:
        problem = f"cannot open{shown}: {exn.strerror or exn}"
        raise ShardOpenError.like(exn)(problem, url=url) from exn


class _Stdin(ClosingStream):
    """Standard input as a shard stream; closing it leaves ``sys.stdin`` open."""

    def __init__(self) -> None:
        self.read = sys.stdin.buffer.read
        self.closed = False

    def close(self) -> None:
        self.closed = True


def open_stdin(url: str) -> _Stdin:
    """Standard input, for the URL ``-``. It can be read once."""
    return _Stdin()
