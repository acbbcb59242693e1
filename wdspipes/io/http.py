"""HTTP(S) and AIStore shards, streamed in process through urllib3.

``http://`` and ``https://`` URLs are read with a GET whose body is streamed: the tar reader
gets the first bytes as soon as they arrive, not once the shard is downloaded. Redirects are
followed. ``ais://BUCKET/OBJECT`` reads ``$AIS_ENDPOINT/v1/objects/BUCKET/OBJECT`` the same way
(``AIS_ENDPOINT`` is read as each shard opens, e.g. ``http://aistore:51080``; the proxy's
redirect to a storage target is followed); errors name the ``ais://`` URL.

Failures:

- Retried: a connection that cannot be made, is refused, reset or times out (``TIMEOUT``
  seconds to connect, and between bytes), a body cut short (fewer bytes than its
  Content-Length, a broken chunked body), and the statuses 429, 500, 502, 503 and 504. A shard
  is retried up to ``RETRIES`` times in a row, waiting ``BACKOFF`` seconds, then twice as long
  each time; a response that brought new bytes starts the count (and the wait) afresh, so a
  long shard survives any number of drops as long as each one makes progress.
- Resumed: after a drop, the rest is requested with ``Range: bytes=N-``, N being the bytes
  received. A 206 answer must start at byte N; a 200 answer (the server ignores Range) has its
  first N bytes skipped. No byte is lost or read twice. A shard whose length or ETag changed
  meanwhile is an error.
- Not retried: other 4xx statuses (404, 403, ...), a ``ShardOpenError`` naming the URL, the
  status and its reason; an invalid URL; a certificate that does not verify.
- Retries used up: a :class:`~wdspipes.errors.ShardOpenError` if no response came yet, else a
  :class:`~wdspipes.errors.ShardError`, naming the URL and the byte offset reached, with the last
  failure chained as ``__cause__`` (a :class:`HttpStatusError` for a status).

Connections come from one ``urllib3.PoolManager`` per process, made on first use, so a forked
DataLoader worker makes its own and never touches its parent's sockets. A body read to its end
hands its connection back for the next shard (keep-alive); a stream closed before its end closes
its connection without reading the rest. :func:`close_connections` closes the idle ones. Each
response is received with the kernel's quick acknowledgements on (``TCP_QUICKACK``, Linux): a
kept-alive connection is otherwise in the kernel's interactive mode after its request, and
delays its acknowledgements, which a server writing with Nagle's algorithm on (Python's
``http.server``, say) answers by holding back the tail of each write; one connection then
carried 31 MB/s of a 40 MB/s cap where a new connection per shard carried 39
(benchmarks/README.md).

For read-ahead (:mod:`wdspipes.io.readahead`), a stream also reads a byte range of the object
(``start``, ``end``; the object's length and ETag checked against the first response's), hands
out bytes as they arrive (:meth:`HttpStream.read1`), and can be stopped from another thread
(:meth:`HttpStream.abort`, also while it waits for a response).

The tunables are module constants, read each time a shard opens; ``open_http`` and
``open_ais`` also take them as keyword arguments.

>>> ais_to_http("ais://images/train/shard 0001.tar", "http://aistore:51080/")
'http://aistore:51080/v1/objects/images/train/shard%200001.tar'
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import logging
import os
import re
import socket
import ssl
import threading
from typing import Any
from urllib.parse import quote

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    HTTPError,
    LocationValueError,
    MaxRetryError,
    ResponseError,
    SSLError,
)

from wdspipes.errors import HttpStatusError, ShardError, ShardOpenError
from wdspipes.io.cancel import on_cancel
from wdspipes.io.chunks import read_across
from wdspipes.io.local import ClosingStream
from wdspipes.redaction import redact

__all__ = [
    "BACKOFF",
    "CHUNK_SIZE",
    "RETRIES",
    "TIMEOUT",
    "HttpStatusError",
    "HttpStream",
    "ais_to_http",
    "ais_url",
    "close_connections",
    "describe_failure",
    "discard",
    "open_ais",
    "open_http",
    "pool_manager",
]

log = logging.getLogger(__name__)

RETRIES = 5
"""Retries of a failed request in a row (so ``RETRIES + 1`` attempts) before giving up."""

BACKOFF = 0.5
"""Seconds to wait before the first retry; each further retry in a row waits twice as long."""

TIMEOUT = 60.0
"""Seconds to wait for a connection, and for each next byte of a response."""

CHUNK_SIZE = 1 << 18
"""Most bytes read ahead: one receive gives what has arrived, up to this, and reads are served
from it; a read across chunks is joined with one copy, a read of a chunk or more goes straight
to the connection. The tar walk of shards from a local server took 94, 85, 65 and 79 ms of CPU
on 100 KB samples with 16, 64, 256 and 1024 KiB, and 510, 379, 364 and 344 ms on 1 KB samples
(benchmarks/README.md)."""

MAX_REDIRECTS = 10
POOL_SIZE = 32  # idle connections kept per host: at least read-ahead's connections
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def _wait(seconds: float, stop: threading.Event) -> None:
    """Wait before a retry; an abort (which sets ``stop``) ends the wait at once."""
    stop.wait(seconds)


_sleep = _wait  # tests replace it to see the waits
REDIRECTS_ONLY = urllib3.Retry(
    total=None,
    connect=0,
    read=0,
    status=0,
    other=0,
    redirect=MAX_REDIRECTS,
    raise_on_redirect=True,
    raise_on_status=False,
    respect_retry_after_header=False,
)
"""urllib3's retries of every request here: it follows redirects only; every other retry is
ours, resuming where the body broke (:mod:`wdspipes.io.ranges` retries its ranges alike)."""
CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)
"""A ``Content-Range`` header: the first and last byte given, and the object's length."""
_TIMEOUTS = (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ConnectTimeoutError)
_READ_ERRORS = (HTTPError, OSError, http.client.HTTPException)


class _RetryableError(Exception):
    """A request failed in a way a retry may cure; ``cause`` says how."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _BodyCutError(Exception):
    """A body ended before its Content-Length, without an error from the connection."""


class _AbortedError(Exception):
    """A request of a stream that :meth:`HttpStream.abort` stopped."""


class HttpStream(ClosingStream):
    """The body of an HTTP(S) response, readable like a binary file: ``read(n)``, ``close()``.

    Makes the request at once (retrying as the module describes); reads resume after drops.
    ``shown`` is the URL errors name (the ``ais://`` one for AIStore objects). With ``start``
    and ``end``, the stream is bytes ``[start, end)`` of the object (``end`` None: to its end),
    asked for with ``Range``; ``version``, the length and ETag of the object as an earlier
    response gave them, makes any other version an error.
    """

    def __init__(
        self,
        url: str,
        shown: str,
        *,
        retries: int,
        backoff: float,
        timeout: float,
        start: int = 0,
        end: int | None = None,
        version: tuple[int | None, str | None] | None = None,
    ) -> None:
        self.url = url
        self.shown = redact(shown)  # no secret of the URL in errors and log lines
        self._retries = retries
        self._backoff = backoff
        self._timeout = urllib3.Timeout(connect=timeout, read=timeout)
        self._timeout_seconds = timeout
        self._buffer = b""  # read ahead, served from _pos up to _limit
        self._pos = 0
        self._limit = 0
        self._received = start  # offset of the next byte to receive (delivered or buffered)
        self._end = end
        self._length, self._etag = version or (None, None)  # of the whole object, once known
        self._ranges = False  # the server said it serves byte ranges of the object
        self._failures = 0  # failed attempts in a row, since the body last made progress
        self._mark = start  # bytes received at the last failure
        self._at_end = False
        self._response: urllib3.BaseHTTPResponse | None = None
        self._opened = version is not None
        self._stop = threading.Event()  # set by abort()
        self._lock = threading.Lock()  # abort() against the connection a request takes
        self._requesting: HTTPConnection | None = None  # its connection, until it answers
        on_cancel(self.abort)
        self._connect()

    @property
    def closed(self) -> bool:
        return self._response is None and not self._at_end

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (all the rest if negative); fewer only at the end."""
        pos = self._pos
        end = pos + size
        if size >= 0 and end <= self._limit:
            self._pos = end
            return self._buffer[pos:end]
        return self._read_through(size)

    def read1(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (and at most :data:`CHUNK_SIZE`) as soon as any have arrived:
        those read ahead, else what one receive gives; empty only at the end."""
        size = CHUNK_SIZE if size < 0 else min(size, CHUNK_SIZE)
        if self._pos < self._limit:
            return self.read(min(size, self._limit - self._pos))
        if self.closed:
            raise ValueError(f"read of a closed stream: {self.shown}")
        return self._fetch(size) if size else b""

    def close(self) -> None:
        """Release the connection; before the end of the body, close it unread."""
        response, self._response = self._response, None
        self._buffer, self._pos, self._limit = b"", 0, 0
        self._at_end = False
        if response is not None:
            discard(response)

    def abort(self) -> None:
        """Stop the stream from another thread: a receive, a request or a wait before a retry
        in progress ends at once, with an error, and nothing is retried. Close it after."""
        with self._lock:
            self._stop.set()
            response = self._response
            connection = self._requesting if response is None else response.connection
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)  # a receive ends; the close after resets

    def split_size(self) -> int | None:
        """The object's length, if the server serves byte ranges of it and nothing was read
        yet, so that other requests may read its later parts (:meth:`open_range`); else None."""
        if self._ranges and self._end is None and self._pos == self._limit == 0:
            return self._length
        return None

    def open_range(self, start: int, end: int) -> HttpStream:
        """Bytes ``[start, end)`` of the same object by a request of its own, retried and
        resumed alike; another version of the object is an error."""
        return HttpStream(
            self.url,
            self.shown,
            retries=self._retries,
            backoff=self._backoff,
            timeout=self._timeout_seconds,
            start=start,
            end=end,
            version=(self._length, self._etag),
        )

    def __del__(self) -> None:
        if getattr(self, "_response", None) is not None:
            try:
                self.close()
            except Exception:  # a finaliser must not raise; the stream was abandoned anyway
                log.debug("closing abandoned %r failed", self.shown, exc_info=True)

    def _read_through(self, size: int) -> bytes:
        """``read`` past the buffered bytes: the rest of the buffer joined (one copy) to what
        the connection gives next; the last chunk received becomes the buffer."""
        if self.closed:
            raise ValueError(f"read of a closed stream: {self.shown}")
        tail = memoryview(self._buffer)[self._pos : self._limit]
        self._buffer, self._pos, self._limit = b"", 0, 0
        data, rest, position = read_across(tail, size, self._next_chunk)
        self._buffer, self._pos, self._limit = rest, position, len(rest)
        return data

    def _next_chunk(self, wanted: int) -> bytes:
        """A read of a chunk or more goes straight to the connection, in one call."""
        return self._fetch(wanted, whole=True) if wanted >= CHUNK_SIZE else self._fetch()

    def _fetch(self, size: int = 0, whole: bool = False) -> bytes:
        """The next bytes of the body: ``size`` of them if ``whole`` (fewer only at the end or
        a drop), else up to ``size`` (:data:`CHUNK_SIZE` if 0) as one receive gives them.
        Resumes after failures (what a failed receive got is lost and asked for again); empty
        only at the end."""
        size = size or CHUNK_SIZE
        while not self._at_end:
            assert self._response is not None  # set until the end or close()
            if self._end is not None:
                size = min(size, self._end - self._received)
                if size <= 0:
                    self._at_end = True  # a range read whole; a longer 200 answer is cut here
                    break
            try:
                if whole:  # one call, receiving straight into the result
                    data = self._response.read(size, decode_content=False)
                else:
                    data = self._response.read1(size, decode_content=False)
            except _READ_ERRORS as exn:
                self._resume(exn)
                continue
            if data:
                self._received += len(data)
                return data
            limit = self._length if self._end is None else self._end
            if limit is not None and self._received < limit:
                cut = _BodyCutError(f"the body ended at byte {self._received} of {limit}")
                self._resume(cut)
                continue
            self._at_end = True
        return b""

    def _resume(self, cause: BaseException) -> None:
        """The body broke off: drop the connection, request the rest."""
        if self._response is not None:
            discard(self._response)
            self._response = None
        self._connect(cause)

    def _connect(self, cause: BaseException | None = None) -> None:
        """Request the body from the bytes received on, after ``cause`` if a request failed;
        retry what a retry may cure."""
        while True:
            if cause is not None:
                self._back_off(cause)
            try:
                response = self._request()
            except BaseException as exn:
                with self._lock:
                    self._requesting = None
                if not isinstance(exn, _RetryableError):
                    raise
                cause = exn.cause
                continue
            with self._lock:  # abort() sees the request's connection, or the response's
                self._requesting = None
                self._response = response
            self._opened = True
            return

    def _back_off(self, cause: BaseException) -> None:
        """Count a failed attempt and wait before the next; raise when retries are used up."""
        if self._stop.is_set():
            raise self._error("stopped by abort()", offset=self._received) from cause
        if self._received > self._mark:  # progress since the last failure: start afresh
            self._mark = self._received
            self._failures = 0
        self._failures += 1
        if self._failures > self._retries:
            problem = f"{describe_failure(cause)}; gave up after {self._failures} attempts"
            raise self._error(problem, offset=self._received) from cause
        delay = self._backoff * 2 ** (self._failures - 1)
        log.warning(
            "%s: %s at byte %d; retry %d of %d in %.1f s",
            self.shown,
            redact(describe_failure(cause)),
            self._received,
            self._failures,
            self._retries,
            delay,
        )
        _sleep(delay, self._stop)
        if self._stop.is_set():
            raise self._error("stopped by abort()", offset=self._received) from cause

    def _error(self, problem: str, offset: int | None = None) -> ShardError:
        """A located error: a ShardOpenError until a response came, a ShardError after."""
        if self.shown != redact(self.url):
            problem = f"{problem} (GET {self.url})"  # WdsError redacts it
        kind = ShardError if self._opened else ShardOpenError
        return kind(problem, url=self.shown, offset=offset)

    def _request(self) -> urllib3.BaseHTTPResponse:
        """One GET, answered by a response ready to read from the bytes received on."""
        offset = self._received
        headers = {"Accept-Encoding": "identity"}
        if self._end is not None:
            headers["Range"] = f"bytes={offset}-{self._end - 1}"
        elif offset:
            headers["Range"] = f"bytes={offset}-"
        _requesting.stream = self
        try:
            response = _pool_manager().urlopen(
                "GET",
                self.url,
                headers=headers,
                preload_content=False,
                decode_content=False,
                retries=REDIRECTS_ONLY,
                timeout=self._timeout,
            )
        except MaxRetryError as exn:
            reason = exn.reason if exn.reason is not None else exn
            if isinstance(reason, ResponseError):
                raise self._error(f"more than {MAX_REDIRECTS} redirects") from exn
            if isinstance(reason, SSLError) and _certificate_failure(reason):
                problem = f"TLS certificate rejected: {describe_failure(reason)}"
                raise self._error(problem) from reason
            raise _RetryableError(reason) from exn
        except LocationValueError as exn:
            raise self._error(f"invalid URL: {exn}") from exn
        except _AbortedError as exn:
            raise self._error("stopped by abort()", offset=offset) from exn
        except _READ_ERRORS as exn:
            raise _RetryableError(exn) from exn
        finally:
            _requesting.stream = None
        try:
            self._accept(response, offset)
        except BaseException:
            discard(response)
            raise
        _quick_acks(response)
        return response

    def _track(self, connection: HTTPConnection) -> None:
        """The connection this stream's request goes out on, for :meth:`abort`; raises if
        aborted already."""
        with self._lock:
            if self._stop.is_set():
                raise _AbortedError("aborted")
            self._requesting = connection

    def _accept(self, response: urllib3.BaseHTTPResponse, offset: int) -> None:
        """Check that ``response`` continues the body at ``offset``; skip to it after a 200."""
        status = response.status
        if status not in (200, 206):
            failure = HttpStatusError(status, response.reason)
            if status in RETRY_STATUSES:
                raise _RetryableError(failure)
            raise self._error(str(failure), offset=offset or None) from failure
        start, total = 0, _content_length(response)
        if status == 206:
            match = CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
            if match is None:
                raise self._error("206 answer without a valid Content-Range", offset=offset)
            start = int(match.group(1))
            total = None if match.group(3) == "*" else int(match.group(3))
            if start != offset:
                raise self._error(f"asked for bytes from {offset}, got from {start}", offset)
        etag = response.headers.get("ETag")
        if self._opened:
            self._check_unchanged(total, etag)
        self._length = self._length if total is None else total
        self._etag = self._etag if etag is None else etag
        self._ranges = response.headers.get("Accept-Ranges", "").strip().lower() == "bytes"
        if start < offset:  # 200: the server ignored Range
            self._skip(response, offset)

    def _check_unchanged(self, total: int | None, etag: str | None) -> None:
        """Raise if a resumed response is of another version of the shard."""
        if total is not None and self._length is not None and total != self._length:
            problem = f"shard changed on the server: {total} bytes long, was {self._length}"
            raise self._error(problem, offset=self._received)
        if etag is not None and self._etag is not None and etag != self._etag:
            problem = f"shard changed on the server: ETag {etag}, was {self._etag}"
            raise self._error(problem, offset=self._received)

    def _skip(self, response: urllib3.BaseHTTPResponse, offset: int) -> None:
        """Read and drop the first ``offset`` bytes of a whole body, received before."""
        count = offset
        while count > 0:
            try:
                data = response.read(min(count, CHUNK_SIZE), decode_content=False)
            except _READ_ERRORS as exn:
                raise _RetryableError(exn) from exn
            if not data:  # a body without Content-Length, shorter than before
                raise self._error("shard changed on the server: shorter than before", offset)
            count -= len(data)


def _content_length(response: urllib3.BaseHTTPResponse) -> int | None:
    try:
        return int(response.headers["Content-Length"])
    except (KeyError, ValueError):
        return None


_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


def _quick_acks(response: urllib3.BaseHTTPResponse) -> None:
    """Have the kernel acknowledge the body's segments at once (see the module doc)."""
    sock = getattr(response.connection, "sock", None)
    if sock is not None and _QUICKACK is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)


def discard(response: urllib3.BaseHTTPResponse) -> None:
    """Close a response and give its connection slot back; unread bytes are not read."""
    response.close()
    response.release_conn()


def _causes(exn: BaseException) -> list[BaseException]:
    """``exn`` and the errors it wraps, outermost first: ``__cause__``, ``__context__``, and
    an error among its arguments (urllib3's ``ProtocolError(message, error)``)."""
    chain = [exn]
    while len(chain) < 20:
        last = chain[-1]
        inner = last.__cause__ or last.__context__
        if inner is None:
            inner = next((arg for arg in last.args if isinstance(arg, BaseException)), None)
        if inner is None or inner in chain:
            break
        chain.append(inner)
    return chain


def _certificate_failure(exn: BaseException) -> bool:
    return any(isinstance(error, ssl.CertificateError) for error in _causes(exn))


def describe_failure(exn: BaseException) -> str:
    """A short account of a failure: its innermost cause, without urllib3's wrapping."""
    causes = _causes(exn)
    root = causes[-1]
    # exact types: NewConnectionError (connection refused, ...) is a ConnectTimeoutError too
    if isinstance(root, TimeoutError) or type(root) in _TIMEOUTS:
        return "timed out"
    if isinstance(root, http.client.IncompleteRead):
        if isinstance(root.expected, int):
            return f"connection closed with {root.expected} bytes of the response to come"
        return "connection closed before the end of the response"
    if isinstance(root, http.client.RemoteDisconnected):
        return "connection closed without a response"
    if isinstance(root, OSError) and root.strerror:
        return root.strerror
    return str(root) or type(root).__name__


# --- one connection pool per process ---------------------------------------------------------

_requesting = threading.local()  # .stream: the HttpStream whose request this thread makes


def _track(connection: HTTPConnection) -> None:
    """Tell the stream making a request in this thread which connection it goes out on."""
    stream: HttpStream | None = getattr(_requesting, "stream", None)
    if stream is not None:
        stream._track(connection)


class _TrackedHTTPConnection(HTTPConnection):
    """A connection that tells the stream using it, so that an abort can shut its socket."""

    def connect(self) -> None:
        super().connect()
        _track(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _track(self)
        super().request(*args, **kwargs)


class _TrackedHTTPSConnection(_TrackedHTTPConnection, HTTPSConnection):
    """:class:`_TrackedHTTPConnection` over TLS."""


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


_pool: tuple[int, urllib3.PoolManager] | None = None
_pool_lock = threading.Lock()
_inherited: list[urllib3.PoolManager] = []  # a parent's pools: never used, never closed here


def _pool_manager() -> urllib3.PoolManager:
    """This process's connection pool, made on first use in each process."""
    global _pool
    pool = _pool
    pid = os.getpid()
    if pool is not None and pool[0] == pid:
        return pool[1]
    with _pool_lock:
        if _pool is None or _pool[0] != pid:
            if _pool is not None:
                # Its sockets are the parent's: closing them here could disturb the parent, and
                # letting them be collected would warn. They go when this process ends.
                _inherited.append(_pool[1])
            manager = urllib3.PoolManager(maxsize=POOL_SIZE, block=False)
            manager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
            _pool = (pid, manager)
        return _pool[1]


def pool_manager() -> urllib3.PoolManager:
    """This process's connection pool, for other requests than a shard's stream (the ranged
    reads of :mod:`wdspipes.io.ranges`)."""
    return _pool_manager()


def _forget_lock_after_fork() -> None:
    global _pool_lock
    _pool_lock = threading.Lock()  # another thread may have held it as the process forked


os.register_at_fork(after_in_child=_forget_lock_after_fork)


@atexit.register
def close_connections() -> None:
    """Close the idle connections this process keeps for its next shards."""
    pool = _pool
    if pool is not None and pool[0] == os.getpid():
        manager = pool[1]
        for key in manager.pools.keys():  # noqa: SIM118 (it cannot be iterated)
            with contextlib.suppress(KeyError):
                manager.pools[key].close()
        manager.clear()


# --- the URL schemes -------------------------------------------------------------------------


def _check_tunables(retries: int, backoff: float, timeout: float) -> None:
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    if backoff < 0:
        raise ValueError(f"backoff must be >= 0, got {backoff}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")


def open_http(
    url: str,
    *,
    retries: int | None = None,
    backoff: float | None = None,
    timeout: float | None = None,
) -> HttpStream:
    """Open an ``http://`` or ``https://`` shard: its body as a stream.

    Args:
        url: the shard's URL.
        retries: failed attempts in a row to retry (default :data:`RETRIES`).
        backoff: seconds before the first retry, doubling after (default :data:`BACKOFF`).
        timeout: seconds to connect and between bytes (default :data:`TIMEOUT`).

    Raises:
        ShardOpenError: a status such as 404 or 403, or no response after the retries.
        ValueError: a negative tunable.
    """
    return _open(url, url, retries, backoff, timeout)


def open_ais(
    url: str,
    *,
    retries: int | None = None,
    backoff: float | None = None,
    timeout: float | None = None,
) -> HttpStream:
    """Open an ``ais://BUCKET/OBJECT`` shard through the AIStore endpoint in ``AIS_ENDPOINT``.

    Takes the arguments of :func:`open_http`.

    Raises:
        ShardOpenError: ``AIS_ENDPOINT`` is unset or not an HTTP(S) URL, the URL names no
            bucket or object, or as :func:`open_http`.
    """
    return _open(ais_url(url), url, retries, backoff, timeout)


def ais_url(url: str) -> str:
    """The HTTP URL of the object ``ais://BUCKET/OBJECT`` at the AIStore endpoint in
    ``AIS_ENDPOINT``, read now (see :func:`ais_to_http`).

    Raises:
        ShardOpenError: ``AIS_ENDPOINT`` is unset or not an HTTP(S) URL, or the URL names no
            bucket or object.
    """
    endpoint = os.environ.get("AIS_ENDPOINT", "").strip()
    if not endpoint:
        raise ShardOpenError(
            "AIS_ENDPOINT is not set: set it to your AIStore endpoint, "
            "e.g. export AIS_ENDPOINT=http://aistore:51080",
            url=url,
        )
    if not re.match(r"https?://", endpoint, re.IGNORECASE):
        raise ShardOpenError(
            f"AIS_ENDPOINT must be an http:// or https:// URL, got {endpoint!r}", url=url
        )
    return ais_to_http(url, endpoint)


def ais_to_http(url: str, endpoint: str) -> str:
    """The HTTP URL of the object ``ais://BUCKET/OBJECT`` at an AIStore endpoint: each path
    segment quoted.

    Raises:
        ShardOpenError: the URL is not of the form ``ais://BUCKET/OBJECT``.
    """
    match = re.fullmatch(r"ais://([^/]+)/(.+)", url, re.IGNORECASE | re.DOTALL)
    if match is None:
        raise ShardOpenError("expected ais://BUCKET/OBJECT", url=url)
    bucket, name = match.groups()
    path = "/".join(quote(segment, safe="") for segment in [bucket, *name.split("/")])
    return f"{endpoint.rstrip('/')}/v1/objects/{path}"


def _open(
    url: str, shown: str, retries: int | None, backoff: float | None, timeout: float | None
) -> HttpStream:
    retries = RETRIES if retries is None else retries
    backoff = BACKOFF if backoff is None else backoff
    timeout = TIMEOUT if timeout is None else timeout
    _check_tunables(retries, backoff, timeout)
    return HttpStream(url, shown, retries=retries, backoff=backoff, timeout=timeout)
