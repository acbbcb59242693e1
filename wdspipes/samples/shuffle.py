"""Buffer shuffling, seeded the DataLoader2 way (see :mod:`wdspipes.core.seeds`).

The first item comes out once ``initial`` items are buffered; the buffer then grows to
``bufsize``; at the end it drains. Each epoch gives a new order; with ``seed`` the orders are
reproducible, and ``set_epoch(n)`` on the pipeline gives epoch ``n``'s. Before
``sharding_filter`` (shard order) every worker and rank shuffles alike; after it (samples) each
shuffles differently. As in webdataset, the loader's ``shuffle`` flag
(``DataLoader(pipe, shuffle=False)``) leaves it shuffling: torch's own ``.shuffle()`` stages
are the ones it switches.

webdataset's ``shuffle(bufsize, initial, rng=random.Random(...))`` and ``detshuffle(bufsize,
initial, seed, epoch)`` build the same stage: a generator given as ``rng`` gives the stage its
seed once, as it is built (the stage draws from its seed and the epoch, so that its state can
be saved), and ``epoch`` numbers the epoch before the first, as webdataset's counts up before
each, or is a counter the program shares with its workers (webdataset's ``SharedEpoch``).

>>> import random
>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> first = detshuffle(5, seed=1, epoch=2)(IterableWrapper(range(10)))
>>> again = IterableWrapper(range(10)).buffer_shuffle(5, seed=1)
>>> again.set_epoch(3)
>>> list(first) == list(again)  # detshuffle(epoch=2) begins with epoch 3
True
>>> a = shuffle(5, rng=random.Random(7))(IterableWrapper(range(10)))
>>> b = shuffle(5, rng=random.Random(7))(IterableWrapper(range(10)))
>>> list(a) == list(b)
True
"""

from __future__ import annotations

import itertools
import random
from array import array
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from wdspipes.core.arguments import int_at_least
from wdspipes.core.curried import Stage, stage_factory
from wdspipes.core.seeds import SeededStage, Seeding, SharedEpoch, sharding_position
from wdspipes.core.stage import CoreStage, core_stage
from wdspipes.errors import ResumeError
from wdspipes.state.elastic import owned
from wdspipes.state.graph import sample_places_of
from wdspipes.state.protocol import AllReaders, SamplePlaces

__all__ = ["BufferShuffler", "Draws", "detshuffle", "seed_from", "shuffle"]

T = TypeVar("T")


@core_stage("buffer_shuffle")
class BufferShuffler(SeededStage, CoreStage[T]):
    """Shuffle items through a buffer (functional name: ``buffer_shuffle``).

    Args:
        source_datapipe: the items to shuffle.
        bufsize: the most items held at once.
        initial: how many items to buffer before the first comes out (at most ``bufsize``).
        seed: fixes the orders; otherwise the loader's ``set_seed`` or fresh entropy decides.
        rng: a ``random.Random`` to take ``seed`` from, once (webdataset's argument).
        epoch: the number of the first epoch (as ``set_epoch``); or a counter whose
            ``get_value()`` is the epoch, read as each epoch begins (webdataset's
            ``SharedEpoch``, which a program sets in the main process).

    Yields:
        The source's items, each once, in shuffled order.

    Raises:
        ValueError: ``bufsize`` < 1 or ``initial`` < 0, or both ``seed`` and ``rng``.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> shuffled = IterableWrapper(range(10)).buffer_shuffle(bufsize=4, seed=0)
    >>> sorted(shuffled) == list(range(10)), list(shuffled) == list(shuffled)
    (True, False)
    """

    def __init__(
        self,
        source_datapipe: Iterable[T],
        bufsize: int = 1000,
        initial: int = 100,
        seed: int | None = None,
        *,
        rng: random.Random | None = None,
        epoch: int | SharedEpoch | None = None,
    ) -> None:
        super().__init__()
        int_at_least("bufsize", bufsize)
        int_at_least("initial", initial, least=0)
        self.source_datapipe = source_datapipe
        self.bufsize = bufsize
        self.initial = min(initial, bufsize)
        shared = None if epoch is None or isinstance(epoch, int) else epoch
        self.seeding = Seeding(seed_from(rng, seed), shared_epoch=shared)
        if isinstance(epoch, int):
            self.seeding.set_epoch(epoch)
        # Resume bookkeeping (see wdspipes.state.checkpoint): where the buffered samples live,
        # as flat (shard index, offset) pairs in buffer order, the draws made, and what a
        # restored state asks of the next iteration: the samples to hold again (and the draws
        # made), or a merged state's.
        self.refs = array("q")
        self.draws = Draws(())
        self.link: SamplePlaces | None = None  # the reader's, whose samples' places are kept
        self.untracked: str | None = None
        self._resume: dict[str, Any] | AllReaders | None = None

    def set_seed(self, seed: int) -> None:
        self.seeding.set_seed(seed)
        self._resume = None
        self.refs = array("q")
        self.draws = Draws(())

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
        places = self.link = link if isinstance(link, SamplePlaces) else None
        self.untracked = link if isinstance(link, str) else None
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
            again = self._held_again(resume, places)
            refs.extend(itertools.chain.from_iterable(again))
            places.again = again  # before the reader begins
            buffer.extend(itertools.islice(source, len(again)))
            while len(buffer) > self.bufsize:  # a merged state's share: back to bufsize
                yield _take(buffer, refs, draws)
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

    def _held_again(
        self, resume: dict[str, Any] | AllReaders, places: SamplePlaces
    ) -> list[tuple[int, int]]:
        """The places of the samples a restored state left in the buffer, in buffer order:
        its own (the draws made go on), or this reader's share of a merged state's (those in
        the shards the sharding filter gives it, drawn anew)."""
        if isinstance(resume, dict):
            held = array("q", resume["buffer"])
            self.draws.skip(resume["draws"])
            return list(zip(held[::2], held[1::2], strict=True))
        layout = sharding_position(self) or (1, 0)
        mine: set[tuple[int, int]] = set()
        for part in resume.parts:
            held = array("q", part.get("buffer", b""))
            places_held = zip(held[::2], held[1::2], strict=True)
            mine.update(place for place in places_held if owned(place[0], layout))
        return sorted(mine)

    def __len__(self) -> int:
        return len(self.source_datapipe)  # type: ignore[arg-type]  # a TypeError if it has none

    def get_state(self) -> dict[str, Any]:
        """The seed state; after the reader also the draws made and the places of the samples
        in the buffer (which the reader yields again first when restored). Before the reader
        (a shard shuffle), the seed state alone makes it give the epoch's order again.

        Raises:
            ResumeError: a stage between the reader and the buffer changes how many items come
                out, so the buffered samples' places are not known.
        """
        state: dict[str, Any] = {"seeding": self.seeding.state()}
        if self.untracked is not None:
            raise ResumeError(
                f"BufferShuffler (buffer_shuffle) cannot save where the samples in its buffer "
                f"live: {self.untracked} between it and the reader changes how many items come "
                "out; shuffle before that stage"
            )
        if self.link is not None:
            state["draws"] = self.draws.count
            state["buffer"] = self.refs.tobytes()
        return state

    def set_state(self, state: Any) -> None:
        super().set_state(state)
        if isinstance(state, AllReaders):
            self._resume = state if any("buffer" in part for part in state.parts) else None
        else:
            self._resume = state if "buffer" in state else None


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


def seed_from(rng: random.Random | int | None, seed: int | None) -> int | None:
    """The seed of a shuffle given ``seed=`` or, as webdataset's, a generator ``rng``: one
    draw of it, taken now. An int in the place of ``rng`` is a seed (``shuffle``'s third
    argument was its seed before it took webdataset's ``rng``).

    Raises:
        ValueError: both are given.
        TypeError: ``rng`` has no ``getrandbits`` (it is not a ``random.Random``).
    """
    if rng is None or isinstance(rng, int):
        if rng is not None and seed is not None:
            raise ValueError("give a shuffle seed= or rng=, not both")
        return seed if rng is None else rng
    if seed is not None:
        raise ValueError("give a shuffle seed= or rng=, not both")
    if not callable(getattr(rng, "getrandbits", None)):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    return int(rng.getrandbits(63))


@stage_factory
def shuffle(
    bufsize: int = 1000,
    initial: int = 100,
    rng: random.Random | int | None = None,
    seed: int | None = None,
    handler: Any = None,  # taken and not used, as in webdataset
) -> Stage:
    """The shuffler stage for ``DataPipeline(...)``: ``buffer_shuffle(bufsize, initial, seed)``,
    in webdataset's signature (``seed`` from a generator ``rng``, if given: see the module)."""
    return Stage(BufferShuffler, bufsize=bufsize, initial=initial, seed=seed_from(rng, seed))


@stage_factory
def detshuffle(
    bufsize: int = 1000,
    initial: int = 100,
    seed: int = 0,
    epoch: int | SharedEpoch = -1,
) -> Stage:
    """webdataset's ``detshuffle``: ``buffer_shuffle(bufsize, initial, seed)`` whose first
    epoch is ``epoch + 1`` (webdataset counts up before each epoch), or whose epoch is read
    from a counter shared with the program (see the module)."""
    first = epoch + 1 if isinstance(epoch, int) else epoch
    return Stage(BufferShuffler, bufsize=bufsize, initial=initial, seed=seed, epoch=first)
