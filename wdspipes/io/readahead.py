"""Read-ahead of shards: while a reader walks one shard, the next shards of its own list are
opened and their bytes received in the background, so that neither the first byte's latency
nor the transfer stalls the walk.

``open_shards`` (and ``url_opener``, ``tarfile_to_samples``, ``WebDataset``) reads through a
:class:`Prefetcher` with the :class:`ReadAhead` it is given: on by default for remote URLs
(``http(s)://``, ``ais://``, the fsspec stores, ``pipe:``), off with ``readahead=False``.

- **What runs ahead**: the next ``connections`` shards of the reader's list (after the split
  among ranks and workers: the same list the reader opens without read-ahead) are opened in
  order, each on a thread of the reader's own, and the bytes received go into a buffer that the
  reader's stream reads from: a receive never waits for the walk, and the walk never waits for
  bytes that have arrived. The shard being read is received in the background too.
- **Parts**: a shard is fetched in parts of ``part_size`` bytes. An object larger than
  ``ranged_above`` whose store serves byte ranges (HTTP ``Accept-Ranges: bytes``; every fsspec
  store) has its parts after the first fetched by ranged requests of their own, in parallel
  (one connection is the limit for large objects); other shards are received front to back.
- **Bounds**: at most ``max_bytes`` bytes received and not yet read (reserved a part at a
  time, before the part's request), and at most ``connections`` requests (or ``pipe:``
  commands) open, per reader; the part the reader needs next may exceed both, by one part and
  one connection, so that the reader always progresses. The threads (one per connection at
  most) start with the reader's epoch and are stopped and joined when it ends or is abandoned.
- **Local files** are read ahead only with ``local=True``: the next ones are opened and the
  kernel asked to load them into the page cache (``posix_fadvise(WILLNEED)``, no thread
  copies their bytes); their streams are the files themselves.
- **The same reading as without it**: shards come in the order of the list; a shard that
  fails to open raises when its turn comes, through the opener's handler, never earlier and
  never lost; a read error comes after the bytes before it; a dropped connection resumes at
  the exact byte (:mod:`wdspipes.io.http`); what a stage's state saves is where the delivered
  samples are, never what was read ahead; a restored reader reads ahead only the shards it
  will read, never those it passes by because its state (or a merged one) says they were
  read.
- **Stopping**: closing a stream before its end, or ending the epoch early (a ``break``, an
  exception, ``islice``), aborts its background requests at once (an HTTP request waiting for
  its first byte included; an fsspec request is let finish), ends its ``pipe:`` commands, and
  joins the threads: no thread, connection or descriptor is left behind.

:class:`ReadStats` says whether a reader is I/O bound: bytes, the time it waited for the
network and the time it spent on the rest. The opener logs them at INFO as each epoch ends
(logger ``wdspipes.io.readahead``); ``wdspipes info --bench URL...`` measures them from the
command line.

>>> ReadAhead()
ReadAhead(max_bytes=67108864, connections=32, part_size=8388608, ranged_above=33554432, \
local=False)
>>> [ReadAhead().wants(url) for url in ("s3://b/a.tar", "pipe:cat a.tar", "a.tar", "-")]
[True, True, False, False]
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import logging
import os
import stat
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

from wdspipes.core.arguments import int_at_least
from wdspipes.io.cache import discard_entry
from wdspipes.io.cancel import Cancel, cancellable
from wdspipes.io.chunks import read_across
from wdspipes.io.local import ClosingStream, reading_path
from wdspipes.io.urls import ByteStream, close_quietly

__all__ = [
    "LOG_INTERVAL",
    "Lookahead",
    "PrefetchedStream",
    "Prefetcher",
    "ReadAhead",
    "ReadStats",
    "readahead_config",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

LOG_INTERVAL = 60.0
"""Seconds between the INFO lines of a long epoch's read statistics (one also ends it)."""


@dataclass(frozen=True)
class ReadAhead:
    """How far a reader reads ahead (see the module documentation).

    Args:
        max_bytes: most bytes received and not yet read, over all the reader's shards.
        connections: most requests (or ``pipe:`` commands) open at once; also the number of
            shards opened ahead of the one being read.
        part_size: bytes fetched by one request (reserved in ``max_bytes`` before it starts).
        ranged_above: objects larger than this are fetched in parallel parts where the store
            serves byte ranges; None to fetch every shard front to back.
        local: read local files ahead too (opened early, loaded into the page cache).

    Raises:
        ValueError: a bound below its minimum.
    """

    max_bytes: int = 64 << 20
    connections: int = 32
    part_size: int = 8 << 20
    ranged_above: int | None = 32 << 20
    local: bool = False

    def __post_init__(self) -> None:
        for name, least in (("max_bytes", 0), ("connections", 1), ("part_size", 1)):
            int_at_least(f"ReadAhead {name}", getattr(self, name), least)
        if self.ranged_above is not None and (
            not isinstance(self.ranged_above, int) or self.ranged_above < self.part_size
        ):
            raise ValueError(
                f"ReadAhead ranged_above must be None or >= part_size ({self.part_size}), "
                f"got {self.ranged_above!r}"
            )

    def wants(self, url: str) -> bool:
        """Whether shards at ``url`` are read ahead: remote ones, and local files if
        :attr:`local`; never standard input."""
        if url == "-":
            return False
        return self.local or reading_path(url) is None


def readahead_config(readahead: ReadAhead | bool) -> ReadAhead | None:
    """The read-ahead a ``readahead=`` argument asks for: True the defaults, False none.

    >>> readahead_config(False) is None, readahead_config(True) == ReadAhead()
    (True, True)
    """
    if isinstance(readahead, ReadAhead):
        return readahead
    if readahead is True:
        return ReadAhead()
    if readahead is False:
        return None
    raise TypeError(f"readahead must be a bool or a ReadAhead, got {readahead!r}")


@dataclass
class ReadStats:
    """What a reader read ahead, and how long it waited for it: is it I/O bound?

    ``waited`` is the time the reader spent waiting for shards to open and for bytes not yet
    received; the rest of ``elapsed`` (``computing``) it spent walking the shards and in every
    stage after, the training step included. A reader that waits for a large share is I/O
    bound. ``peak_bytes`` is the most bytes held ahead at once (received and not yet read, or
    reserved for a request under way): at most ``max_bytes`` and one part.

    >>> stats = ReadStats(shards=24, bytes=96_000_000, waited=0.3, elapsed=1.2)
    >>> print(stats)
    24 shards, 96.0 MB in 1.20 s (80.0 MB/s); waited for the network 0.30 s (25%), \
the rest 0.90 s
    """

    shards: int = 0
    bytes: int = 0
    waited: float = 0.0
    elapsed: float = 0.0
    peak_bytes: int = 0

    @property
    def mb_per_second(self) -> float:
        return self.bytes / 1e6 / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def computing(self) -> float:
        return max(0.0, self.elapsed - self.waited)

    def __str__(self) -> str:
        share = self.waited / self.elapsed if self.elapsed > 0 else 0.0
        return (
            f"{self.shards} shards, {self.bytes / 1e6:,.1f} MB in {self.elapsed:.2f} s "
            f"({self.mb_per_second:,.1f} MB/s); waited for the network {self.waited:.2f} s "
            f"({share:.0%}), the rest {self.computing:.2f} s"
        )


class Lookahead(Generic[T]):
    """An iterator that can look at the items to come: :meth:`upcoming` pulls them from the
    source early. An error the source raises while looking ahead is raised when its turn
    comes. :attr:`index` counts the items taken.

    >>> items = Lookahead(iter("abc"))
    >>> next(items), items.upcoming(5), list(items), items.index
    ('a', ['b', 'c'], ['b', 'c'], 3)
    """

    def __init__(self, source: Iterable[T]) -> None:
        self._iterable = source
        self._source: Iterator[T] | None = None  # iter(source), at the first item wanted
        self._ahead: deque[T] = deque()
        self._error: Exception | None = None
        self._ended = False
        self.index = 0

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._ahead:
            item = self._ahead.popleft()
        elif self._error is not None:
            error, self._error, self._ended = self._error, None, True
            raise error
        elif self._ended:
            raise StopIteration
        else:
            item = next(self._iterator())
        self.index += 1
        return item

    def _iterator(self) -> Iterator[T]:
        if self._source is None:
            self._source = iter(self._iterable)
        return self._source

    def upcoming(self, count: int) -> list[T]:
        """The next ``count`` items, without taking them (fewer at the end, or before an
        error of the source)."""
        while len(self._ahead) < count and self._error is None and not self._ended:
            try:
                self._ahead.append(next(self._iterator()))
            except StopIteration:
                self._ended = True
            except Exception as exn:  # raised when the reader gets there
                self._error = exn
        return list(itertools.islice(self._ahead, count))


class _Shard:
    """A shard read ahead: its opened stream and its parts, in order."""

    def __init__(self, seq: int, position: int, item: Any, url: str) -> None:
        self.seq = seq
        self.position = position  # among the opener's items, as Lookahead.index counts
        self.item = item
        self.url = url
        self.cancel = Cancel()
        self.stream: ByteStream | None = None
        self.opened = False
        self.error: BaseException | None = None  # of opening it
        self.passthrough = False  # a local file: handed over as it is
        self.size: int | None = None  # known length
        self.parts: list[_Part] = []
        self.final = False  # no part will be added
        self.running = 0  # tasks working on it
        self.connected = False  # its stream holds a connection
        self.released = False  # the reader closed it, or the epoch ended


class _Open:
    """The task that opens a shard and plans its parts."""

    def __init__(self, shard: _Shard) -> None:
        self.shard = shard
        self.key = (shard.seq, -1)


class _Part:
    """Bytes ``[start, end)`` of a shard, received by one task from the shard's stream (front
    to back: ``end`` is a cap, reached unless the stream ends first) or by a ranged request of
    its own."""

    def __init__(self, shard: _Shard, start: int, end: int, ranged: bool) -> None:
        self.shard = shard
        self.key = (shard.seq, start)
        self.start = start
        self.end = end
        self.ranged = ranged
        self.outstanding = 0  # bytes reserved for it and not yet read
        self.chunks: deque[bytes] = deque()
        self.received = 0
        self.eof = False  # the shard's stream ended in this part
        self.done = False
        self.failed = False
        self.error: BaseException | None = None  # until it is raised


_Task = _Open | _Part


class Prefetcher:
    """Read-ahead over one epoch of a reader: :meth:`open` gives each shard's stream in turn,
    the next ones being opened and received meanwhile (see the module documentation).

    Args:
        config: the bounds.
        open_item: opens the shard of an item (called on the background threads; for an item
            that names no shard, in the reader's, where it raises).
        items: the reader's items, as it takes them (:meth:`open` is for the item taken last).
        url_of: the URL of an item, or None for one that names no shard.
        skipped: whether the reader passes by the item at a position (as
            :attr:`Lookahead.index` counts) without opening it: a restored reader skips the
            shards read before; those are never read ahead. None: it opens every item.
        stats: where to keep the statistics of the epoch (:attr:`stats`); new ones if None.

    Threads start as shards are scheduled; :meth:`close` stops and joins them.
    """

    def __init__(
        self,
        config: ReadAhead,
        open_item: Callable[[Any], ByteStream],
        items: Lookahead[Any],
        url_of: Callable[[Any], str | None],
        skipped: Callable[[int], bool] | None = None,
        stats: ReadStats | None = None,
    ) -> None:
        self.config = config
        self.stats = ReadStats() if stats is None else stats
        self._open_item = open_item
        self._items = items
        self._url_of = url_of
        self._skipped = skipped
        self._lock = threading.Lock()
        self._data = threading.Condition(self._lock)  # the reader waits on it
        self._work = threading.Condition(self._lock)  # the fetching threads wait on it
        self._shards: deque[_Shard] = deque()  # scheduled and not released, in order
        self._pending: list[tuple[tuple[int, int], int, _Task]] = []  # a heap, by key
        self._order = itertools.count()  # breaks ties in the heap
        self._reserved = 0  # bytes reserved for parts and not yet read
        self._connections = 0  # streams and ranged requests open
        self._workers: list[threading.Thread] = []
        self._idle = 0
        self._seq = itertools.count()
        self._scheduled_to = 0  # the last item position looked at
        self._closed = False
        self._started = time.perf_counter()
        self._logged = self._started
        _live.add(self)

    # --- the reader's side ---------------------------------------------------------------

    def open(self, item: Any) -> ByteStream:
        """The stream of ``item``, the item taken last: read ahead if it was scheduled, else
        opened now (read ahead if the config wants it). Raises what opening it raised."""
        position = self._items.index
        url = self._url_of(item)
        shard = None if url is None else self._take_scheduled(position, url)
        if shard is None and (url is None or not self.config.wants(url)):
            # Not read ahead, and not a reason to look ahead: the items to come are pulled
            # from the source only while remote shards are read, so that a source whose
            # advance does something (claim_shards releases the shard taken last) sees the
            # pace of the reader wherever read-ahead has nothing to do.
            return self._open_item(item)
        if shard is None:
            assert url is not None
            with self._lock:
                shard = self._schedule(position, item, url)
        self._schedule_ahead(position)
        with self._lock:
            if not (shard.opened or shard.error is not None):
                self._wait_for_data(lambda: shard.opened or shard.error is not None)
            if shard.error is not None or shard.passthrough:
                shard.released = True
                self._shards.remove(shard)
                self._work.notify_all()
        self._note_shard()
        if shard.error is not None:
            _raise_error_of(shard)
        assert shard.stream is not None
        return shard.stream if shard.passthrough else PrefetchedStream(self, shard)

    def close(self) -> None:
        """End the epoch: stop every background fetch, join the threads, close the streams
        not handed over, and log the statistics."""
        _live.discard(self)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            shards = list(self._shards)
            self._shards.clear()
            self._pending.clear()
            self._work.notify_all()
            self._data.notify_all()
        for shard in shards:
            shard.released = True
            shard.cancel.cancel()
        for worker in self._workers:
            worker.join()
        for shard in shards:
            shard.error = None  # no cycle through the traceback of an error never raised
            for part in shard.parts:
                part.error = None
            if shard.stream is not None:
                discard_entry(shard.stream)  # not read to its end
                close_quietly(shard.stream)
        if self.stats.shards:
            self._finish_stats()
            log.info("read ahead: %s", self.stats)

    def _take_scheduled(self, position: int, url: str) -> _Shard | None:
        """The shard scheduled for ``position``, if any; shards scheduled before it (items the
        reader passed by) are dropped."""
        dropped = []
        with self._lock:
            while self._shards and self._shards[0].position < position:
                passed = self._shards.popleft()
                passed.released = True
                dropped.append(passed)
            shard = self._shards[0] if self._shards else None
            if shard is not None and (shard.position != position or shard.url != url):
                shard = None
        for passed in dropped:
            self._drop(passed)
        return shard

    def _drop(self, shard: _Shard) -> None:
        """Stop and close a shard that will not be read."""
        shard.cancel.cancel()
        with self._lock:
            self._wait_idle(shard)
        if shard.stream is not None:
            discard_entry(shard.stream)  # not read to its end
            close_quietly(shard.stream)

    def _schedule_ahead(self, position: int) -> None:
        """Schedule the shards of the items after ``position``, as many as connections."""
        upcoming = self._items.upcoming(self.config.connections)
        with self._lock:
            for offset, item in enumerate(upcoming, start=1):
                if position + offset <= self._scheduled_to:
                    continue
                self._scheduled_to = position + offset
                if self._skipped is not None and self._skipped(position + offset):
                    continue  # a restored reader passes it by
                url = self._url_of(item)
                if url is not None and self.config.wants(url):
                    self._schedule(position + offset, item, url)

    def _wait_for_data(self, ready: Callable[[], bool]) -> None:
        """Wait (holding the lock) until ``ready()``, counting the time as waited."""
        began = time.perf_counter()
        while not ready():
            if self._closed:
                raise ValueError("read of a shard after its reader's epoch ended")
            self._data.wait()
        self.stats.waited += time.perf_counter() - began

    def _note_shard(self) -> None:
        self.stats.shards += 1
        now = time.perf_counter()
        if now - self._logged >= LOG_INTERVAL:
            self._logged = now
            self._finish_stats()
            log.info("read ahead so far: %s", self.stats)

    def _finish_stats(self) -> None:
        self.stats.elapsed = time.perf_counter() - self._started

    def take(self, stream: PrefetchedStream) -> bytes | None:
        """The next chunk of ``stream``'s shard, waiting for it; None at its end. Raises the
        error that fetching it met, after the bytes before it."""
        shard = stream.shard
        with self._lock:
            while True:
                if shard.released:
                    raise ValueError("read of a closed shard stream")
                if stream.part < len(shard.parts):
                    part = shard.parts[stream.part]
                    if part.chunks:
                        chunk = part.chunks.popleft()
                        part.outstanding -= len(chunk)
                        self._reserved -= len(chunk)
                        if self._pending:
                            self._work.notify()
                        self.stats.bytes += len(chunk)
                        self._finish_stats()
                        return chunk
                    if part.done:
                        if part.failed:
                            if part.error is None:
                                raise ValueError("read of a shard stream that failed")
                            _raise_error_of(part)
                        stream.part += 1
                        continue
                elif shard.final:
                    return None
                self._wait_for_data(lambda: _has_data(shard, stream.part))

    def release(self, stream: PrefetchedStream) -> None:
        """The reader closes ``stream``: stop what is still being fetched of its shard, free its
        bytes, and close the shard's own stream (raising what closing it raises: a
        ``pipe:`` command's status, say)."""
        shard = stream.shard
        with self._lock:
            busy = shard.running > 0 or not shard.final
            if not shard.released:
                shard.released = True
                if shard in self._shards:
                    self._shards.remove(shard)
        if busy:
            shard.cancel.cancel()
        with self._lock:
            self._wait_idle(shard)
        source = shard.stream
        if source is None:
            return
        if not stream.at_end:
            discard_entry(source)  # not read to its end
        source.close()

    # --- the background side -------------------------------------------------------------

    def _schedule(self, position: int, item: Any, url: str) -> _Shard:
        """A new shard to fetch (holding the lock): its opening is queued."""
        shard = _Shard(next(self._seq), position, item, url)
        self._shards.append(shard)
        self._queue(_Open(shard))
        return shard

    def _queue(self, task: _Task) -> None:
        heapq.heappush(self._pending, (task.key, next(self._order), task))
        if self._idle:
            self._work.notify()
        elif len(self._workers) <= self.config.connections and not self._closed:
            worker = threading.Thread(
                target=self._work_loop, name=f"wdspipes-readahead-{len(self._workers)}"
            )
            worker.daemon = True
            self._workers.append(worker)
            worker.start()

    def _work_loop(self) -> None:
        while True:
            with self._lock:
                task = self._next_task()
            if task is None:
                return
            if isinstance(task, _Open):
                self._run_open(task.shard)
            else:
                self._run_part(task)

    def _next_task(self) -> _Task | None:
        """The first task in order, once it may start (holding the lock); None once closed."""
        while not self._closed:
            while self._pending and self._pending[0][2].shard.released:
                heapq.heappop(self._pending)
            if self._pending and self._may_start(self._pending[0][2]):
                task = heapq.heappop(self._pending)[2]
                shard = task.shard
                if isinstance(task, _Open):
                    self._connections += 1
                    shard.connected = True
                else:
                    task.outstanding = task.end - task.start
                    self._reserved += task.outstanding
                    self.stats.peak_bytes = max(self.stats.peak_bytes, self._reserved)
                    if task.ranged:
                        self._connections += 1
                shard.running += 1
                return task
            self._idle += 1
            self._work.wait()
            self._idle -= 1
        return None

    def _may_start(self, task: _Task) -> bool:
        """Within the bounds, or what the reader needs next."""
        shard = task.shard
        head = self._shards[0] if self._shards else None
        if shard is head and (
            isinstance(task, _Open)
            or all(p.done and not p.chunks for p in shard.parts if p.start < task.start)
        ):
            return True
        if isinstance(task, _Open) or task.ranged:
            if self._connections >= self.config.connections:
                return False
            if isinstance(task, _Open):
                return True
        return self._reserved + task.end - task.start <= self.config.max_bytes

    def _run_open(self, shard: _Shard) -> None:
        """Open ``shard``, and plan its parts."""
        try:
            with cancellable(shard.cancel):
                stream = self._open_item(shard.item)
            fd = _local_file(stream)
            split_size = getattr(stream, "split_size", None)
            size = split_size() if fd is None and split_size is not None else None
        except BaseException as exn:
            with self._lock:
                if not (shard.cancel.cancelled or shard.released):  # else no one will raise it
                    shard.error = exn
                self._end_task(shard, final=True)
            return
        with self._lock:
            shard.stream = stream
            shard.opened = True
            if fd is not None:
                shard.passthrough = True
            elif not shard.released:
                self._plan(shard, size)
            self._end_task(shard, final=shard.passthrough or shard.released)
        if fd is not None:
            _load_ahead(fd, self.config.max_bytes)

    def _plan(self, shard: _Shard, size: int | None) -> None:
        """Queue the first part of an opened shard (holding the lock), and its other parts if
        it is large enough to be read in parallel ranges."""
        part_size = self.config.part_size
        shard.size = size
        first = _Part(shard, 0, part_size if size is None else min(size, part_size), False)
        shard.parts.append(first)
        self._queue(first)
        ranged_above = self.config.ranged_above
        if size is not None and ranged_above is not None and size > ranged_above:
            for start in range(first.end, size, part_size):
                later = _Part(shard, start, min(size, start + part_size), ranged=True)
                shard.parts.append(later)
                self._queue(later)
            shard.final = True

    def _run_part(self, part: _Part) -> None:
        shard = part.shard
        source: ByteStream | None = None
        error: BaseException | None = None
        try:
            with cancellable(shard.cancel):
                assert shard.stream is not None
                # a range of its own, or the shard's stream (assigned once it is opened: a
                # range that fails to open must not close the stream another part reads)
                if part.ranged:
                    source = shard.stream.open_range(part.start, part.end)  # type: ignore[attr-defined]
                else:
                    source = shard.stream
                self._pump(part, source)
        except BaseException as exn:
            error = exn
        finally:
            if source is not None and (part.ranged or shard.parts[-1].ranged):
                close_quietly(source)  # a range, or a stream whose rest comes in ranges
        with self._lock:
            self._finish(part, error)
        del error  # no cycle: this frame is in the error's traceback

    def _pump(self, part: _Part, source: ByteStream) -> None:
        """Receive ``part`` from ``source`` into its chunks."""
        read1 = getattr(source, "read1", None)
        cancel = part.shard.cancel
        while not cancel.cancelled:
            left = part.end - part.start - part.received
            if left <= 0:
                return
            data = read1(left) if read1 is not None else source.read(left)  # one request
            if not data:
                part.eof = True
                return
            with self._lock:
                part.chunks.append(data)
                part.received += len(data)
                self._data.notify()

    def _finish(self, part: _Part, error: BaseException | None) -> None:
        """A part's task ended (holding the lock): free what it reserved beyond what it
        received, plan the shard's next part, wake whom it concerns."""
        shard = part.shard
        part.done = True
        unused = part.end - part.start - part.received
        part.outstanding -= unused
        self._reserved -= unused
        if part.ranged:
            self._connections -= 1
        cancelled = shard.cancel.cancelled or shard.released
        if error is not None and not cancelled:
            part.error = error
            part.failed = True
        elif not part.ranged and not shard.final and not cancelled:
            start = part.start + part.received
            if not (part.eof or (shard.size is not None and start >= shard.size)):
                end = start + self.config.part_size
                later = _Part(
                    shard, start, end if shard.size is None else min(end, shard.size), False
                )
                shard.parts.append(later)
                self._queue(later)
                self._end_task(shard, final=False)
                return
        self._end_task(shard, final=part.failed or cancelled or not part.ranged)

    def _end_task(self, shard: _Shard, final: bool) -> None:
        """A task of ``shard`` ended (holding the lock): its stream's connection is given back
        once nothing more is read from it; the reader and the threads are woken."""
        shard.running -= 1
        shard.final = shard.final or final
        if (
            shard.connected
            and shard.final
            and not any(not p.done and not p.ranged for p in shard.parts)
        ):
            shard.connected = False
            self._connections -= 1
        self._data.notify_all()
        self._work.notify_all()

    def _wait_idle(self, shard: _Shard) -> None:
        """Wait (holding the lock) until no task works on ``shard``; free its bytes."""
        while shard.running:
            self._data.wait()
        shard.error = None  # its traceback refers to frames that refer to the shard
        for part in shard.parts:
            self._reserved -= part.outstanding
            part.outstanding = 0
            part.chunks.clear()
            part.error = None
        if shard.connected:
            shard.connected = False
            self._connections -= 1
        self._work.notify_all()


def _raise_error_of(holder: _Shard | _Part) -> NoReturn:
    """Raise the error met (on another thread) fetching ``holder``, and forget it: neither
    ``holder`` nor a frame that raises it refers to it any more, so that no cycle (error,
    traceback, frame) keeps the frames of the pipeline, and the connections they hold, alive
    until the garbage collector runs."""
    error, holder.error = holder.error, None
    assert error is not None
    try:
        raise error
    finally:
        del error


_live: weakref.WeakSet[Prefetcher] = weakref.WeakSet()
"""The prefetchers of this process not closed yet."""


@atexit.register
def _close_live() -> None:
    """At exit, close the epochs left open (an iterator never finished nor closed): their
    threads stop while the interpreter still runs them, before the iterators are finalised."""
    for prefetcher in list(_live):
        prefetcher.close()


def _forget_live_after_fork() -> None:
    _live.clear()  # the parent's: their threads and connections are not this process's


os.register_at_fork(after_in_child=_forget_live_after_fork)


def _has_data(shard: _Shard, index: int) -> bool:
    if shard.released:
        return True
    if index < len(shard.parts):
        part = shard.parts[index]
        return bool(part.chunks) or part.done
    return shard.final


class PrefetchedStream(ClosingStream):
    """A shard read ahead, as the reader sees it: ``read(n)`` from the bytes received in the
    background, waiting only for bytes not yet received; ``close()``. ``local_path`` and
    ``discard()`` are the shard's own stream's (a shard cache's file)."""

    def __init__(self, prefetcher: Prefetcher, shard: _Shard) -> None:
        self.shard = shard
        self.url = shard.url
        self.local_path: str | None = getattr(shard.stream, "local_path", None)
        self.part = 0  # the index of the part being read
        self.at_end = False
        self.closed = False
        self._prefetcher = prefetcher
        self._chunk = b""
        self._pos = 0

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (all the rest if negative); fewer only at the end."""
        pos = self._pos
        end = pos + size
        if size >= 0 and end <= len(self._chunk):
            self._pos = end
            return self._chunk[pos:end]
        return self._read_more(size)

    def _read_more(self, size: int) -> bytes:
        if self.closed:
            raise ValueError("read of a closed shard stream")
        tail = memoryview(self._chunk)[self._pos :]
        self._chunk, self._pos = b"", 0
        data, self._chunk, self._pos = read_across(tail, size, self._next_chunk)
        return data

    def _next_chunk(self, wanted: int) -> bytes:
        chunk = self._prefetcher.take(self)
        if chunk is None:
            self.at_end = True
            return b""
        return chunk

    def discard(self) -> None:
        """The reader found the shard bad: a shard cache must not keep it."""
        discard_entry(self.shard.stream)

    def close(self) -> None:
        """Stop fetching the shard and close its stream; after the end, raise what the source
        reports then (a ``pipe:`` command's failure, say). Later calls do nothing."""
        if self.closed:
            return
        self.closed = True
        self._chunk = b""
        self._prefetcher.release(self)


def _local_file(stream: ByteStream) -> int | None:
    """The descriptor of a regular local file behind ``stream``, if it is one (a local shard,
    a shard cache's entry): such a stream is handed over as it is."""
    inner = getattr(stream, "stream", stream)  # a Located's
    fileno = getattr(inner, "fileno", None)
    if fileno is None:
        return None
    try:
        fd: int = fileno()
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except (OSError, ValueError):
        return None
    return fd if regular else None


def _load_ahead(fd: int, limit: int) -> None:
    """Ask the kernel to read the first ``limit`` bytes of a file into the page cache."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None and limit:
        try:
            advise(fd, 0, limit, os.POSIX_FADV_WILLNEED)
        except OSError:
            log.debug("posix_fadvise failed", exc_info=True)
