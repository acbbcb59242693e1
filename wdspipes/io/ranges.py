"""Ranged reads: bytes ``start`` to ``start + size`` of a shard by one request, for reading
samples by index without fetching whole shards (``ShardListDataset(..., ranged=True)``).

- local paths and ``file:`` URLs: ``os.pread`` on a descriptor kept open;
- ``http(s)://`` and ``ais://``: one ``GET`` with a ``Range`` header on this process's
  connection pool (:mod:`wdspipes.io.http`), retried as a shard's stream is (connection
  failures and the statuses 429, 500, 502, 503, 504, ``RETRIES`` times, backing off), the
  answer checked: a 206 for exactly the bytes asked for, of an object whose length does not
  change between requests;
- the stores fsspec knows (``s3://``, ``gs://``, ...): the filesystem's ``cat_file`` with a
  start and an end, one ranged ``GET``.

``pipe:`` commands and standard input have no ranges: they are read whole.

>>> import os, tempfile
>>> with tempfile.NamedTemporaryFile(delete=False) as file:
...     _ = file.write(b"0123456789")
>>> reader = open_ranges(file.name)
>>> reader.read_range(3, 4), reader.length()
(b'3456', 10)
>>> reader.close(); os.unlink(file.name)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

import urllib3

from wdspipes.errors import ShardError, ShardOpenError, TruncatedShardError
from wdspipes.io import http
from wdspipes.io.local import reading_path, url_scheme
from wdspipes.io.stores import STORE_EXTRAS, fsspec_filesystem, fsspec_protocols
from wdspipes.redaction import redact

__all__ = ["RangeReader", "has_ranges", "open_ranges"]

log = logging.getLogger(__name__)


class RangeReader(Protocol):
    """Reads parts of one shard."""

    def read_range(self, start: int, size: int) -> bytes:
        """Bytes ``start`` to ``start + size`` (fewer only where the shard ends).

        Raises:
            ShardError: the read failed; the error names the URL and the offset.
        """
        ...

    def length(self) -> int | None:
        """The shard's size in bytes, if known (after a read, for remote shards)."""
        ...

    def close(self) -> None: ...


def has_ranges(url: str) -> bool:
    """Whether ``url`` can be read by ranges: a local file or a remote object, not a command
    or standard input.

    >>> [has_ranges(u) for u in ("a.tar", "https://h/a.tar", "s3://b/a.tar", "pipe:cat a")]
    [True, True, True, False]
    """
    if url == "-":
        return False
    if reading_path(url) is not None:
        return True
    scheme = url_scheme(url)
    return (
        scheme in ("http", "https", "ais")
        or scheme in STORE_EXTRAS
        or (scheme not in (None, "pipe") and scheme in fsspec_protocols())
    )


def open_ranges(url: str, storage_options: Mapping[str, Any] | None = None) -> RangeReader:
    """A :class:`RangeReader` of ``url``.

    Raises:
        ShardOpenError: the URL has no ranges (``pipe:``, ``-``), its scheme is unknown, or
            (for a local file) it cannot be opened.
    """
    path = reading_path(url)
    if path is not None:
        return LocalRanges.open(path, url)
    scheme = url_scheme(url)
    if scheme in ("http", "https"):
        return HttpRanges(url, redact(url))
    if scheme == "ais":
        return HttpRanges(http.ais_url(url), redact(url))
    if has_ranges(url):
        return FsspecRanges(url, storage_options)
    raise ShardOpenError(
        "cannot be read by byte ranges (a command or standard input): read it whole",
        url=url,
    )


class LocalRanges:
    """Ranges of a local file, by ``os.pread`` on the descriptor ``fd``, which it owns: it is
    closed by :meth:`close`, or once nothing refers to the reader any more (a read under way
    keeps it open after the reader is let go)."""

    __slots__ = ("fd", "url")

    def __init__(self, fd: int, url: str) -> None:
        self.fd: int | None = fd
        self.url = url

    @classmethod
    def open(cls, path: str, url: str) -> LocalRanges:
        """The ranges of the file at ``path`` (the shard ``url``).

        Raises:
            ShardOpenError: it cannot be opened (also the ``OSError`` subclass it raised).
        """
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exn:
            raise ShardOpenError.like(exn)(f"cannot open: {exn.strerror}", url=url) from exn
        return cls(fd, url)

    def read_range(self, start: int, size: int) -> bytes:
        if self.fd is None:
            raise ValueError(f"read of a closed shard: {self.url}")
        try:
            return os.pread(self.fd, size, start)
        except OSError as exn:
            raise ShardError(f"reading failed: {exn}", url=self.url, offset=start) from exn

    def length(self) -> int | None:
        return None if self.fd is None else os.fstat(self.fd).st_size

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class HttpRanges:
    """Ranges of an HTTP(S) object, one ``GET`` with ``Range`` each (see the module).
    ``shown`` is the URL errors name (the ``ais://`` one for AIStore objects)."""

    def __init__(self, url: str, shown: str) -> None:
        self.url = url
        self.shown = shown
        self.total: int | None = None

    def read_range(self, start: int, size: int) -> bytes:
        if size <= 0:
            return b""
        failures = 0
        while True:
            try:
                return self._get(start, size)
            except _RetryError as retry:
                failures += 1
                if failures > http.RETRIES:
                    raise ShardError(
                        f"{retry}; gave up after {failures} attempts", url=self.shown, offset=start
                    ) from retry.__cause__
                delay = http.BACKOFF * 2 ** (failures - 1)
                log.warning("%s: %s at byte %d; retry in %.1f s", self.shown, retry, start, delay)
                time.sleep(delay)

    def length(self) -> int | None:
        return self.total

    def close(self) -> None:
        return None

    def _get(self, start: int, size: int) -> bytes:
        headers = {"Range": f"bytes={start}-{start + size - 1}", "Accept-Encoding": "identity"}
        timeout = urllib3.Timeout(connect=http.TIMEOUT, read=http.TIMEOUT)
        try:
            response = http.pool_manager().urlopen(
                "GET",
                self.url,
                headers=headers,
                preload_content=False,
                decode_content=False,
                retries=http.REDIRECTS_ONLY,
                timeout=timeout,
            )
        except urllib3.exceptions.HTTPError as exn:
            raise _RetryError(http.describe_failure(exn)) from exn
        try:
            data = self._body(response, start, size)
        except BaseException:
            http.discard(response)  # its unread body must not reach the next request
            raise
        response.release_conn()
        if len(data) < size and (self.total is None or start + len(data) < self.total):
            raise _RetryError(f"the answer ended after {len(data)} of {size} bytes")
        return data

    def _body(self, response: urllib3.BaseHTTPResponse, start: int, size: int) -> bytes:
        status = response.status
        if status == 416:
            raise TruncatedShardError(
                f"the object ends before byte {start} (HTTP 416)", url=self.shown, offset=start
            )
        if status in http.RETRY_STATUSES:
            raise _RetryError(str(http.HttpStatusError(status, response.reason)))
        if status == 200:
            raise ShardError(
                "the server ignores Range requests (answered 200): read the shard through "
                "the cache instead of ranged=True",
                url=self.shown,
            )
        if status != 206:
            failure = http.HttpStatusError(status, response.reason)
            raise ShardOpenError(str(failure), url=self.shown, offset=start) from failure
        match = http.CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if match is None or int(match.group(1)) != start:
            raise ShardError(
                "a 206 answer for other bytes than asked", url=self.shown, offset=start
            )
        if match.group(3) != "*":
            self._check_total(int(match.group(3)), start)
        try:
            return bytes(response.read(size, decode_content=False))
        except (urllib3.exceptions.HTTPError, OSError) as exn:
            raise _RetryError(http.describe_failure(exn)) from exn

    def _check_total(self, total: int, start: int) -> None:
        if self.total is not None and total != self.total:
            raise ShardError(
                f"shard changed on the server: {total} bytes long, was {self.total}",
                url=self.shown,
                offset=start,
            )
        self.total = total


class _RetryError(Exception):
    """A ranged request failed in a way that a retry may cure."""


class FsspecRanges:
    """Ranges of an object in a store fsspec knows: ``cat_file(path, start, end)``."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None) -> None:
        self.url = url
        self.fs, self.path = fsspec_filesystem(url, storage_options)
        self.total: int | None = None

    def read_range(self, start: int, size: int) -> bytes:
        try:
            data = self.fs.cat_file(self.path, start=start, end=start + size)
        except FileNotFoundError as exn:
            raise ShardOpenError.like(exn)(f"not found: {exn}", url=self.url) from exn
        except Exception as exn:
            raise ShardError(
                f"reading failed: {type(exn).__name__}: {exn}", url=self.url, offset=start
            ) from exn
        return bytes(data)

    def length(self) -> int | None:
        if self.total is None:
            try:
                self.total = int(self.fs.size(self.path))
            except Exception as exn:
                raise ShardOpenError(
                    f"cannot stat: {type(exn).__name__}: {exn}", url=self.url
                ) from exn
        return self.total

    def close(self) -> None:
        return None
