"""What an epoch hands each stage as it opens: its :class:`EpochContext`.

A stage keeps only its arguments; each epoch the engine (:mod:`wdspipes.core.engine`) opens it
with a context built once for the epoch, which carries everything the stage needs to know of
the rest of the pipeline, so that no stage looks for another:

- the epoch's numbers: the epoch, and this stage's *repetition* (``repeat_epochs`` reading its
  source again, alike in every reader) and *pass* (``with_epoch`` reading its source again,
  this reader's own), counted by the pipeline's :class:`EpochClock`;
- the split among readers: the sharding filter before the stage, if any (:class:`Split`);
- the seed a loader gave the stage for the epoch, from which (with the stage's own ``seed=``
  and the numbers above) :meth:`EpochContext.material` makes its random numbers;
- the links the read path shares: the :class:`ShardLog` in which the opener notes the shards
  it hands out and a restored reader says which to skip, and the :class:`SamplePlaces` in
  which a reader notes where each sample lives for a shuffle buffer after it;
- ``reopen``: how a stage that reads its source again within the epoch opens it again.

**Randomness.** A random stage's numbers come from, in order of precedence: the ``seed=`` the
user gave, with the epoch (and repetition); the seed the loader gave through ``set_seed``,
with the same; fresh entropy from the operating system, when nobody gave a seed. A stage after
the sharding filter mixes in the filter's place (how many readers, which one) and its pass, so
that every worker and rank draws apart even where all of them have one seed; a stage before
it (a shard shuffle, a resampler) draws alike in every reader, and mixes in neither.

>>> context = EpochContext(epoch=2)
>>> context.material(7), EpochContext(epoch=2, repeat=1).material(7)
(('seed', 7, 2, None), ('seed', 7, (2, 1), None))
>>> split = Split(readers=4, reader=1)
>>> EpochContext(epoch=0, passes=3, split=split, loader_seed=9).material(None)
('loader', 9, 0, 3, (4, 1))
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PASS",
    "REPEAT",
    "EpochClock",
    "EpochContext",
    "Place",
    "SamplePlaces",
    "ShardLog",
    "Split",
]

REPEAT, PASS = "repeat", "pass"
"""The two ways a stage reads its source again within an epoch: another *repetition*, which
every reader makes alike (``repeat_epochs``: shard orders are drawn anew too), or another
*pass*, this reader's own (``with_epoch`` reading on when its source runs out: only the stages
after the split draw anew)."""

Place = tuple[int, int]
"""Where a sample lives: its shard's index in the epoch's list of shards (as the sharding filter
numbers them, from 0, before it splits them) and the byte offset where the sample starts."""


@dataclass(frozen=True)
class Split:
    """How the sharding filter before a stage splits its items among readers (workers times
    ranks), as the loader set it up: ``readers`` of them, this one ``reader``; ``shards`` is how
    many items the filter splits, where its source has a length; ``layout`` the ranks and workers
    behind the count (see :class:`~wdspipes.core.distributed.ReaderLayout`), where known."""

    readers: int = 1
    reader: int = 0
    shards: int | None = None
    layout: Any = None

    @property
    def stream(self) -> tuple[int, int]:
        """``(readers, reader)``: what a random stage after the split mixes into its seed."""
        return (self.readers, self.reader)


class SamplePlaces:
    """The link between a reader and the stages after it that hold samples: where each sample
    lives.

    The reader sets :attr:`last` to the :data:`Place` of each sample before it yields it, so a
    stage that sees the sample next reads where it lives; a stage that yields samples later
    than it read them (a shuffle buffer, a stage working in threads) sets :attr:`last` to the
    place of each sample it yields, so that the stages after it know it too. (The engine hands a
    stage the reader's places only when every stage in between keeps them so.)

    Restored, each such stage puts the places of the samples it held back with :meth:`hold`, as
    it opens, and the reader reads them again first, in the order the stages need them
    (:meth:`replay`): a buffer *fills* itself with its own, then passes on unshuffled, as drawn
    already, those of the stages after it (:meth:`after` says how many); a stage that yields in
    the order it reads (first in, first out) needs its own after everything the stages after it
    need.

    >>> places = SamplePlaces()
    >>> first = places.hold([(0, 10), (0, 20)], fills=True)   # a buffer
    >>> second = places.hold([(1, 30)], fills=False)           # threads after it
    >>> third = places.hold([(2, 40)], fills=True)             # a buffer after those
    >>> places.replay(), places.after(first), places.after(third)
    ([(0, 10), (0, 20), (2, 40), (1, 30)], 2, 0)
    """

    __slots__ = ("held", "last")

    def __init__(self) -> None:
        self.last: Place = (0, 0)
        self.held: list[tuple[bool, list[Place]]] = []

    def hold(self, places: list[Place], fills: bool) -> int:
        """A restored stage held the samples at ``places`` (in the order it needs them again):
        as a buffer's fill (``fills``) or as samples in flight, yielded first in, first out.
        Returns the stage's number among those that hold samples (they open source first)."""
        self.held.append((fills, list(places)))
        return len(self.held) - 1

    def after(self, number: int) -> int:
        """How many samples the stages after holder ``number`` hold: those a buffer passes on,
        as drawn already, after its own fill."""
        return sum(len(places) for _, places in self.held[number + 1 :])

    def replay(self) -> list[Place]:
        """The places of the samples held, in the order the reader yields them again: built
        from the last holder back, a buffer's fill before what the stages after it need, the
        samples in flight of a first-in-first-out stage after them."""
        order: list[Place] = []
        for fills, places in reversed(self.held):
            order = [*places, *order] if fills else [*order, *places]
        return order

    def clear(self) -> None:
        """The reader has taken what to read again."""
        self.held = []


class ShardLog:
    """The link between the opener and the reader after it, made by the engine for the epoch.

    The opener notes the index (in the epoch's shard list, as the sharding filter numbers it)
    of the shard it handed out last, in :attr:`index`, and the items of the shards a restored
    reader reads again, in :attr:`replay_items`; it sets :attr:`open_again` to open a shard read
    before. A restored reader sets :attr:`target`, what the opener skips, before the opener's
    first shard is asked for.
    """

    __slots__ = ("index", "open_again", "replay_items", "target")

    def __init__(self) -> None:
        self.index = -1
        self.target: Any = None
        self.replay_items: dict[int, Any] = {}
        self.open_again: Callable[[Any], Any] | None = None


@dataclass
class EpochContext:
    """What one stage is handed as it opens for an epoch (see the module).

    Attributes:
        epoch: the epoch's number.
        repeat: this stage's repetition within the epoch (``repeat_epochs``).
        passes: this stage's pass within the repetition (``with_epoch``, or the pipeline read
            again under one loader seed).
        split: the sharding filter before the stage; None where there is none.
        loader_seed: the seed the loader gave the stage for the epoch (``set_seed``), if any.
        places: the reader's sample places, for a sample buffer after it (None: no reader
            before it, or a stage in between that makes items of several).
        untracked: why a buffer after a reader cannot know where its samples live: the name of
            the stage in between that changes how many items come out; None otherwise.
        shards: the link between the opener and the reader of the pipeline, if it has one.
        per_worker: a stage before this one gives each worker shards of its own.
        places_after: for a stage that reads its source in another thread, the places it keeps
            for the stages after it (their own: the reader's are set in that thread).
        parts_before: for such a stage, the parts of the stages before it as of now, asked in
            the thread that reads them.
        stats: where the stage's figures are kept when the pipeline is measured (see
            :mod:`wdspipes.core.statistics`): a stage with threads notes their work and the
            samples in flight there; None when it is not.
        reads_split: the stage reads the sharding filter directly: its items are the split's,
            the ``n``-th of them the shard at index ``reader + n * readers`` of the epoch's
            list.
        reopen: opens the stage's source again within the epoch, as another :data:`REPEAT` or
            :data:`PASS`; None for a source (no stage before it).
        drew: set once the stage asked for its random numbers (:meth:`material`), so that its
            part of the state keeps what they depend on.
    """

    epoch: int = 0
    repeat: int = 0
    passes: int = 0
    split: Split | None = None
    loader_seed: int | None = None
    places: SamplePlaces | None = None
    untracked: str | None = None
    shards: ShardLog | None = None
    per_worker: bool = False
    places_after: SamplePlaces | None = None
    parts_before: Callable[[], list[Any]] | None = field(default=None, repr=False)
    reads_split: bool = False
    stats: Any = None
    reopen: Callable[[str], Iterator[Any]] | None = field(default=None, repr=False)
    drew: bool = False

    def material(self, seed: int | None, epoch: int | None = None) -> tuple[object, ...]:
        """The seed material of this stage's random numbers for the epoch (see the module):
        from ``seed`` (the user's), else the loader's seed, else fresh entropy. ``epoch``
        numbers the epoch in place of the pipeline's (a stage counting its own)."""
        self.drew = True
        number = self.epoch if epoch is None else epoch
        numbered: object = (number, self.repeat) if self.repeat else number
        if seed is not None:
            origin: tuple[object, ...] = ("seed", seed, numbered)
        elif self.loader_seed is not None:
            origin = ("loader", self.loader_seed, numbered)
        else:
            origin = ("entropy", os.urandom(16).hex())
        if self.split is None:
            return (*origin, None)
        return (*origin, self.passes, self.split.stream)

    def rng(self, seed: int | None, epoch: int | None = None) -> random.Random:
        """A generator seeded with :meth:`material`."""
        return random.Random(repr(self.material(seed, epoch)))


class EpochClock:
    """The epochs of a pipeline, kept by the stage it is iterated from, and how many times each
    of its stages was opened in the epoch under way.

    **Epochs are the loader's.** A loader begins each epoch by calling ``set_seed`` on the
    stages (DataLoader2, plain DataLoader and StatefulDataLoader all do), and that numbers the
    epochs: 0, 1, 2, ... The pipeline iterated again without a new seed is read again within the
    epoch: another pass of every stage. Plain DataLoader seeds each epoch twice when it has
    workers (its main process's copy of the pipeline, then the worker's copy of that): the same
    seed again, before the epoch began, is the same epoch's. Without a loader, each iteration is
    an epoch. ``set_epoch(n)`` numbers the next epoch ``n``.

    >>> clock = EpochClock()
    >>> clock.begin(), clock.begin()  # a for loop: each iteration an epoch
    (0, 1)
    >>> clock.set_seed(5); clock.set_seed(5)  # the same epoch, seeded twice
    >>> clock.begin(), clock.opened("0", None)
    (2, (0, 0))
    >>> clock.begin(), clock.opened("0", None)  # again under one seed: another pass
    (2, (0, 1))
    """

    __slots__ = ("begun", "epoch", "runs", "seed", "seeded")

    def __init__(self) -> None:
        self.epoch = 0  # the epoch under way, or the next one
        self.seed: int | None = None  # the loader's seed of the epoch
        self.seeded = False  # a loader seeded this epoch
        self.begun = False  # an iteration of it began
        self.runs: dict[str, tuple[int, int]] = {}  # stage path -> (repeat, pass) last opened

    def set_seed(self, seed: int) -> None:
        """A loader begins an epoch with ``seed`` (see the class)."""
        if seed == self.seed and self.seeded and not self.begun:
            return
        if self.seeded or self.begun:
            self.epoch += 1
        self.seed, self.seeded = seed, True
        self._fresh()

    def set_epoch(self, epoch: int) -> None:
        """Number the epoch under way, if none of it was read yet, or else the next one,
        ``epoch``; the loader's epochs after it count on from there."""
        if self.begun:
            self.seeded = False
        self.epoch = epoch
        self._fresh()

    def _fresh(self) -> None:
        self.begun = False
        self.runs = {}

    def upcoming(self) -> int:
        """The epoch the next iteration reads (see :meth:`begin`), without beginning it."""
        if self.begun and not self.seeded:
            return self.epoch + 1
        return self.epoch

    def begin(self) -> int:
        """An iteration of the pipeline begins: returns its epoch. The first of an epoch reads
        it; another under the same loader seed reads it again (its stages open for another
        pass); without a loader, it is the next epoch."""
        epoch = self.upcoming()
        if epoch != self.epoch:
            self.epoch = epoch
            self.runs = {}
        self.begun = True
        return epoch

    def opened(self, path: str, again: str | None) -> tuple[int, int]:
        """The stage at ``path`` opens: its ``(repeat, pass)``, counted in the epoch under way.
        ``again`` is :data:`REPEAT` or :data:`PASS` where a stage after it reads it again; None
        where the pipeline is iterated (a pass, if it was opened before in the epoch)."""
        last = self.runs.get(path)
        if last is None:
            runs = (0, 0)
        elif again == REPEAT:
            runs = (last[0] + 1, 0)
        else:
            runs = (last[0], last[1] + 1)
        self.runs[path] = runs
        return runs

    def restored(self, epoch: int, seeded: bool, runs: dict[str, tuple[int, int]]) -> None:
        """The pipeline goes on from a state saved in ``epoch`` (a loader had seeded it, if
        ``seeded``), its stages last opened as ``runs`` says."""
        self.epoch, self.seeded, self.begun = epoch, seeded, True
        self.runs = dict(runs)

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
