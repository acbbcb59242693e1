"""Buffer shuffling, seeded the DataLoader2 way (see :mod:`wdspipes.core.seeds`).

The first item comes out once ``initial`` items are buffered; the buffer then grows to
``bufsize``; at the end it drains. Each epoch gives a new order; with ``seed`` the orders are
reproducible. Before ``sharding_filter`` (shard order) every worker and rank shuffles alike;
after it (samples) each shuffles differently. As in webdataset, the loader's ``shuffle`` flag
(``DataLoader(pipe, shuffle=False)``) leaves it shuffling: torch's own ``.shuffle()`` stages
are the ones it switches.
"""

from __future__ import annotations

import itertools
import random
from array import array
from collections.abc import Iterator
from typing import Any, TypeVar

from torch.utils.data import IterDataPipe

from wdspipes.core.curried import Stage, stage_factory
from wdspipes.core.datapipe import StageDataPipe, functional_stage
from wdspipes.core.resumable import SamplePlaces
from wdspipes.core.resume import sample_places_of
from wdspipes.core.seeds import Seeding
from wdspipes.errors import ResumeError

__all__ = ["BufferShuffler", "Draws", "shuffle"]

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
        # Resume bookkeeping (see wdspipes.core.resume): where the buffered samples live, as flat
        # (shard number, offset) pairs in buffer order, the draws made, and what a restored
        # state asks of the next iteration.
        self.refs = array("q")
        self.draws = Draws(())
        self.tracking = False  # refs are kept (a reader upstream)
        self.untracked: str | None = None
        self._resume: dict[str, Any] | None = None

    def set_seed(self, seed: int) -> None:
        self.seeding.set_seed(seed)
        self._resume = None

    def set_shuffle(self, shuffle: bool = True) -> BufferShuffler[T]:
        """The loader's ``shuffle`` flag (``DataLoader(shuffle=...)``, DataLoader2's
        ``Shuffle`` adapter), which this stage takes and leaves aside, as webdataset's shuffles
        do: it shuffles as the pipeline says. Having the method makes torch count the stage as
        the pipeline's shuffle, so ``shuffle=True`` adds no torch ``Shuffler`` after it.

        >>> from torch.utils.data.datapipes.iter import IterableWrapper
        >>> shuffled = IterableWrapper(range(20)).buffer_shuffle(8, seed=1).set_shuffle(False)
        >>> list(shuffled) == list(range(20))
        False
        """
        return self

    def __iter__(self) -> Iterator[T]:
        resume, self._resume = self._resume, None
        link = sample_places_of(self)  # the reader's, where its samples come one for one
        places = link if isinstance(link, SamplePlaces) else None
        self.tracking = places is not None
        self.untracked = link if isinstance(link, str) else None
        if places is not None:
            self.seeding.mark()  # a sample shuffle: its own epoch, not the reader's
        draws = self.draws = Draws(self.seeding.next_material(self))
        buffer: list[T] = []
        refs = self.refs = array("q")
        source = iter(self.source_datapipe)
        if resume is not None:  # the reader yields the buffered samples first
            if places is None:
                raise ResumeError(
                    "BufferShuffler (buffer_shuffle): the state holds samples, but no reader "
                    "is upstream"
                )
            refs.frombytes(resume["buffer"])
            places.again = list(zip(refs[::2], refs[1::2], strict=True))  # before it begins
            draws.skip(resume["draws"])
            buffer.extend(itertools.islice(source, len(refs) // 2))
        for item in source:
            buffer.append(item)
            if places is not None:
                refs.extend(places.last)
            if len(buffer) < self.bufsize:  # grow: take one more while below bufsize
                extra = next(source, _END)
                if extra is not _END:
                    buffer.append(extra)  # type: ignore[arg-type]
                    if places is not None:
                        refs.extend(places.last)
            if len(buffer) >= self.initial:
                yield _take(buffer, refs, draws)
        while buffer:
            yield _take(buffer, refs, draws)

    def __len__(self) -> int:
        return len(self.source_datapipe)  # a TypeError where the source has no length

    def replay_state(self) -> dict[str, Any]:
        """Before the reader (a shard shuffle): the seed materials of the epoch."""
        return {"seeding": self.seeding.state()}

    def resume_state(self) -> dict[str, Any]:
        """After the reader: the seed materials, the draws made, and the places of the
        samples in the buffer (which the reader yields again first when restored)."""
        state: dict[str, Any] = {"seeding": self.seeding.state()}
        if self.untracked is not None:
            raise ResumeError(
                f"BufferShuffler (buffer_shuffle) cannot save where the samples in its buffer "
                f"live: {self.untracked} between it and the reader changes how many items come "
                "out; shuffle before that stage"
            )
        if self.tracking:
            state["draws"] = self.draws.count
            state["buffer"] = self.refs.tobytes()
        return state

    def resume_from(self, state: dict[str, Any]) -> None:
        self.seeding.load_state(state["seeding"])
        self._resume = state if "buffer" in state else None

    def begin_replay(self) -> None:
        self.seeding.mark()

    def prime_epoch(self, state: Any) -> None:
        if isinstance(state, dict) and "seeding" in state:
            self.seeding.prime(state["seeding"])


_END: object = object()


def _take(buffer: list[T], refs: array[int], draws: Draws) -> T:
    """Remove and return a random item in O(1), and its reference if refs are kept."""
    index = draws.below(len(buffer))
    buffer[index], buffer[-1] = buffer[-1], buffer[index]
    if refs:
        where, last = 2 * index, len(refs) - 2
        refs[where], refs[where + 1] = refs[last], refs[last + 1]
        del refs[last:]
    return buffer.pop()


class Draws:
    """Random indexes for one epoch that can be taken up again from their count alone.

    The generator is seeded anew every :attr:`BLOCK` draws from the epoch's seed material and
    the block's number, so going back to draw ``n`` costs at most a block of draws, wherever
    in the epoch ``n`` is.

    >>> a = Draws(("seed", 1))
    >>> first = [a.below(10) for _ in range(5000)]
    >>> b = Draws(("seed", 1))
    >>> b.skip(4990)
    >>> [b.below(10) for _ in range(10)] == first[4990:]
    True
    """

    BLOCK = 4096

    def __init__(self, material: tuple[object, ...]) -> None:
        self.material = material
        self.count = 0
        self._rng = random.Random(repr((material, 0)))

    def below(self, size: int) -> int:
        """A random index in ``range(size)``."""
        return int(self.random() * size)

    def random(self) -> float:
        """A random float in ``[0, 1)``: the draw :meth:`below` scales."""
        count = self.count
        if count and not count % self.BLOCK:
            self._rng = random.Random(repr((self.material, count // self.BLOCK)))
        self.count = count + 1
        return self._rng.random()

    def skip(self, count: int) -> None:
        """Go on as if ``count`` draws had been made."""
        block, within = divmod(count, self.BLOCK)
        self._rng = random.Random(repr((self.material, block)))
        for _ in range(within):
            self._rng.random()
        self.count = count


@stage_factory
def shuffle(bufsize: int = 1000, initial: int = 100, seed: int | None = None) -> Stage:
    """The shuffler stage for ``DataPipeline(...)``: ``buffer_shuffle(bufsize, initial, seed)``."""
    return Stage(BufferShuffler, bufsize=bufsize, initial=initial, seed=seed)
