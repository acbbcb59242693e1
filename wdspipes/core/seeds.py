"""Where a random stage's randomness comes from, and how epochs are numbered, the same way for
every random stage.

Each iteration a random stage asks its :class:`Seeding` for the seed material of the epoch; the
stage's generator is seeded with it. The material is, in order of precedence:

1. the ``seed=`` the user gave, with the epoch number: the stream depends only on them, so a
   run is reproducible;
2. the seed the loader gave through ``set_seed``, with the epoch number;
3. fresh entropy from the operating system, when nobody ever gave a seed.

**Epochs are the loader's.** A loader begins each epoch by calling ``set_seed`` on every random
stage (DataLoader2, plain DataLoader and StatefulDataLoader all do), and that numbers the
epochs: 0, 1, 2, ... A stage read again within one epoch (``with_epoch`` reading its source
anew when it runs out) stays in that epoch: the shard order is the same in every worker and
rank however often each reads its shards, and only stages after the split (sample shuffles)
draw anew for each such *pass*. Without a loader, each iteration of the pipeline is an epoch
(a ``for`` loop over it), and ``with_epoch`` marks its own reads again as passes
(:meth:`Seeding.read_again`); ``repeat_epochs``, which every reader repeats alike, marks its
repetitions, which draw anew also before the split. ``set_epoch(n)`` on a pipeline
(:func:`set_pipeline_epoch`, as ``DistributedSampler.set_epoch``) numbers the next epoch ``n``,
and the loader's epochs after it ``n + 1``, ...: a job restarted at epoch ``n`` gets epoch
``n``'s orders. Plain DataLoader seeds each epoch twice when it has workers (its main process's
copy of the pipeline, then the worker's copy of that, with the same seed): a second seeding with
the seed just given, before the epoch begins, is the same epoch's.

Stages after the core ``ShardingFilter`` also mix in that filter's place (how many readers,
which one) and the pass, so every worker and rank gets its own stream even where the loader
hands all of them one seed (plain DataLoader) or the user fixed one seed. Stages before it
(shard shuffles, resamplers) must agree across workers and ranks, and mix in neither.

>>> a, b = Seeding(7), Seeding(7)
>>> [a.next_rng().random() == b.next_rng().random() for _ in range(2)]
[True, True]
>>> c = Seeding(7)
>>> c.next_rng().random() == c.next_rng().random()  # each epoch draws anew
False
>>> d = Seeding()
>>> d.set_seed(123)
>>> first = d.next_rng().random()
>>> d.next_rng().random() == first, d.epoch  # read again within the loader's epoch
(True, 0)
>>> d.set_seed(123)  # the same seed again: the next epoch, not a replay
>>> d.next_rng().random() == first, d.epoch
(False, 1)

A :meth:`Seeding.state` saved mid-epoch and loaded into a fresh Seeding gives the same material
for the rest of that epoch, then goes on as the original would:

>>> e = Seeding(5)
>>> a = e.next_rng().random()
>>> f = Seeding(5)
>>> f.load_state(e.state())
>>> f.next_rng().random() == a, f.next_rng().random() == e.next_rng().random()
(True, True)
"""

from __future__ import annotations

import os
import random
from typing import Any, Protocol

from wdspipes.core.arguments import int_at_least
from wdspipes.core.distributed import sharding_filter_of
from wdspipes.errors import ResumeError
from wdspipes.state.graph import upstream_of
from wdspipes.state.protocol import AllReaders, Resumable

__all__ = [
    "PASS",
    "REPEAT",
    "SeededStage",
    "Seeding",
    "SharedEpoch",
    "pipeline_epoch",
    "read_again",
    "set_pipeline_epoch",
    "sharding_position",
]


class SharedEpoch(Protocol):
    """An epoch counter a program shares with its workers, as webdataset's ``SharedEpoch``:
    :meth:`get_value` gives the epoch."""

    def get_value(self) -> int: ...


class Seeding:
    """The seed state of one random stage and its epoch number: plain data, so it pickles with
    the stage (see the module).

    Besides the epoch it counts, within it, the *repetitions* every reader makes alike
    (``repeat_epochs``: each draws anew, also before the split) and this reader's own *passes*
    (``with_epoch`` reading its source anew: only stages after the split draw anew).

    Args:
        seed: the user's seed; None for the loader's, else fresh entropy.
        shared_epoch: a counter whose value is the epoch, read as each iteration begins (a
            program's own, as webdataset's ``SharedEpoch``); None to count epochs here.
    """

    def __init__(self, seed: int | None = None, shared_epoch: SharedEpoch | None = None) -> None:
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.seed = seed
        self.shared_epoch = shared_epoch
        self.loader_seed: int | None = None
        self.epoch = 0  # the epoch under way, or the next one
        self.seeded = False  # a loader seeded this epoch
        self.begun = False  # an iteration of this epoch began
        self.at = (0, 0)  # the repetition and pass of the iteration under way
        self.again: str | None = None  # the next iteration is another REPEAT or PASS
        self.resuming: tuple[int, int] | None = None  # where a restored state goes on

    def set_seed(self, seed: int) -> None:
        """A loader begins an epoch with ``seed``. The same seed again before the epoch has
        begun is the same epoch's seeding: plain DataLoader seeds its main process's copy of a
        pipeline, then the worker's copy of it."""
        seed = int(seed)
        if seed == self.loader_seed and self.seeded and not self.begun:
            return
        if self.seeded or self.begun:
            self.epoch += 1
        self.loader_seed = seed
        self.seeded = True
        self._fresh()

    def set_epoch(self, epoch: int) -> None:
        """Number the epoch under way, if none of it was read yet, or else the next one,
        ``epoch``; the loader's epochs after it count on from there."""
        if self.begun:
            self.seeded = False
        self.epoch = int(epoch)
        self._fresh()

    def _fresh(self) -> None:
        self.begun = False
        self.at = (0, 0)
        self.again = None
        self.resuming = None

    def read_again(self, kind: str) -> None:
        """The next iteration reads this epoch again: as another :data:`REPEAT` (every reader
        alike: ``repeat_epochs``) or another :data:`PASS` (this reader's: ``with_epoch``
        reading its source anew when it runs out)."""
        if self.begun:
            self.again = kind

    def begin(self) -> tuple[int, int]:
        """An iteration begins: settle its epoch, and return its repetition and pass."""
        if self.shared_epoch is not None:
            shared = int(self.shared_epoch.get_value())
            if shared != self.epoch:
                self.epoch = shared
                self._fresh()
        repeat, done = self.at
        if self.resuming is not None:
            repeat, done = self.resuming
        elif not self.begun:
            repeat, done = 0, 0
        elif self.again == REPEAT:
            repeat, done = repeat + 1, 0
        elif self.again == PASS or self.seeded or self.shared_epoch is not None:
            done += 1  # read again within the loader's epoch
        else:  # a for loop's next epoch
            self.epoch += 1
            repeat, done = 0, 0
        self.begun, self.again, self.resuming = True, None, None
        self.at = (repeat, done)
        return self.at

    def next_rng(self, datapipe: Any | None = None) -> random.Random:
        """A generator for the next iteration of ``datapipe`` (the stage asking)."""
        return random.Random(repr(self.next_material(datapipe)))

    def next_material(self, datapipe: Any | None = None) -> tuple[object, ...]:
        """Begin an iteration of ``datapipe`` (:meth:`begin`) and return its seed material:
        what :meth:`next_rng` seeds its generator with. Downstream of a ShardingFilter, the
        filter's place and the pass are mixed in."""
        repeat, done = self.begin()
        stream = sharding_position(datapipe) if datapipe is not None else None
        epoch: object = (self.epoch, repeat) if repeat else self.epoch
        if self.seed is not None:
            origin: tuple[object, ...] = ("seed", self.seed, epoch)
        elif self.loader_seed is not None:
            origin = ("loader", self.loader_seed, epoch)
        else:
            origin = ("entropy", os.urandom(16).hex())
        return (*origin, stream) if stream is None else (*origin, done, stream)

    def state(self) -> dict[str, Any]:
        """The loader's seed, the epoch, and the repetition and pass under way (None before
        the epoch began)."""
        return {
            "loader_seed": self.loader_seed,
            "epoch": self.epoch,
            "at": list(self.at) if self.begun else None,
        }

    def load_state(self, state: dict[str, Any], keep_seed: bool = False) -> None:
        """Go back to a :meth:`state`: the next iteration draws as the one under way then did
        (with ``keep_seed``, from the loader's seed given now, for a reader of another
        split); the loader's next ``set_seed`` begins the next epoch."""
        if not keep_seed:
            self.loader_seed = state["loader_seed"]
        self.seeded = self.loader_seed is not None
        self.epoch = state["epoch"]
        self._fresh()
        if state["at"] is not None:
            self.begun = True
            self.resuming = self.at = (state["at"][0], state["at"][1])

    def load_readers(self, states: AllReaders, before_split: bool) -> None:
        """Take the states of every reader of a job split another way: before the split, the
        one state they share (their shard orders must agree); after it, their epoch and
        repetition alone, read afresh with this reader's own stream.

        Raises:
            ResumeError: the readers were in different epochs or repetitions, or had other
                seeds before the split.
        """
        parts = [part["seeding"] for part in states.parts]
        epochs = {part["epoch"] for part in parts}
        repeats = {part["at"][0] for part in parts if part["at"] is not None}
        if len(epochs) > 1 or len(repeats) > 1:
            raise ResumeError(
                "the readers' states are of different epochs or repetitions: merge the states "
                "of one job, saved at one time"
            )
        if before_split:
            if len({part["loader_seed"] for part in parts}) > 1:
                raise ResumeError(
                    "the readers' states have different seeds before the split (states of "
                    "different jobs?)"
                )
            if parts:
                begun = [part for part in parts if part["at"] is not None]
                self.load_state((begun or parts)[0])
                return
        epoch = epochs.pop() if epochs else states.epoch
        if epoch is not None:
            at = [repeats.pop(), 0] if repeats else None
            self.load_state({"loader_seed": None, "epoch": epoch, "at": at}, keep_seed=True)


REPEAT, PASS = "repeat", "pass"
"""The kinds of reading an epoch again (:meth:`Seeding.read_again`)."""


class SeededStage(Resumable):
    """The seed and epoch methods and the state protocol (:mod:`wdspipes.state.protocol`) of a
    stage whose only state is its :class:`Seeding` (``self.seeding``): put it before the
    stage's DataPipe base class. Restored, the stage draws the numbers of the saved epoch
    again, from its start (:attr:`restartable`); one whose draws depend on the sample alone
    goes on mid-epoch with the same part."""

    restartable = True
    seeding: Seeding

    def set_seed(self, seed: int) -> None:
        self.seeding.set_seed(seed)

    def set_stage_epoch(self, epoch: int) -> None:
        """The next epoch (or this one, if none of it was read) is ``epoch``: this stage only
        (a pipeline's, all its stages: ``set_epoch``, :func:`set_pipeline_epoch`)."""
        self.seeding.set_epoch(epoch)

    def stage_epoch(self) -> int:
        """The number of the epoch under way, or of the next one."""
        return self.seeding.epoch

    def read_again(self, kind: str) -> None:
        self.seeding.read_again(kind)

    def get_state(self) -> dict[str, Any]:
        return {"seeding": self.seeding.state()}

    def set_state(self, state: Any) -> None:
        if isinstance(state, AllReaders):
            self.seeding.load_readers(state, sharding_filter_of(self) is None)
        else:
            self.seeding.load_state(state["seeding"])


def seeded_stages(sink: Any) -> list[SeededStage]:
    """The stages with a :class:`Seeding` of the pipeline ending in ``sink``, ``sink`` too."""
    stages = [sink, *upstream_of(sink)]
    return [stage for stage in stages if isinstance(stage, SeededStage)]


def set_pipeline_epoch(sink: Any, epoch: int) -> None:
    """Number the next epoch of the pipeline ending in ``sink`` (every random stage of it)
    ``epoch``, as ``DistributedSampler.set_epoch``: a job restarted at epoch ``n`` calls it
    with ``n`` before the loader is made, and gets epoch ``n``'s shard orders and shuffles;
    the loader's epochs after it are ``n + 1``, ...

    Raises:
        ValueError: ``epoch`` is not an int of at least 0.
    """
    int_at_least("epoch", epoch, least=0)
    for stage in seeded_stages(sink):
        stage.set_stage_epoch(epoch)


def pipeline_epoch(sink: Any) -> int | None:
    """The epoch the pipeline ending in ``sink`` is in (or begins next); None if it has no
    random stage, and so no epoch to number."""
    return max((stage.stage_epoch() for stage in seeded_stages(sink)), default=None)


def read_again(source: Any, kind: str) -> None:
    """The link ``with_epoch`` (kind :data:`PASS`) and ``repeat_epochs`` (:data:`REPEAT`) make
    before they read ``source`` again within one epoch: every random stage of it reads the
    same epoch again (:meth:`Seeding.read_again`)."""
    for stage in seeded_stages(source):
        stage.read_again(kind)


def sharding_position(datapipe: Any) -> tuple[int, int] | None:
    """``(num_of_instances, instance_id)`` of the ShardingFilter upstream of ``datapipe``.

    None when there is none, that is when ``datapipe`` sees the same items in every reader.
    """
    sharding_filter = sharding_filter_of(datapipe)
    if sharding_filter is None:
        return None
    return (sharding_filter.num_of_instances, sharding_filter.instance_id)
