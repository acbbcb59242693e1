"""Where a random stage's randomness comes from, the same way for every random stage.

Each epoch (each new iterator) a random stage asks its :class:`Seeding` for a fresh
``random.Random``. The seed material is, in order of precedence:

1. the ``seed=`` the user gave, with the epoch number: the stream depends only on them, so a
   run is reproducible;
2. the seed the loader gave through ``set_seed``, with the epoch number;
3. fresh entropy from the operating system, when nobody ever gave a seed.

The epoch number counts the ``set_seed`` calls (loaders make one as each epoch begins) and
the iterations since the last of them (a ``for`` loop makes no call). So epochs differ even
where torchdata 0.9's DataLoader2 hands out the same seed epoch after epoch, as it does with
``MultiProcessingReadingService`` and ``DataLoader2.seed(n)``; and seeding a stage again with
the seed it already has moves it on to the next epoch rather than replaying the last.
Plain DataLoader seeds each epoch twice when it has workers (its main process's copy of the
pipeline, then the worker's copy of that, with the same seed): a second seeding with the seed
just given, before the epoch begins, is the same epoch's. So DataLoader2, plain DataLoader
and StatefulDataLoader (any number of workers) and a ``for`` loop number epochs 0, 1, 2, ...
alike, and with ``seed=`` they give the same orders.

Stages downstream of the core ``ShardingFilter`` also mix in that filter's instance id, so
every worker and rank gets its own stream even where the loader hands all of them one seed
(plain DataLoader) or the user fixed one seed. Stages upstream of it (shard shuffles,
resamplers) must agree across workers and ranks, and so mix in nothing.

>>> a, b = Seeding(7), Seeding(7)
>>> [a.next_rng().random() == b.next_rng().random() for _ in range(2)]
[True, True]
>>> c = Seeding(7)
>>> c.next_rng().random() == c.next_rng().random()  # each epoch draws anew
False
>>> d = Seeding()
>>> d.set_seed(123)
>>> first = d.next_rng().random()
>>> d.set_seed(123)  # the same seed again: the next epoch, not a replay
>>> d.next_rng().random() == first, d.epoch
(False, 2)

A :meth:`Seeding.state` saved mid-epoch and loaded into a fresh Seeding replays the materials
drawn since the last :meth:`Seeding.mark`, then goes on as the original would:

>>> e = Seeding(5)
>>> e.mark(); a = e.next_rng().random()
>>> f = Seeding(5)
>>> f.load_state(e.state())
>>> f.next_rng().random() == a, f.next_rng().random() == e.next_rng().random()
(True, True)
"""

from __future__ import annotations

import os
import random
from typing import Any

from torch.utils.data import IterDataPipe

from wdspipes.core.distributed import sharding_filter_of
from wdspipes.core.resumable import Resumable

__all__ = ["SeededStage", "Seeding", "sharding_position"]


class Seeding:
    """The seed state of one random stage: plain data, so it pickles with the stage.

    For resuming mid-epoch it also keeps the seed materials handed out since the last
    :meth:`mark` (a stage marks as its epoch begins; the shard reader marks the random stages
    before it as its epoch begins): :meth:`state` returns them with the counters as they were
    at the mark, and :meth:`load_state` makes the next :meth:`next_rng` calls hand the same
    materials out again.
    """

    def __init__(self, seed: int | None = None) -> None:
        if seed is not None and not isinstance(seed, int):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.seed = seed
        self.loader_seed: int | None = None
        self.seedings = 0  # set_seed calls, not counting a repeat before the epoch begins
        self.iterations = 0  # epochs begun since the last set_seed call
        self.marked: tuple[int | None, int, int] = (None, 0, 0)
        self.drawn: list[tuple[object, ...]] = []  # materials handed out since the mark
        self.replay: list[tuple[object, ...]] = []  # materials to hand out again, in order

    def set_seed(self, seed: int) -> None:
        """Take the seed a loader hands out as an epoch begins.

        The same seed again before the epoch has begun is the same epoch's seeding: plain
        DataLoader seeds its main process's copy of a pipeline, then the worker's copy of it.
        """
        seed = int(seed)
        if seed == self.loader_seed and self.iterations == 0 and self.seedings:
            return
        self.loader_seed = seed
        self.seedings += 1
        self.iterations = 0
        self.replay = []  # a new epoch: a state loaded before is dropped

    @property
    def epoch(self) -> int:
        """The number of the epoch the next iterator begins, counted from 0."""
        return max(self.seedings - 1, 0) + self.iterations

    def next_rng(self, datapipe: IterDataPipe[Any] | None = None) -> random.Random:
        """A generator for the next epoch of ``datapipe`` (the stage asking).

        Downstream of a ShardingFilter, the filter's position is mixed in.
        """
        return random.Random(repr(self.next_material(datapipe)))

    def next_material(self, datapipe: IterDataPipe[Any] | None = None) -> tuple[object, ...]:
        """The seed material of the next epoch: what :meth:`next_rng` seeds its generator with."""
        if self.replay:
            material = self.replay.pop(0)
        else:
            stream = sharding_position(datapipe) if datapipe is not None else None
            if self.seed is not None:
                origin: tuple[object, ...] = ("seed", self.seed, self.epoch)
            elif self.loader_seed is not None:
                origin = ("loader", self.loader_seed, self.epoch)
            else:
                origin = ("entropy", os.urandom(16).hex())
            material = (*origin, stream)
        self.iterations += 1
        self.drawn.append(material)
        return material

    def mark(self) -> None:
        """Start remembering the materials handed out from here on (see :meth:`state`)."""
        self.marked = (self.loader_seed, self.seedings, self.iterations)
        self.drawn = []

    def state(self) -> dict[str, Any]:
        """The counters at the last :meth:`mark` and the materials handed out since; the
        counters as they are, if none were handed out (the epoch has not begun)."""
        if self.drawn:
            loader_seed, seedings, iterations = self.marked
        else:
            loader_seed, seedings, iterations = self.loader_seed, self.seedings, self.iterations
        return {
            "loader_seed": loader_seed,
            "seedings": seedings,
            "iterations": iterations,
            "drawn": list(self.drawn),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Go back to a :meth:`state`: its materials are handed out again, in order."""
        self.loader_seed = state["loader_seed"]
        self.seedings = state["seedings"]
        self.iterations = state["iterations"]
        self.replay = [tuple(material) for material in state["drawn"]]
        self.mark()

    def prime(self, state: dict[str, Any]) -> None:
        """Take the counters of a :meth:`state` so that the loader's next ``set_seed`` begins
        the epoch the state was saved in: for a copy of the pipeline that loaders copy again
        for each epoch's workers, and that never loads the state itself."""
        self.loader_seed = None
        self.seedings = max(state["seedings"] - 1, 0)
        self.iterations = 0


class SeededStage(Resumable):
    """The seed methods and state protocol (:mod:`wdspipes.core.resumable`) of a stage whose only
    state is its :class:`Seeding` (``self.seeding``): put it before the stage's DataPipe base
    class. Before a reader, the stage gives the same items again from the seed materials of
    the epoch (:meth:`replay_state`); a stage that can also go on from them mid-epoch says so
    in its own ``resume_state``."""

    seeding: Seeding

    def set_seed(self, seed: int) -> None:
        self.seeding.set_seed(seed)

    def replay_state(self) -> dict[str, Any]:
        return {"seeding": self.seeding.state()}

    def resume_from(self, state: dict[str, Any]) -> None:
        self.seeding.load_state(state["seeding"])

    def begin_replay(self) -> None:
        self.seeding.mark()

    def prime_epoch(self, state: Any) -> None:
        if isinstance(state, dict) and "seeding" in state:
            self.seeding.prime(state["seeding"])


def sharding_position(datapipe: IterDataPipe[Any]) -> tuple[int, int] | None:
    """``(num_of_instances, instance_id)`` of the ShardingFilter upstream of ``datapipe``.

    None when there is none, that is when ``datapipe`` sees the same items in every reader.
    """
    sharding_filter = sharding_filter_of(datapipe)
    if sharding_filter is None:
        return None
    return (sharding_filter.num_of_instances, sharding_filter.instance_id)
