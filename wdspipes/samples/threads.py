"""Work in threads inside a stage: ``decode``, ``map_samples``, ``map_dict`` and ``map_tuple``
with ``threads=N`` do their work on N samples at once, in a pool of threads of the process the
stage runs in (a loader's worker, or the training process itself), and yield in the order they
read.

The work of a stage is a function of one sample (:data:`Work`): it returns what the stage
yields for it (or :data:`DROP`), or raises one of the stage's errors, which goes through the
stage's handler in its place in the order. Without threads, :func:`each` runs it sample by
sample. With them, :class:`InFlight` submits the samples it reads to the pool in tasks of
consecutive samples (as many as take about :data:`TASK_SECONDS` of work) and yields the oldest
result once :attr:`InFlight.ahead` tasks are in flight (two per thread): memory stays bounded,
and a slow sample holds up only its own task. A stop, an error the handler does not
skip, or an abandoned iteration (``break``) cancels what has not begun and waits for the
samples under way, so no thread is left behind. Work that releases the GIL (libjpeg-turbo,
Pillow's and numpy's C code, zlib) runs on every core.

A state saved while samples are in flight holds where each of them lives (as a shuffle buffer
keeps its samples' places, when a reader is before the stage and every stage in between keeps
the places: see :class:`~wdspipes.core.context.SamplePlaces`), and the restored epoch reads
them again first: it goes on exactly, with the same results (the work of a sample depends on
the sample and the epoch alone).

>>> def double(x):
...     return 2 * x
>>> list(InFlight("double", range(6), double, 3, ValueError, None, EpochContext()))
[0, 2, 4, 6, 8, 10]
"""

from __future__ import annotations

import itertools
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from wdspipes.core.arguments import int_at_least
from wdspipes.core.context import EpochContext, Place
from wdspipes.core.elastic import owned
from wdspipes.core.protocol import AllReaders, Epoch
from wdspipes.errors import Handler, ResumeError, handle

__all__ = [
    "AHEAD",
    "DROP",
    "MOST_IN_A_TASK",
    "TASK_SECONDS",
    "InFlight",
    "Work",
    "check_threads",
    "each",
    "opened",
]

T = TypeVar("T")

Work = Callable[[Any], Any]
"""A stage's work on one sample: what it yields for it, :data:`DROP`, or one of its errors."""

DROP: Any = object()
"""What a stage's work returns for a sample it drops (``map_samples`` whose function gives
None)."""

AHEAD = 2
"""Tasks in flight per thread, at most: enough to keep every thread busy while the oldest is
yielded."""

Errors = type[Exception] | tuple[type[Exception], ...]


def check_threads(threads: int) -> int:
    """``threads``, the argument of a stage, checked: an int of at least 0 (0 for none).

    Raises:
        ValueError: it is not.
    """
    return int_at_least("threads", threads, least=0)


def each(source: Iterable[Any], work: Work, errors: Errors, handler: Handler) -> Iterator[Any]:
    """``work`` done on each item of ``source`` in turn, in this thread: its results, those of
    items whose work raised one of ``errors`` left to ``handler`` (skipped, or the end)."""
    for item in source:
        try:
            result = work(item)
        except errors as exn:
            if handle(handler, exn):
                continue
            return
        if result is not DROP:
            yield result


def opened(
    name: str,
    source: Iterable[Any],
    work: Work,
    threads: int,
    errors: Errors,
    handler: Handler,
    context: EpochContext,
    part: Any,
) -> Iterable[Any]:
    """A stage's epoch of ``work`` on its samples: in ``threads`` threads (:class:`InFlight`),
    or, without threads and nothing in flight to go on from, in this thread (:func:`each`)."""
    if threads or _held(part, context):
        return InFlight(name, source, work, max(threads, 1), errors, handler, context, part)
    return each(source, work, errors, handler)


class InFlight(Epoch[Any]):
    """An epoch of a stage whose work runs in a pool of ``threads`` threads (see the module):
    the samples in flight, taken from the source and not yielded yet, each with where it lives
    (its reader's place, when a reader is before the stage).

    The samples go to the pool in tasks of consecutive samples, as many as take about
    :data:`TASK_SECONDS` of work (measured as the epoch goes; one at first, at most
    :data:`MOST_IN_A_TASK`), and at most :data:`AHEAD` tasks a thread are in flight. One sample
    a task cost a thread's handover (a future, a wake-up, the GIL taken twice) for every sample:
    some 190 µs of CPU an image of 256 x 256, a third of its decoding (benchmarks/README.md,
    issue 34). Heavy samples (a large image) still go one a task, so what is in flight stays
    a few per thread.

    Args:
        name: the stage, as errors name it.
        source: the epoch of the stage before.
        work: the stage's work on one sample.
        threads: threads in the pool (1 or more).
        errors: the errors of ``work`` that go through ``handler``.
        handler: what to do with them.
        context: the stage's epoch context (its reader's places).
        part: what the epoch said when a state was saved (the places of the samples in flight
            then), or the parts of every reader of a job split another way; None for a fresh
            epoch.
    """

    def __init__(
        self,
        name: str,
        source: Iterable[Any],
        work: Work,
        threads: int,
        errors: Errors,
        handler: Handler | None,
        context: EpochContext,
        part: Any = None,
    ) -> None:
        self.name = name
        self.source = source
        self.work = work
        self.threads = threads
        self.ahead = AHEAD * threads
        self.errors = errors
        self.handler = handler
        self.context = context
        self.places = context.places
        self.untracked = context.untracked
        # tasks under way (oldest first), each with its samples' count and places (None
        # without a reader)
        self.flight: deque[tuple[Future[_Done], int, list[Place] | None]] = deque()
        # the results of the oldest task, not yielded yet, each with its sample's place
        self.ready: deque[tuple[Any, Place | None]] = deque()
        self.more = True  # the source has more samples
        self.ended: Exception | None = None  # what the source raised, after the samples before it
        held = _held(part, context)
        if held:  # the reader yields them first
            if self.places is None:
                raise ResumeError(
                    f"{name}: the state holds samples in flight, but no reader is upstream"
                )
            self.places.hold(held, fills=False)

    def __iter__(self) -> Iterator[Any]:
        places, flight, ready, ahead = self.places, self.flight, self.ready, self.ahead
        record = self.context.stats  # measured: the threads' work, the samples in flight
        if record is not None:
            record.threads = self.threads
        task = _task(self.work)
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="wdspipes-threads")
        items, size = iter(self.source), 1
        try:
            while ready or flight or self.more:
                if self.more and len(flight) < ahead:  # fill the pool up to its bound
                    taken, where = self._take(items, size)
                    if taken:
                        flight.append((pool.submit(task, taken), len(taken), where))
                    continue
                if not ready:
                    future, _, where = flight.popleft()
                    results, seconds = future.result()
                    ready.extend(zip(results, where or itertools.repeat(None), strict=False))
                    size = _task_size(len(results), seconds)
                    if record is not None:
                        record.thread_work += seconds
                if record is not None:
                    record.in_flight_total += self._count()
                result, place = ready.popleft()
                if type(result) is _Failed:
                    if not self._handled(result.error):
                        return
                    continue
                if place is not None:
                    places.last = place  # type: ignore[union-attr]
                if result is not DROP:
                    yield result
            if self.ended is not None:
                raise self.ended
        finally:
            flight.clear()  # ended or abandoned: nothing is in flight any more
            ready.clear()
            pool.shutdown(wait=True, cancel_futures=True)  # no thread left behind

    def _take(self, items: Iterator[Any], size: int) -> tuple[list[Any], list[Place] | None]:
        """The next task: up to ``size`` samples of the source, with their places (None
        without a reader). Where the source ends, :attr:`more` is False; where it raises, the
        error is kept in :attr:`ended`, raised after the samples read before it."""
        places = self.places
        taken: list[Any] = []
        where: list[Place] | None = None if places is None else []
        try:
            for item in items:
                taken.append(item)
                if where is not None:
                    where.append(places.last)  # type: ignore[union-attr]
                if len(taken) == size:
                    return taken, where
        except Exception as error:
            self.ended = error
        self.more = False  # then yield what is left in flight
        return taken, where

    def _count(self) -> int:
        """The samples in flight: taken from the source, not yielded yet."""
        return len(self.ready) + sum(taken for _, taken, _ in self.flight)

    def _handled(self, error: BaseException) -> bool:
        """Whether the epoch goes on past a sample whose work raised ``error``: its handler
        skips it (True) or ends the epoch (False); raised where it is not one of the stage's
        errors or the stage has no handler."""
        if self.handler is None or not isinstance(error, self.errors):
            raise error
        return handle(self.handler, error)

    def part(self) -> dict[str, Any] | None:
        """Where the samples in flight live (``"flight"``: flat ``(shard index, offset)`` pairs,
        oldest first); None when none is.

        Raises:
            ResumeError: samples are in flight and no reader before the stage keeps where they
                live.
        """
        count = self._count()
        if not count:
            return None
        if self.places is None:
            why = (
                f"{self.untracked} between it and the reader changes how many items come out"
                if self.untracked is not None
                else "no reader before it keeps where they live"
            )
            raise ResumeError(
                f"{self.name} cannot save its place with {count} samples in flight "
                f"in its threads: {why}; save the state where none is in flight, or work "
                "without threads"
            )
        held: list[Place] = [place for _, place in self.ready if place is not None]
        for _, _, where in self.flight:
            held.extend(where or ())
        return {"flight": array("q", itertools.chain.from_iterable(held)).tobytes()}


TASK_SECONDS = 0.01
"""About how long the work of one task of :class:`InFlight` takes: long enough that the
handover of a task costs little against it, short enough that a thread's task in flight holds
a few samples of heavy work."""

MOST_IN_A_TASK = 32
"""The most samples in one task of :class:`InFlight` (light work: what is in flight stays
bounded at ``AHEAD * threads * MOST_IN_A_TASK`` samples)."""

_Done = tuple[list[Any], float]  # a task's results in order, and the seconds its work took


class _Failed:
    """A sample's result that is the error its work raised."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _task_size(done: int, seconds: float) -> int:
    """How many samples the next task takes: as many as take :data:`TASK_SECONDS`, at the rate
    of the last task (``done`` samples in ``seconds``)."""
    if seconds <= 0:
        return MOST_IN_A_TASK
    return max(1, min(MOST_IN_A_TASK, int(TASK_SECONDS * done / seconds)))


def _task(work: Work) -> Callable[[list[Any]], _Done]:
    """A task of the pool: ``work`` on each of a list of samples, in a thread, each error in
    its sample's place (:class:`_Failed`), and the seconds it took."""
    clock = time.perf_counter

    def task(items: list[Any]) -> _Done:
        start = clock()
        results: list[Any] = []
        for item in items:
            try:
                results.append(work(item))
            except Exception as error:  # raised or handled in its place, in the epoch's thread
                results.append(_Failed(error))
        return results, clock() - start

    return task


def _held(part: Any, context: EpochContext) -> list[Place]:
    """The places of the samples a restored part had in flight: its own, oldest first; of the
    parts of every reader of a job split another way, those in this reader's shards."""
    if isinstance(part, dict) and "flight" in part:
        values = array("q", part["flight"])
        return list(zip(values[::2], values[1::2], strict=True))
    if isinstance(part, AllReaders):
        stream = (1, 0) if context.split is None else context.split.stream
        mine: set[Place] = set()
        for each_part in part.parts:
            values = array("q", (each_part or {}).get("flight", b""))
            found = zip(values[::2], values[1::2], strict=True)
            mine.update(place for place in found if owned(place[0], stream))
        return sorted(mine)
    return []
