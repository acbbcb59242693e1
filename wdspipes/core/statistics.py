"""Where a pipeline's time goes: per-stage statistics of an epoch, which a program reads from its
pipeline (``stats = pipe.statistics()``) and ``wdspipes info --bench`` prints, so that one sees
whether reading, decoding or the training step is the bottleneck.

For each stage: the items it yielded; the seconds it was *busy* (in its own code, in the thread
that iterates the pipeline); the seconds it *waited* on its source (in the stages before it, or,
for a stage that reads ahead in a thread, on that thread); for a stage working in threads, the
seconds of work its threads did and the samples in flight on average as it yielded; and the
seconds the program spent between items (the *consumer*: the training step, say). Measuring
costs two clock readings per item and stage, so it is on only for a pipeline asked for its
statistics, from the epoch that opens next.

>>> stats = PipelineStatistics()
>>> reading, decoding = stats.stage("load_tar + group_samples"), stats.stage("decode")
>>> reading.items, reading.inclusive = 100, 0.5
>>> decoding.items, decoding.inclusive = 100, 2.0
>>> stats.began, stats.ended = 10.0, 13.0
>>> stats.finish()
>>> [(s.name, round(s.busy, 2), round(s.waiting, 2)) for s in stats.stages]
[('load_tar + group_samples', 0.5, 0.0), ('decode', 1.5, 0.5)]
>>> round(stats.consumer, 2), stats.bottleneck()
(1.0, 'decode')
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PipelineStatistics", "StageStatistics", "timed"]


@dataclass
class StageStatistics:
    """One stage's figures in an epoch (see the module); seconds are wall-clock seconds."""

    name: str
    items: int = 0
    busy: float = 0.0
    waiting: float = 0.0
    thread_work: float = 0.0
    threads: int = 0
    in_flight_total: int = 0
    inclusive: float = 0.0  # in next() of its items, the stages before it included
    ahead: bool = False  # its source runs in another thread

    @property
    def in_flight(self) -> float:
        """Samples in its threads (or its read-ahead queue), on average, as it yielded one."""
        return self.in_flight_total / self.items if self.items else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "stage": self.name,
            "items": self.items,
            "busy_seconds": round(self.busy, 6),
            "waiting_seconds": round(self.waiting, 6),
            "thread_work_seconds": round(self.thread_work, 6),
            "threads": self.threads,
            "in_flight": round(self.in_flight, 3),
        }


@dataclass
class PipelineStatistics:
    """The statistics of a pipeline's epoch, stage by stage, source first (see the module); the
    figures of an epoch under way are those so far."""

    stages: list[StageStatistics] = field(default_factory=list)
    began: float | None = None
    ended: float | None = None
    consumer: float = 0.0

    @property
    def elapsed(self) -> float:
        """Seconds from the epoch's first item asked for to its end (or to now)."""
        if self.began is None:
            return 0.0
        return (time.perf_counter() if self.ended is None else self.ended) - self.began

    def stage(self, name: str) -> StageStatistics:
        """A new stage's record, after the others."""
        record = StageStatistics(name)
        self.stages.append(record)
        return record

    def finish(self) -> None:
        """Split each stage's time in ``next()`` into its own and its source's, and the rest of
        the epoch into the consumer's."""
        before = 0.0
        for record in self.stages:
            if record.ahead:  # its source ran in another thread: it waited on its queue
                record.waiting, record.busy = record.inclusive, 0.0
            else:
                record.waiting = before
                record.busy = max(0.0, record.inclusive - before)
            before = record.inclusive
        self.consumer = max(0.0, self.elapsed - before)

    def bottleneck(self) -> str:
        """The stage that took the most time of its own (its threads' work shared among them),
        or ``"consumer"`` if the program between items took more."""
        self.finish()
        costs = {"consumer": self.consumer}
        for record in self.stages:
            costs[record.name] = record.busy + record.thread_work / max(record.threads, 1)
        return max(costs, key=costs.__getitem__)

    def as_json(self) -> dict[str, Any]:
        self.finish()
        return {
            "elapsed_seconds": round(self.elapsed, 6),
            "consumer_seconds": round(self.consumer, 6),
            "bottleneck": self.bottleneck(),
            "stages": [record.as_json() for record in self.stages],
        }

    def lines(self) -> list[str]:
        """A table, a stage per line, and the verdict."""
        self.finish()
        rows = [
            f"{'stage':<28} {'items':>8} {'busy s':>7} {'waiting s':>9} {'threads s':>9} "
            f"{'in flight':>9}"
        ]
        for record in self.stages:
            work = f"{record.thread_work:9.2f}" if record.threads else " " * 9
            flight = f"{record.in_flight:9.1f}" if record.threads or record.ahead else " " * 9
            rows.append(
                f"{record.name[:28]:<28} {record.items:>8} {record.busy:7.2f} "
                f"{record.waiting:9.2f} {work} {flight}"
            )
        rows.append(f"{'consumer (between items)':<28} {'':>8} {self.consumer:7.2f}")
        rows.append(f"bottleneck: {self.bottleneck()} ({self.elapsed:.2f} s in all)")
        return rows

    def __str__(self) -> str:
        return "\n".join(self.lines())


def timed(items: Iterable[Any], record: StageStatistics) -> Iterator[Any]:
    """``items``, counting them and the seconds spent in ``next()`` of them in ``record``."""
    clock = time.perf_counter
    iterator = iter(items)
    try:
        while True:
            start = clock()
            try:
                item = next(iterator)
            except StopIteration:
                record.inclusive += clock() - start
                return
            record.inclusive += clock() - start
            record.items += 1
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
