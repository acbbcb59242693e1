"""The opener stage: shard URLs in, open byte streams out, every one closed in time."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

from torch.utils.data import IterDataPipe

from wdspipes.curried import Stage, stage_factory
from wdspipes.datapipe import StageDataPipe, functional_stage
from wdspipes.distributed import check_split, warn_idle_reader
from wdspipes.errors import (
    Handler,
    ShardError,
    ShardOpenError,
    WdsError,
    handle,
    reraise_exception,
)
from wdspipes.io.local import open_file, open_stdin
from wdspipes.io.pipe import open_pipe

__all__ = [
    "SCHEMES",
    "ByteStream",
    "ShardOpener",
    "ShardStream",
    "close_quietly",
    "open_url",
    "shard_failure",
    "url_opener",
]

log = logging.getLogger(__name__)


class ByteStream(Protocol):
    """What an opened shard offers: ``read(n)`` returning bytes, and ``close()``.

    ``close()`` may raise when the source failed (a ``pipe:`` command's exit status).
    """

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class ShardStream(NamedTuple):
    """An opened shard: its URL and its byte stream."""

    url: str
    stream: ByteStream


SCHEMES: dict[str, Callable[[str], ByteStream]] = {
    "file": open_file,
    "pipe": open_pipe,
}
"""URL scheme to opening function; paths without a scheme and ``-`` are handled apart."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")


def open_url(url: str) -> ByteStream:
    """Open a shard URL: a local path, ``file:`` URL, ``-`` (stdin), or ``pipe:CMD``.

    A one-letter prefix such as ``C:`` is a path, not a scheme.

    Raises:
        ShardOpenError: the URL is not a string, its scheme is unknown, or opening failed.

    >>> open_url("gopher://example/a.tar")
    Traceback (most recent call last):
    ...
    wdspipes.errors.ShardOpenError: gopher://example/a.tar: unknown URL scheme 'gopher'; \
supported: file:, pipe:, '-' for stdin, and plain paths
    """
    if not isinstance(url, str):
        raise ShardOpenError(f"a shard URL must be a string, got {type(url).__name__}: {url!r}")
    if url == "-":
        return open_stdin(url)
    match = _SCHEME.match(url)
    if match is None:
        return open_file(url)
    opener = SCHEMES.get(match.group(1).lower())
    if opener is None:
        supported = ", ".join(f"{scheme}:" for scheme in sorted(SCHEMES))
        raise ShardOpenError(
            f"unknown URL scheme {match.group(1)!r}; supported: {supported}, "
            "'-' for stdin, and plain paths",
            url=url,
        )
    try:
        return opener(url)
    except OSError as exn:
        raise ShardOpenError(f"cannot open: {exn}", url=url) from exn


def close_quietly(stream: ByteStream) -> None:
    """Close a stream whose reader gave up: a failure can no longer matter to anyone."""
    try:
        stream.close()
    except Exception:
        log.debug("closing an abandoned shard stream failed", exc_info=True)


def shard_failure(exn: Exception, url: str, stream: ByteStream) -> Exception:
    """The error to report for a failed shard: the source's own failure (a command's exit
    status) if closing the stream reveals one, else ``exn`` as a located error."""
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


@functional_stage("open_shards")
class ShardOpener(StageDataPipe[ShardStream]):
    """Open each shard URL of the source (functional name: ``open_shards``).

    At most one stream is open at a time: the one yielded last is closed when the next is
    requested, and when iteration ends or is abandoned. Readers downstream may close it sooner.

    As each epoch begins it checks how the sharding filter upstream splits the shards among
    ranks and workers (see :func:`wdspipes.distributed.check_split`): a rank left without a
    shard is an error, an uneven split a warning.

    Args:
        source_datapipe: yields shard URLs.
        handler: what to do when a shard cannot be opened (see :mod:`wdspipes.errors`).

    Yields:
        A :class:`ShardStream` ``(url, stream)`` per shard.

    Raises:
        ShardOpenError: through ``handler``, for a shard that cannot be opened.
        ShardSplitError: some rank gets no shard.

    >>> from wdspipes.shards import ShardList
    >>> [(url, stream.read()) for url, stream in ShardList(["pipe:printf hello"]).open_shards()]
    [('pipe:printf hello', b'hello')]
    """

    def __init__(
        self, source_datapipe: IterDataPipe[str], handler: Handler = reraise_exception
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.handler = handler

    def __iter__(self) -> Iterator[ShardStream]:
        expected = check_split(self)
        received = 0
        for url in self.source_datapipe:
            received += 1
            try:
                stream = open_url(url)
            except ShardOpenError as exn:
                if handle(self.handler, exn):
                    continue
                return
            try:
                yield ShardStream(url, stream)
            finally:
                close_quietly(stream)
        if expected is None and not received:
            warn_idle_reader(self)


@stage_factory
def url_opener(handler: Handler = reraise_exception) -> Stage:
    """The opener stage for ``DataPipeline(...)``: ``open_shards(handler=handler)``."""
    return Stage(ShardOpener, handler=handler)
