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

import itertools
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from wdspipes.core.arguments import int_at_least
from wdspipes.core.curried import Stage, stage_factory
from wdspipes.core.seeds import PASS, REPEAT, read_again, sharding_position
from wdspipes.core.stage import CoreStage, core_stage
from wdspipes.errors import ResumeError
from wdspipes.state.checkpoint import abandon_epoch
from wdspipes.state.elastic import share_of
from wdspipes.state.protocol import AllReaders

__all__ = ["EpochLimiter", "EpochRepeater", "LengthSetter", "repeat", "with_epoch", "with_length"]


def _epochs(stage: EpochLimiter | EpochRepeater, count: int | None, resumed: bool) -> Iterator[Any]:
    """The items of ``count`` epochs of ``stage``'s source (without end if None), counting
    the epochs finished in ``stage.done``; stops, with a warning, if an epoch of the source
    yields nothing, rather than spin forever. A ``resumed`` first epoch goes on from a
    restored state, and may rightly be empty. Each epoch of the source after the first is
    read again within the loader's epoch (see :mod:`wdspipes.core.seeds`): ``with_epoch``'s as
    another pass, so that the shard order stays the epoch's in every worker and rank however
    often each reads its shards; ``repeat_epochs``', which every reader makes alike, as
    another repetition, with a shard order of its own."""
    source = stage.source_datapipe
    kind = PASS if isinstance(stage, EpochLimiter) else REPEAT
    for again in itertools.count() if count is None else range(count):
        if again or stage.done:
            read_again(source, kind)
        empty = True
        for item in source:
            empty = False
            yield item
        stage.done += 1
        if empty and not resumed:
            warnings.warn(
                f"{type(source).__name__} yielded no items; a reader with no shards?",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        resumed = False


@core_stage("with_epoch")
class EpochLimiter(CoreStage[Any]):
    """Make every epoch exactly ``nitems`` long (functional name: ``with_epoch``).

    The source is read from its start each epoch, and restarted as often as needed; a source
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

    def __init__(self, source_datapipe: Iterable[Any], nitems: int) -> None:
        super().__init__()
        int_at_least("nitems", nitems, least=0)
        self.source_datapipe = source_datapipe
        self.nitems = nitems
        self.count = 0  # items yielded this epoch
        self.done = 0  # epochs of the source finished in it
        self._resume: dict[str, Any] | AllReaders | None = None

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        self.count = self.done = 0
        if isinstance(resume, AllReaders):  # a merged state: this reader's share of the left
            left = sum(self.nitems - part["count"] for part in resume.parts)
            left += resume.starting * self.nitems
            self.count = self.nitems - share_of(left, sharding_position(self) or (1, 0))
        elif resume is not None:
            self.count, self.done = resume["count"], resume["done"]
        if self.count >= self.nitems:
            if resume is not None:  # restored at the end of its epoch
                abandon_epoch(self.source_datapipe)
            return
        for item in _epochs(self, None, resumed=resume is not None):
            self.count += 1
            yield item
            if self.count >= self.nitems:
                return

    def set_seed(self, seed: int) -> None:
        """A loader begins an epoch: a state loaded before is dropped (see
        wdspipes.state.checkpoint)."""
        self._resume = None
        self.count = self.done = 0

    def get_state(self) -> dict[str, Any]:
        return {"count": self.count, "done": self.done}

    def set_state(self, state: Any) -> None:
        if isinstance(state, AllReaders) and any(part["done"] for part in state.parts):
            raise ResumeError(
                "EpochLimiter (with_epoch) cannot resume with the shards split among another "
                "number of readers: a reader had read all its samples and was reading them "
                "again, so which ones are left is not known; keep the count of readers"
            )
        self._resume = state  # a merged state's share is taken as the epoch begins

    def __len__(self) -> int:
        return self.nitems


@core_stage("with_length")
class LengthSetter(CoreStage[Any]):
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

    one_to_one = True

    def __init__(self, source_datapipe: Iterable[Any], length: int) -> None:
        super().__init__()
        int_at_least("length", length, least=0)
        self.source_datapipe = source_datapipe
        self.length = length

    def __iter__(self) -> Iterator[Any]:
        yield from self.source_datapipe

    def __len__(self) -> int:
        return self.length


@core_stage("repeat_epochs")
class EpochRepeater(CoreStage[Any]):
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

    def __init__(self, source_datapipe: Iterable[Any], nepochs: int | None = None) -> None:
        super().__init__()
        int_at_least("nepochs", nepochs, least=0, none=True)
        self.source_datapipe = source_datapipe
        self.nepochs = nepochs
        self.done = 0  # epochs of the source finished
        self._resume: int | None = None

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        self.done = resume or 0
        left = None if self.nepochs is None else self.nepochs - self.done
        if left == 0 and resume is not None:  # restored at the end of its epoch
            abandon_epoch(self.source_datapipe)
        yield from _epochs(self, left, resumed=resume is not None)

    def set_seed(self, seed: int) -> None:
        """A loader begins an epoch: a state loaded before is dropped (see
        wdspipes.state.checkpoint)."""
        self._resume = None
        self.done = 0

    def get_state(self) -> dict[str, Any]:
        return {"done": self.done}

    def set_state(self, state: Any) -> None:
        if isinstance(state, AllReaders):
            done = {part["done"] for part in state.parts} | ({0} if state.starting else set())
            if len(done) > 1:
                raise ResumeError(
                    "EpochRepeater (repeat_epochs) cannot resume with the shards split among "
                    "another number of readers: its readers were in different repetitions"
                )
            state = {"done": done.pop() if done else 0}
        self._resume = state["done"]

    def __len__(self) -> int:
        if self.nepochs is None:
            raise TypeError("repeat_epochs(None) has no length: it does not end")
        return self.nepochs * len(self.source_datapipe)  # type: ignore[arg-type]


@stage_factory
def with_epoch(nitems: int) -> Stage:
    """``with_epoch(nitems)`` for ``DataPipeline(...)``."""
    return Stage(EpochLimiter, nitems)


@stage_factory
def with_length(length: int) -> Stage:
    """``with_length(length)`` for ``DataPipeline(...)``."""
    return Stage(LengthSetter, length)


@stage_factory
def repeat(nepochs: int | None = None) -> Stage:
    """``repeat_epochs(nepochs)`` for ``DataPipeline(...)``, under webdataset's name."""
    return Stage(EpochRepeater, nepochs)
