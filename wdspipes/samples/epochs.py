"""Epoch lengths: a fixed number of items per epoch, a declared length, repeated epochs.

Each applies to the stream it is given: placed after a ``sharding_filter`` (as in
``WebDataset(...)``), it counts the items of one reader, so ``with_epoch(1000)`` under four
workers gives 4000 items per epoch in all.

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> list(IterableWrapper(range(3)).with_epoch(7))
[0, 1, 2, 0, 1, 2, 0]
>>> list(IterableWrapper(range(3)).repeat_epochs(2))
[0, 1, 2, 0, 1, 2]
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from wdspipes.core.arguments import int_at_least
from wdspipes.core.context import PASS, REPEAT, EpochContext
from wdspipes.core.elastic import share_of
from wdspipes.core.protocol import AllReaders, Epoch, Resumes, register
from wdspipes.core.stage import Stage
from wdspipes.errors import ResumeError

__all__ = ["EpochLimiter", "EpochRepeater", "LengthSetter"]


class _Epochs(Epoch[Any]):
    """Epochs of a stage's source read one after another within the stage's epoch, counting
    those finished in :attr:`done`: each after the first opened again through the context, as
    another pass (``with_epoch``: only the stages after the split draw anew, so that the shard
    order stays the epoch's in every reader however often each reads its shards) or another
    repetition (``repeat_epochs``, which every reader makes alike: shard orders are drawn anew).
    Stops, with a warning, if an epoch of the source yields nothing, rather than spin forever;
    the first, going on from a restored state, may rightly be empty."""

    again = PASS

    def __init__(
        self,
        stage: Stage[Any],
        source: Iterable[Any],
        context: EpochContext,
        done: int,
        resumed: bool,
    ) -> None:
        self.stage, self.source, self.context = stage, source, context
        self.done = done
        self.resumed = resumed

    def _sources(self, count: int | None) -> Iterator[Iterable[Any]]:
        if count == 0:
            return
        yield self.source
        opened = 1
        while count is None or opened < count:
            assert self.context.reopen is not None  # a stage with a source
            yield self.context.reopen(self.again)
            opened += 1

    def _items(self, count: int | None) -> Iterator[Any]:
        resumed = self.resumed
        for source in self._sources(count):
            empty = True
            for item in source:
                empty = False
                yield item
            self.done += 1
            if empty and not resumed:
                name = type(self.stage.source_datapipe).__name__
                warnings.warn(
                    f"{name} yielded no items; a reader with no shards?",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return
            resumed = False


@register("with_epoch")
class EpochLimiter(Stage[Any]):
    """Make every epoch exactly ``nitems`` long (functional name: ``with_epoch``).

    The source is read from its start each epoch, and read again as often as needed; a source
    that yields nothing at all ends the epoch early with a RuntimeWarning.

    Args:
        source_datapipe: yields items.
        nitems: items per epoch.

    Yields:
        ``nitems`` items.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper("abcde").with_epoch(3))
    ['a', 'b', 'c']
    """

    resumes = Resumes.FROM_PART
    shares = True

    def __init__(self, source_datapipe: Iterable[Any], nitems: int) -> None:
        super().__init__()
        int_at_least("nitems", nitems, least=0)
        self.source_datapipe = source_datapipe
        self.nitems = nitems

    def open(self, source: Iterable[Any], context: EpochContext, part: Any = None) -> LimitEpoch:
        if part is None:
            return LimitEpoch(self, source, context, 0, 0, False)
        if not isinstance(part, AllReaders):
            return LimitEpoch(self, source, context, part["count"], part["done"], True)
        if any(each["done"] for each in part.parts):
            raise ResumeError(
                "EpochLimiter (with_epoch) cannot resume with the shards split among another "
                "number of readers: a reader had read all its samples and was reading them "
                "again, so which ones are left is not known; keep the count of readers"
            )
        left = sum(self.nitems - each["count"] for each in part.parts)
        left += part.starting * self.nitems
        split = context.split
        share = share_of(left, (1, 0) if split is None else split.stream)
        return LimitEpoch(self, source, context, self.nitems - share, 0, True)

    def __len__(self) -> int:
        return self.nitems


class LimitEpoch(_Epochs):
    """An epoch of ``with_epoch``: the items yielded, and the source's epochs finished."""

    def __init__(
        self,
        stage: EpochLimiter,
        source: Iterable[Any],
        context: EpochContext,
        count: int,
        done: int,
        resumed: bool,
    ) -> None:
        super().__init__(stage, source, context, done, resumed)
        self.nitems = stage.nitems
        self.count = count

    def __iter__(self) -> Iterator[Any]:
        nitems = self.nitems
        if self.count >= nitems:  # restored at the end of its epoch
            return
        for item in self._items(None):
            self.count += 1
            yield item
            if self.count >= nitems:
                return

    def part(self) -> dict[str, Any]:
        return {"count": self.count, "done": self.done}


@register("with_length")
class LengthSetter(Stage[Any]):
    """Declare the length ``len()`` reports (functional name: ``with_length``).

    What is yielded does not change; this is for training loops that need ``len()``.

    Args:
        source_datapipe: yields items.
        length: what ``len()`` returns.

    Yields:
        The source's items.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> len(IterableWrapper(iter(range(3)), deepcopy=False).with_length(3))
    3
    """

    resumes = Resumes.ITEM_BY_ITEM

    def __init__(self, source_datapipe: Iterable[Any], length: int) -> None:
        super().__init__()
        int_at_least("length", length, least=0)
        self.source_datapipe = source_datapipe
        self.length = length

    def open(self, source: Iterable[Any], context: EpochContext, part: Any = None) -> Iterator[Any]:
        yield from source

    def __len__(self) -> int:
        return self.length


@register("repeat_epochs")
class EpochRepeater(Stage[Any]):
    """Concatenate ``nepochs`` epochs of the source (functional name: ``repeat_epochs``).

    This is webdataset's ``.repeat(n)``; the functional name ``repeat`` is torchdata's, which
    repeats each item.

    Args:
        source_datapipe: yields items.
        nepochs: how many epochs; None for no end.

    Yields:
        The source's items, epoch after epoch.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper("ab").repeat_epochs(3))
    ['a', 'b', 'a', 'b', 'a', 'b']
    """

    resumes = Resumes.FROM_PART
    shares = True

    def __init__(self, source_datapipe: Iterable[Any], nepochs: int | None = None) -> None:
        super().__init__()
        int_at_least("nepochs", nepochs, least=0, none=True)
        self.source_datapipe = source_datapipe
        self.nepochs = nepochs

    def open(self, source: Iterable[Any], context: EpochContext, part: Any = None) -> RepeatEpoch:
        if isinstance(part, AllReaders):
            done = {each["done"] for each in part.parts} | ({0} if part.starting else set())
            if len(done) > 1:
                raise ResumeError(
                    "EpochRepeater (repeat_epochs) cannot resume with the shards split among "
                    "another number of readers: its readers were in different repetitions"
                )
            part = {"done": done.pop() if done else 0}
        if part is None:
            return RepeatEpoch(self, source, context, 0, False)
        return RepeatEpoch(self, source, context, part["done"], True)

    def __len__(self) -> int:
        if self.nepochs is None:
            raise TypeError("repeat_epochs(None) has no length: it does not end")
        return self.nepochs * len(self.source_datapipe)


class RepeatEpoch(_Epochs):
    """An epoch of ``repeat_epochs``: the source's epochs finished."""

    again = REPEAT

    def __iter__(self) -> Iterator[Any]:
        nepochs = self.stage.nepochs  # type: ignore[attr-defined]
        yield from self._items(None if nepochs is None else nepochs - self.done)

    def part(self) -> dict[str, Any]:
        return {"done": self.done}
