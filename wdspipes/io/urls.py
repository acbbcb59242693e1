"""Opening a URL: what every reader of a shard gets (a :class:`ByteStream`), the schemes, and
how a failed shard is reported. The ``open_shards`` stage (:mod:`wdspipes.read.opener`) opens
shards through it; writing is :mod:`wdspipes.io.sinks`. Nothing here needs torch: the
``wdspipes`` command reads and writes through this module without loading it.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple, overload

from wdspipes.errors import ShardError, ShardOpenError, WdsError
from wdspipes.io.cache import discard_entry
from wdspipes.io.http import open_ais, open_http
from wdspipes.io.local import ByteStream, open_file, open_stdin, reading_path, url_scheme
from wdspipes.io.pipe import Commands, check_command, open_pipe
from wdspipes.io.sinks import ByteSink, open_sink
from wdspipes.io.stores import STORE_EXTRAS, fsspec_protocols, open_fsspec

__all__ = [
    "SCHEMES",
    "ByteStream",
    "RawShard",
    "ShardStream",
    "check_url",
    "close_quietly",
    "discard",
    "open_url",
    "shard_failure",
]

log = logging.getLogger(__name__)


class RawShard(io.RawIOBase):
    """An opened shard as a raw stream, for readers that buffer or decode on top of it: gives
    back first bytes already read (``head``), then reads on; knows its ``position`` (from
    ``start``, for offsets in errors) and keeps what a failing read raised (``failure``), to
    tell a failing source from damaged bytes where a decoder wraps the error."""

    def __init__(self, stream: ByteStream, head: bytes = b"", start: int = 0) -> None:
        super().__init__()
        self._stream = stream
        self._head = head
        self.position = start
        self.failure: BaseException | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            data, self._head = self._head[: len(buffer)], self._head[len(buffer) :]
        else:
            try:
                data = self._stream.read(len(buffer))
            except BaseException as exn:
                self.failure = exn
                raise
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position


class ShardStream(NamedTuple):
    """An opened shard: its URL and its byte stream."""

    url: str
    stream: ByteStream


SCHEMES: dict[str, Callable[[str], ByteStream]] = {
    "file": open_file,
    "pipe": open_pipe,
    "http": open_http,
    "https": open_http,
    "ais": open_ais,
}
"""URL scheme to opening function; paths without a scheme and ``-`` are handled apart."""


@overload
def open_url(
    url: str,
    mode: Literal["rb"] = "rb",
    *,
    storage_options: Mapping[str, Any] | None = None,
    commands: Commands | None = None,
    from_data: bool = False,
) -> ByteStream: ...


@overload
def open_url(
    url: str | os.PathLike[str],
    mode: Literal["wb"],
    *,
    storage_options: Mapping[str, Any] | None = None,
    commands: Commands | None = None,
    from_data: bool = False,
) -> ByteSink: ...


def open_url(
    url: str | os.PathLike[str],
    mode: Literal["rb", "wb"] = "rb",
    *,
    storage_options: Mapping[str, Any] | None = None,
    commands: Commands | None = None,
    from_data: bool = False,
) -> ByteStream | ByteSink:
    """Open a shard URL: a local path, ``file:`` URL, ``-`` (stdin), ``pipe:CMD``, a URL of
    another scheme in :data:`SCHEMES`, or else a URL that fsspec opens (``s3://``, ``gs://``,
    ``az://``, ``hf://``, ...; see :mod:`wdspipes.io.stores`). A URL that names an existing
    file is read as that file, whatever its prefix
    (:func:`~wdspipes.io.local.reading_path`).

    With ``mode="wb"``, open it for writing instead, as webdataset's ``gopen(url, "wb")``
    does: the same URLs, ``-`` being standard output and ``pipe:CMD`` the command's standard
    input; the result is a :class:`~wdspipes.io.sinks.ByteSink`, whose ``close()`` completes
    the file (atomically where the target allows it: see :mod:`wdspipes.io.sinks`).

    A one-letter prefix such as ``C:`` is a path, not a scheme.

    The stream is a context manager, as webdataset's ``gopen`` streams are:
    ``with open_url(url) as stream`` closes it as the block ends, which is when a ``pipe:``
    command's failure is raised (see :class:`~wdspipes.io.local.ClosingStream`).

    Args:
        url: the shard's URL.
        mode: ``"rb"`` to read, ``"wb"`` to write.
        storage_options: options for fsspec's filesystem (credentials, ``endpoint_url``, ...);
            URLs that fsspec does not open ignore them.
        commands: which ``pipe:`` URLs run (see :mod:`wdspipes.io.pipe`): ``"program"``,
            ``"never"`` or ``"any"``; None for ``WDSPIPES_COMMANDS``, else ``"program"``.
        from_data: the URL came from the data (a shard item's ``"url"``), not the program:
            a ``pipe:`` URL then runs only with ``commands="any"``.

    Raises:
        ShardOpenError: the URL is not a string, its scheme is unknown, the package that reads
            it is not installed, the policy refuses its command, or opening failed. An
            ``OSError`` (a ``FileNotFoundError`` for a missing file, ...), for an unknown
            scheme or a refused command also a ``ValueError``.
        ValueError: a mode other than ``"rb"`` and ``"wb"``.

    >>> open_url("gopher://example/a.tar")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    wdspipes.errors.ShardOpenError: gopher://example/a.tar: unknown URL scheme 'gopher'; \
supported: ...file:, ...pipe:, ...'-' for stdin, plain paths, and the schemes fsspec knows ...
    """
    if mode == "wb":
        return open_sink(url, storage_options, commands=commands)
    if mode != "rb":
        raise ValueError(f"mode must be 'rb' or 'wb', got {mode!r}")
    if not isinstance(url, str):
        raise ShardOpenError(f"a shard URL must be a string, got {type(url).__name__}: {url!r}")
    if url == "-":
        return open_stdin(url)
    if reading_path(url) is not None:
        return open_file(url)
    scheme = url_scheme(url) or ""  # a plain path is a reading path
    if scheme == "pipe":
        check_command(url, commands, from_data)
    opener = SCHEMES.get(scheme)
    if opener is None:
        if scheme in STORE_EXTRAS or scheme in fsspec_protocols():
            return open_fsspec(url, storage_options)
        supported = ", ".join(f"{known}:" for known in sorted(SCHEMES))
        raise ShardOpenError.like(ValueError)(  # webdataset: a ValueError
            f"unknown URL scheme {scheme!r}; supported: {supported}, "
            "'-' for stdin, plain paths, and the schemes fsspec knows (s3:, gs:, az:, hf:, ...)",
            url=url,
        )
    try:
        return opener(url)
    except WdsError:
        raise
    except OSError as exn:
        raise ShardOpenError.like(exn)(f"cannot open: {exn}", url=url) from exn


def check_url(url: str, commands: Commands | None = None, from_data: bool = False) -> None:
    """Raise what :func:`open_url` would raise for a ``pipe:`` URL that the policy refuses
    (see :func:`~wdspipes.io.pipe.check_command`); nothing for any other URL, nor for a URL
    that names an existing file. For those who open a URL some other way (from a cache).
    """
    if url_scheme(url) == "pipe" and reading_path(url) is None:
        check_command(url, commands, from_data)


def close_quietly(stream: ByteStream) -> None:
    """Close a stream whose reader gave up: a failure can no longer matter to anyone."""
    try:
        stream.close()
    except Exception:
        log.debug("closing an abandoned shard stream failed", exc_info=True)


def discard(read: Callable[[int], bytes], count: int) -> bool:
    """Read ``count`` bytes with ``read`` and drop them (to go on from a saved offset where a
    stream cannot seek); False if the stream ends first."""
    while count > 0:
        skipped = len(read(min(count, 1 << 20)))
        if not skipped:
            return False
        count -= skipped
    return True


def shard_failure(exn: Exception, url: str, stream: ByteStream) -> Exception:
    """The error to report for a failed shard: the source's own failure (a command's exit
    status) if closing the stream reveals one, else ``exn`` as a located error. A shard found
    bad is not kept in the shard cache."""
    discard_entry(stream)
    try:
        stream.close()
    except WdsError as closing_error:
        if closing_error is not exn:
            closing_error.__cause__ = exn
        return closing_error
    except Exception:
        pass
    if isinstance(exn, WdsError):
        return exn
    error = ShardError(f"reading failed: {exn}", url=url)
    error.__cause__ = exn
    return error
