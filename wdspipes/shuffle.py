"""Buffer shuffling, seeded the DataLoader2 way (see :mod:`wdspipes.seeds`).

The first item comes out once ``initial`` items are buffered; the buffer then grows to
``bufsize``; at the end it drains. Each epoch gives a new order; with ``seed`` the orders are
reproducible. Before ``sharding_filter`` (shard order) every worker and rank shuffles alike;
after it (samples) each shuffles differently.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TypeVar

from torch.utils.data import IterDataPipe

from wdspipes.curried import Stage, stage_factory
from wdspipes.datapipe import StageDataPipe, functional_stage
from wdspipes.seeds import Seeding

__all__ = ["BufferShuffler", "shuffle"]

T = TypeVar("T")


@functional_stage("buffer_shuffle")
class BufferShuffler(StageDataPipe[T]):
    """Shuffle items through a buffer (functional name: ``buffer_shuffle``).

    Args:
        source_datapipe: the items to shuffle.
        bufsize: the most items held at once.
        initial: how many items to buffer before the first comes out (at most ``bufsize``).
        seed: fixes the orders; otherwise the loader's ``set_seed`` or fresh entropy decides.

    Yields:
        The source's items, each once, in shuffled order.

    Raises:
        ValueError: ``bufsize`` < 1 or ``initial`` < 0.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> shuffled = IterableWrapper(range(10)).buffer_shuffle(bufsize=4, seed=0)
    >>> sorted(shuffled) == list(range(10)), list(shuffled) == list(shuffled)
    (True, False)
    """

    def __init__(
        self,
        source_datapipe: IterDataPipe[T],
        bufsize: int = 1000,
        initial: int = 100,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(bufsize, int) or bufsize < 1:
            raise ValueError(f"bufsize must be an int >= 1, got {bufsize!r}")
        if not isinstance(initial, int) or initial < 0:
            raise ValueError(f"initial must be an int >= 0, got {initial!r}")
        self.source_datapipe = source_datapipe
        self.bufsize = bufsize
        self.initial = min(initial, bufsize)
        self.seeding = Seeding(seed)
        self.enabled = True

    def set_seed(self, seed: int) -> None:
        self.seeding.set_seed(seed)

    def set_shuffle(self, shuffle: bool = True) -> BufferShuffler[T]:
        self.enabled = shuffle
        return self

    def __iter__(self) -> Iterator[T]:
        if not self.enabled:
            yield from self.source_datapipe
            return
        rng = self.seeding.next_rng(self)
        buffer: list[T] = []
        source = iter(self.source_datapipe)
        for item in source:
            buffer.append(item)
            if len(buffer) < self.bufsize:  # grow: take one more while below bufsize
                extra = next(source, _END)
                if extra is not _END:
                    buffer.append(extra)  # type: ignore[arg-type]
            if len(buffer) >= self.initial:
                yield _take(buffer, rng)
        while buffer:
            yield _take(buffer, rng)

    def __len__(self) -> int:
        return len(self.source_datapipe)  # a TypeError where the source has no length


_END: object = object()


def _take(buffer: list[T], rng: random.Random) -> T:
    """Remove and return a random item in O(1)."""
    index = rng.randrange(len(buffer))
    buffer[index], buffer[-1] = buffer[-1], buffer[index]
    return buffer.pop()


@stage_factory
def shuffle(bufsize: int = 1000, initial: int = 100, seed: int | None = None) -> Stage:
    """The shuffler stage for ``DataPipeline(...)``: ``buffer_shuffle(bufsize, initial, seed)``."""
    return Stage(BufferShuffler, bufsize=bufsize, initial=initial, seed=seed)
