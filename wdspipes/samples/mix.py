"""Mixing datasets: items of several pipelines in turn (``interleave``, webdataset's
``RoundRobin``) or drawn at random with given probabilities (``interleave_randomly``,
webdataset's ``RandomMix``).

Both stop at the first source that runs out, as webdataset's do, or with ``longest=True`` go
on with the others until every source has run out. The random draw is webdataset's: a uniform
number in ``[0, 1)`` against the cumulative probabilities of the sources still drawn from; it
comes from the stage's own seed (``seed=``, else the loader's, see :mod:`wdspipes.core.context`),
so a run is reproducible, and differs between workers.

Each source is a pipeline of its own, with its own reader, and the mixer's state holds each
source's whole state (its ``state_dict()``) besides its own place in
the turn or the number of draws made: a mixed pipeline resumes mid-epoch like any other.
A sample buffer after a mixer cannot save its samples' places (they are in several sources'
shards): shuffle within the sources, before the mixer.

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> letters, numbers = IterableWrapper("abc"), IterableWrapper([1, 2, 3, 4])
>>> list(letters.interleave(numbers)), list(letters.interleave(numbers, longest=True))
(['a', 1, 'b', 2, 'c', 3], ['a', 1, 'b', 2, 'c', 3, 4])
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from wdspipes.core.context import EpochContext
from wdspipes.core.engine import PipelineEpoch, SourceOpener
from wdspipes.core.protocol import (
    AllReaders,
    Epoch,
    Resumes,
    StageBase,
    is_torch_datapipe,
    register,
    unshared,
)
from wdspipes.core.stage import Stage
from wdspipes.samples.shuffle import Draws

__all__ = ["Interleaver", "RandomInterleaver"]

T = TypeVar("T")
_END: Any = object()

START, END = "start", "end"
"""A mixer's place before its epoch begins, and after it ends."""
FRESH, OPEN, OVER = "fresh", "open", "over"
"""A source's phase in the mixer's epoch: not read yet; read; run out."""


class _Mixer(Stage[T]):
    """The sources and the epoch that ``interleave`` and ``interleave_randomly`` share; a
    subclass's epoch picks the next source and keeps its own place."""

    resumes = Resumes.AS_MIXER

    def __init__(self, sources: Sequence[Iterable[T]], longest: bool) -> None:
        super().__init__()
        pipes = tuple(self._as_source(_checked(source)) for source in sources)
        self.source_datapipes = pipes
        stages = self.upstream()
        if len({id(stage) for stage in stages}) < len(stages):
            raise ValueError(
                "the same stage is given twice to a mixer: a stage is read by one iterator at "
                "a time (build the pipeline twice, or use .fork())"
            )
        self.longest = bool(longest)

    @staticmethod
    def _as_source(source: Iterable[T]) -> Iterable[T]:
        """A source as the mixer reads it: itself (a DataPipe front end wraps a plain
        iterable in torch's ``IterableWrapper``)."""
        return source

    def upstream(self) -> tuple[Any, ...]:
        """The sources that are stages (wdspipes' or torch's); a plain iterable is none."""
        return tuple(
            source
            for source in self.source_datapipes
            if isinstance(source, StageBase) or is_torch_datapipe(source)
        )

    def _lengths(self) -> list[int]:
        return [len(source) for source in self.source_datapipes]  # type: ignore[arg-type]


class MixEpoch(Epoch[T]):
    """An epoch of a mixer: its place (the sources still read, and the subclass's own: the turn,
    the draws made), and each source's epoch, opened as it is first needed, going on from its
    saved state where the mixer's part holds one."""

    def __init__(self, sources: list[SourceOpener], longest: bool, part: Any) -> None:
        count = len(sources)
        self.sources = sources
        self.longest = longest
        self.epochs: list[PipelineEpoch | None] = [None] * count
        self.saved: list[dict[str, Any] | None] = [None] * count
        self.phases = [FRESH] * count
        self.place: dict[str, Any] | str
        if part is None:
            self.place = {"live": list(range(count))}
        elif part["place"] == END:  # restored after its epoch ended: it gives nothing more
            self.place = END
        else:
            place = part["place"]
            self.place = {"live": list(range(count))} if place == START else dict(place)
            self.place["live"] = list(self.place["live"])
        if part is not None:
            phases = part.get("phases") or [FRESH] * count
            for index, (phase, state) in enumerate(zip(phases, part["sources"], strict=True)):
                if state is None:
                    continue
                # each source takes its loader's seeds back now, read in this epoch or not
                sources[index].open(state).close()
                if phase != OVER and self.place != END:  # one run out is not read again
                    self.saved[index] = state

    def __iter__(self) -> Iterator[T]:
        if self.place == END:
            return
        place = self.place
        assert isinstance(place, dict)
        live: list[int] = place["live"]
        iterators: dict[int, Iterator[T]] = {}
        try:
            while live:
                slot = self._pick(len(live))
                if slot < 0:
                    break
                item = next(self._iterator(live[slot], iterators), _END)
                if item is _END:
                    self.phases[live[slot]] = OVER
                    if not self.longest:
                        break
                    del live[slot]
                    self._dropped(slot)
                    continue
                self._taken(slot)
                yield item
        finally:
            for iterator in iterators.values():
                close = getattr(iterator, "close", None)
                if close is not None:
                    close()
            self.place = END

    def _iterator(self, index: int, iterators: dict[int, Iterator[T]]) -> Iterator[T]:
        """The iterator of source ``index`` in this epoch, begun as it is first needed."""
        iterator = iterators.get(index)
        if iterator is None:
            saved, self.saved[index] = self.saved[index], None
            epoch = self.epochs[index] = self.sources[index].open(saved)
            self.phases[index] = OPEN
            iterator = iterators[index] = epoch.items()
        return iterator

    def _pick(self, count: int) -> int:
        """The slot, among the ``count`` sources still read, of the source to read next; -1
        to end the epoch."""
        raise NotImplementedError

    def _taken(self, slot: int) -> None:
        """An item of the source in ``slot`` is about to be yielded."""

    def _dropped(self, slot: int) -> None:
        """The source that was in ``slot`` ran out and is read no more (``longest``)."""

    def part(self) -> dict[str, Any]:
        """The mixer's place, the phase of each source, and the whole state of each source.

        Raises:
            ResumeError: a source cannot save its state; the message names the stage.
        """
        states: list[dict[str, Any] | None] = []
        for source, epoch, saved in zip(self.sources, self.epochs, self.saved, strict=True):
            if epoch is not None:
                states.append(epoch.state())
            else:  # not begun: its state says the seeds it begins with
                states.append(saved if saved is not None else source.state())
        place = self.place
        if isinstance(place, dict):  # a copy: the epoch goes on changing its own
            place = {**place, "live": list(place["live"])}
        return {"place": place, "phases": list(self.phases), "sources": states}


def _checked(source: Iterable[T]) -> Iterable[T]:
    """``source``, if it is an iterable of items (a string is refused)."""
    if isinstance(source, str | bytes) or not isinstance(source, Iterable):
        raise TypeError(
            f"a mixer's source must be an iterable of items, got {type(source).__name__}"
        )
    return source


@register("interleave")
class Interleaver(_Mixer[T]):
    """Items of the source and of ``others`` in turn (functional name: ``interleave``).

    One of each, as webdataset's ``RoundRobin``: the first source, the second, ..., the first
    again; the epoch ends at the first source that runs out, where its turn comes (with
    ``longest=True``, that source is skipped from then on, until all have run out).

    Args:
        source_datapipe: the first source.
        others: the other sources (DataPipes, or iterables, which are wrapped).
        longest: go on until every source has run out.

    Yields:
        The sources' items in turn.

    Raises:
        ValueError: the same stage is given twice.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> evens, odds = IterableWrapper([0, 2, 4]), IterableWrapper([1, 3])
    >>> list(evens.interleave(odds)), len(evens.interleave(odds))
    ([0, 1, 2, 3, 4], 5)
    """

    def __init__(
        self, source_datapipe: Iterable[T], *others: Iterable[T], longest: bool = False
    ) -> None:
        super().__init__((source_datapipe, *others), longest)

    def open(self, source: Any, context: EpochContext, part: Any = None) -> TurnEpoch[T]:
        if isinstance(part, AllReaders):
            raise unshared(self)  # each reader's own turn among its sources
        return TurnEpoch(source, self.longest, part)

    def __len__(self) -> int:
        lengths = self._lengths()
        if self.longest:
            return sum(lengths)
        shortest = min(lengths)
        return len(lengths) * shortest + lengths.index(shortest)


class TurnEpoch(MixEpoch[T]):
    """An epoch of ``interleave``: whose turn it is."""

    def __init__(self, sources: list[SourceOpener], longest: bool, part: Any) -> None:
        super().__init__(sources, longest, part)
        if isinstance(self.place, dict):
            self.place.setdefault("turn", 0)

    def _pick(self, count: int) -> int:
        place = self.place
        assert isinstance(place, dict)
        place["turn"] %= count
        return int(place["turn"])

    def _taken(self, slot: int) -> None:
        self.place["turn"] = slot + 1  # type: ignore[index]


@register("interleave_randomly")
class RandomInterleaver(_Mixer[T]):
    """Items of sources drawn at random (functional name: ``interleave_randomly``).

    The items of the source and of ``others``, as webdataset's ``RandomMix``: each item
    comes from source ``i`` with probability ``probs[i] / sum(probs)`` (uniform without
    ``probs``); the epoch ends when a drawn source has run out (with ``longest=True``, that
    source is dropped and the draws go on among the others, until every source with a
    probability above 0 has run out). The draws depend only on ``seed`` and the epoch, else
    on the loader's seed (each worker draws apart).

    Args:
        source_datapipe: the first source.
        others: the other sources (DataPipes, or iterables, which are wrapped).
        probs: a weight per source, at least 0, not all 0; None for equal weights.
        longest: go on until every source has run out.
        seed: fixes the draws.

    Yields:
        The sources' items, each source's in its order.

    Raises:
        ValueError: ``probs`` does not give one weight of at least 0 per source, or the same
            stage is given twice.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> mixed = IterableWrapper("abcd").interleave_randomly(
    ...     IterableWrapper("WXYZ"), probs=[3, 1], longest=True, seed=0)
    >>> sorted(mixed) == sorted("abcdWXYZ"), list(mixed) == list(mixed)
    (True, False)
    """

    def __init__(
        self,
        source_datapipe: Iterable[T],
        *others: Iterable[T],
        probs: Sequence[float] | None = None,
        longest: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__((source_datapipe, *others), longest)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.probs = _weights(probs, len(self.source_datapipes))
        self.seed = seed

    def open(self, source: Any, context: EpochContext, part: Any = None) -> DrawEpoch[T]:
        if isinstance(part, AllReaders):
            raise unshared(self)  # each reader's own draws among its sources
        return DrawEpoch(source, self.longest, part, self.probs, Draws(context.material(self.seed)))

    def __len__(self) -> int:
        if not self.longest:
            raise TypeError(
                "interleave_randomly has no length without longest=True: where it ends depends "
                "on the draws"
            )
        return sum(length for length, p in zip(self._lengths(), self.probs, strict=True) if p)


class DrawEpoch(MixEpoch[T]):
    """An epoch of ``interleave_randomly``: the draws made."""

    def __init__(
        self,
        sources: list[SourceOpener],
        longest: bool,
        part: Any,
        probs: list[float],
        draws: Draws,
    ) -> None:
        super().__init__(sources, longest, part)
        self.probs = probs
        self.draws = draws
        self._bounds: list[float] = []
        if isinstance(self.place, dict):
            draws.skip(self.place.get("draws", 0))
            self._bounds = _bounds([probs[index] for index in self.place["live"]])

    def _pick(self, count: int) -> int:
        if not self._bounds[-1]:  # only sources that are never drawn are left
            return -1
        slot = bisect.bisect_left(self._bounds, self.draws.random())
        return min(slot, count - 1)

    def _dropped(self, slot: int) -> None:
        place = self.place
        assert isinstance(place, dict)
        self._bounds = _bounds([self.probs[index] for index in place["live"]])

    def part(self) -> dict[str, Any]:
        state = super().part()
        if isinstance(state["place"], dict):
            state["place"]["draws"] = self.draws.count
        return state


def _weights(probs: Sequence[float] | None, count: int) -> list[float]:
    """The weight of each of ``count`` sources, checked."""
    if probs is None:
        return [1.0] * count
    weights = list(probs)
    if len(weights) != count:
        raise ValueError(f"probs must give one weight per source ({count}), got {len(weights)}")
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise ValueError(f"probs must be numbers, got {weight!r}")
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"probs must be finite and at least 0, got {weight!r}")
    if not sum(weights):
        raise ValueError(f"probs must not all be 0, got {weights}")
    return [float(weight) for weight in weights]


def _bounds(weights: list[float]) -> list[float]:
    """The cumulative share of each weight, as webdataset computes it (each weight over the
    sum, added up in order); all zeros where the weights are."""
    total = sum(weights)
    if not total:
        return [0.0] * len(weights)
    return list(itertools.accumulate(weight / total for weight in weights))
