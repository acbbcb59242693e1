"""Reading ahead in a thread: ``prefetch_items(n)`` reads its source in a background thread of
the process it runs in, up to ``n`` items ahead of the stages after it, so that what comes
before it (opening and reading shards, grouping) overlaps with what comes after (decoding,
the training step) in one process.

The stages before it run in that thread: their items, their errors (raised here, in their
place), their end. Its state is theirs as of the item it yielded last: the thread notes the
parts of the stages before it with each item it reads ahead, so that a state saved while items
wait in its queue goes on exactly (those items are read again). Stopping (an abandoned epoch,
an error, the end) ends the thread; none is left behind.

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> list(IterableWrapper(range(5)).prefetch_items(2))
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from wdspipes.core.arguments import int_at_least
from wdspipes.core.context import EpochContext, Place
from wdspipes.core.protocol import Epoch, Resumes, register
from wdspipes.core.stage import Stage

__all__ = ["ItemPrefetcher", "PrefetchEpoch"]

T = TypeVar("T")


@register("prefetch_items")
class ItemPrefetcher(Stage[T]):
    """Read items ahead in a background thread (functional name: ``prefetch_items``).

    The source is read up to ``count`` items ahead of the stages after it.

    Args:
        source_datapipe: yields items.
        count: the most items read ahead and not yet yielded.

    Yields:
        The source's items, in order.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper("abc").prefetch_items(8))
    ['a', 'b', 'c']
    """

    resumes = Resumes.ITEM_BY_ITEM
    reads_ahead = True  # its state says the stages' before it as of what it yielded last
    keeps_places = True  # it says where each sample it yields lives, for the stages after it

    def __init__(self, source_datapipe: Iterable[T], count: int = 16) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.count = int_at_least("count", count)

    def open(
        self, source: Iterable[T], context: EpochContext, part: Any = None
    ) -> PrefetchEpoch[T]:
        return PrefetchEpoch(source, self.count, context)

    def __len__(self) -> int:
        return len(self.source_datapipe)  # a TypeError if it has none


class _Failed:
    """The error that ended the source, in the queue in its place."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END: Any = object()


class PrefetchEpoch(Epoch[T]):
    """An epoch of ``prefetch_items``: a thread reads the source into a queue of at most
    ``count`` items, each with where it lives (the reader's place, when a reader is before it)
    and the parts of the stages before it as of then."""

    def __init__(self, source: Iterable[T], count: int, context: EpochContext) -> None:
        assert context.parts_before is not None  # the engine hands it to a stage reading ahead
        self.source = source
        self.count = count
        self.up = context.places
        self.down = context.places_after
        self.snapshot = context.parts_before
        self.last_parts = context.parts_before()  # as the epoch opens: before any item
        self.context = context

    def __iter__(self) -> Iterator[T]:
        up, down = self.up, self.down
        if up is not None and down is not None and down.held:  # restored: through it, first
            up.hold(down.replay(), fills=False)
            down.clear()
        items: queue.Queue[Any] = queue.Queue(self.count)
        stop = threading.Event()
        thread = threading.Thread(
            target=self._read, args=(items, stop), name="wdspipes-prefetch", daemon=True
        )
        thread.start()
        record = self.context.stats  # measured: the items in its queue
        try:
            while True:
                if record is not None:
                    record.in_flight_total += items.qsize()
                got = items.get()
                if got is _END:
                    return
                if isinstance(got, _Failed):
                    raise got.error
                item, place, parts = got
                self.last_parts = parts
                if down is not None and place is not None:
                    down.last = place
                yield item
        finally:
            stop.set()
            while thread.is_alive():  # let it put what it holds, and see the stop
                with contextlib.suppress(queue.Empty):
                    items.get(timeout=0.05)
            thread.join()

    def _read(self, items: queue.Queue[Any], stop: threading.Event) -> None:
        """The thread: the source's items into ``items``, until its end, an error or ``stop``."""
        up, snapshot = self.up, self.snapshot
        try:
            for item in self.source:
                place: Place | None = None if up is None else up.last
                if not _put(items, (item, place, snapshot()), stop):
                    return
            _put(items, _END, stop)
        except BaseException as exn:  # raised in the reading thread, in its place
            _put(items, _Failed(exn), stop)

    def parts_before(self) -> list[Any]:
        return self.last_parts


def _put(items: queue.Queue[Any], value: Any, stop: threading.Event) -> bool:
    """Put ``value`` in ``items``, waiting for room unless ``stop`` is set; False if it was."""
    while not stop.is_set():
        try:
            items.put(value, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False
