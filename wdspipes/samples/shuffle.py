"""Buffer shuffling, seeded the DataLoader2 way (see :mod:`wdspipes.core.context`).

The first item comes out once ``initial`` items are buffered; the buffer then grows to
``bufsize``; at the end it drains. Each epoch gives a new order; with ``seed`` the orders are
reproducible, and ``set_epoch(n)`` on the pipeline gives epoch ``n``'s. Before
``sharding_filter`` (shard order) every worker and rank shuffles alike; after it (samples) each
shuffles differently. As in webdataset, the loader's ``shuffle`` flag
(``DataLoader(pipe, shuffle=False)``) leaves it shuffling: torch's own ``.shuffle()`` stages
are the ones it switches.

webdataset's ``shuffle(bufsize, initial, rng=random.Random(...))`` and ``detshuffle(bufsize,
initial, seed, epoch)`` build this stage (see :mod:`wdspipes.webdataset.stages`): a generator
given as ``rng`` gives it its seed once (:func:`seed_from`), and ``epoch`` may be a counter the
program shares with its workers (:class:`SharedEpoch`).
"""

from __future__ import annotations

import itertools
import random
from array import array
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar

from wdspipes.core.arguments import int_at_least
from wdspipes.core.context import EpochContext, Place, SamplePlaces
from wdspipes.core.elastic import owned
from wdspipes.core.protocol import AllReaders, Epoch, Resumes, register
from wdspipes.core.stage import Stage
from wdspipes.errors import ResumeError

__all__ = ["BufferShuffler", "Draws", "SharedEpoch", "seed_from"]

T = TypeVar("T")


class SharedEpoch(Protocol):
    """An epoch counter a program shares with its workers, as webdataset's ``SharedEpoch``:
    :meth:`get_value` gives the epoch."""

    def get_value(self) -> int: ...


@register("buffer_shuffle")
class BufferShuffler(Stage[T]):
    """Shuffle items through a buffer (functional name: ``buffer_shuffle``).

    Args:
        source_datapipe: the items to shuffle.
        bufsize: the most items held at once.
        initial: how many items to buffer before the first comes out (at most ``bufsize``).
        seed: fixes the orders; otherwise the loader's ``set_seed`` or fresh entropy decides.
        rng: a ``random.Random`` to take ``seed`` from, once (webdataset's argument).
        epoch: the number of the first epoch (as ``set_epoch``: the pipeline's epochs count on
            from it); or a counter whose ``get_value()`` is the epoch, read as each epoch
            begins (webdataset's ``SharedEpoch``, which a program sets in the main process).

    Yields:
        The source's items, each once, in shuffled order.

    Raises:
        ValueError: ``bufsize`` < 1 or ``initial`` < 0, or both ``seed`` and ``rng``.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> shuffled = IterableWrapper(range(10)).buffer_shuffle(bufsize=4, seed=0)
    >>> sorted(shuffled) == list(range(10)), list(shuffled) == list(shuffled)
    (True, False)
    """

    resumes = Resumes.FROM_START
    """Before the reader (a shard shuffle), its seed gives the epoch's order again; after it,
    its epoch says where the samples it holds live, and the reader reads them again."""
    shares = True
    keeps_places = True  # after the reader, it says where each sample it yields lives

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
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.source_datapipe = source_datapipe
        self.bufsize = bufsize
        self.initial = min(initial, bufsize)
        self.seed = seed_from(rng, seed)
        self.epoch = epoch

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

    def open(self, source: Iterable[T], context: EpochContext, part: Any = None) -> ShuffleEpoch[T]:
        epoch = self.epoch
        if epoch is not None and not isinstance(epoch, int):
            number: int | None = int(epoch.get_value())
        else:
            number = None if epoch is None else context.epoch + epoch
        draws = Draws(context.material(self.seed, number))
        places = context.places
        held: list[Place] = []
        if isinstance(part, dict) and "buffer" in part:
            values = array("q", part["buffer"])
            held = list(zip(values[::2], values[1::2], strict=True))
            draws.skip(part["draws"])
        elif isinstance(part, AllReaders):  # this reader's share: its shards' samples
            stream = (1, 0) if context.split is None else context.split.stream
            mine: set[Place] = set()
            for each in part.parts:
                values = array("q", (each or {}).get("buffer", b""))
                found = zip(values[::2], values[1::2], strict=True)
                mine.update(place for place in found if owned(place[0], stream))
            held = sorted(mine)
        number = None
        if held and places is None:
            raise ResumeError(
                "BufferShuffler (buffer_shuffle): the state holds samples, but no reader is "
                "upstream"
            )
        if places is not None and part is not None:  # the reader yields the samples held first
            number = places.hold(held, fills=True)
        return ShuffleEpoch(self, source, draws, places, context.untracked, held, number)

    def __len__(self) -> int:
        return len(self.source_datapipe)  # a TypeError if it has none


class ShuffleEpoch(Epoch[T]):
    """An epoch of ``buffer_shuffle``: the draws made, and where each sample in the buffer lives
    (flat ``(shard index, offset)`` pairs in buffer order) when a reader is before it; it says
    where each sample it yields lives, in the reader's ``places.last``.

    Restored, it fills its buffer with the samples it held, which the reader reads again first,
    then passes on unshuffled, as drawn already, those that the stages after it held (see
    :class:`~wdspipes.core.context.SamplePlaces`), before it draws on."""

    def __init__(
        self,
        stage: BufferShuffler[T],
        source: Iterable[T],
        draws: Draws,
        places: SamplePlaces | None,
        untracked: str | None,
        held: list[Place],
        number: int | None,
    ) -> None:
        self.bufsize, self.initial = stage.bufsize, stage.initial
        self.source = source
        self.draws = draws
        self.places = places
        self.untracked = untracked
        self.refs = array("q", itertools.chain.from_iterable(held))
        self.held = len(held)
        self.number = number  # among the stages that hold samples again, if restored
        self.begun = False

    def __iter__(self) -> Iterator[T]:
        self.begun = True
        bufsize, initial = self.bufsize, self.initial
        draws, places, refs = self.draws, self.places, self.refs
        buffer: list[T] = []
        source = iter(self.source)
        if self.number is not None:  # restored: the samples the reader reads again first
            assert places is not None
            passed = places.after(self.number)  # held by the stages after it: drawn already
            buffer.extend(itertools.islice(source, self.held))
            yield from itertools.islice(source, passed)  # the reader's places say where
            while len(buffer) > bufsize:  # a merged state's share: back to bufsize
                yield _take(buffer, refs, draws, places)
        for item in source:
            buffer.append(item)
            if places is not None:
                refs.extend(places.last)
            if len(buffer) < bufsize:  # grow: take one more while below bufsize
                extra = next(source, _END)
                if extra is not _END:
                    buffer.append(extra)  # type: ignore[arg-type]
                    if places is not None:
                        refs.extend(places.last)
            if len(buffer) >= initial:
                yield _take(buffer, refs, draws, places)
        while buffer:
            yield _take(buffer, refs, draws, places)

    def part(self) -> dict[str, Any] | None:
        """After the reader, the draws made and the places of the samples in the buffer (which
        the reader yields again first when restored); before it (a shard shuffle), nothing: the
        seed gives the epoch's order again.

        Raises:
            ResumeError: a stage between the reader and the buffer changes how many items come
                out, so the buffered samples' places are not known.
        """
        if self.untracked is not None:
            if not self.begun:  # it holds nothing yet
                return None
            raise ResumeError(
                f"BufferShuffler (buffer_shuffle) cannot save where the samples in its buffer "
                f"live: {self.untracked} between it and the reader changes how many items come "
                "out; shuffle before that stage"
            )
        if self.places is None:
            return None
        return {"draws": self.draws.count, "buffer": self.refs.tobytes()}


_END: object = object()


def _take(buffer: list[T], refs: array[int], draws: Draws, places: SamplePlaces | None) -> T:
    """Remove and return a random item in O(1); where refs are kept, drop its reference and
    say in ``places.last`` where it lives."""
    index = draws.below(len(buffer))
    buffer[index], buffer[-1] = buffer[-1], buffer[index]
    if refs:
        where, last = 2 * index, len(refs) - 2
        places.last = (refs[where], refs[where + 1])  # type: ignore[union-attr]
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
