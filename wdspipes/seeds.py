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
DataLoader2 (any number of workers), plain DataLoader without workers and a ``for`` loop
number epochs 0, 1, 2, ... alike, so with ``seed=`` they give the same orders. Plain
DataLoader with workers seeds each epoch more than once, and so numbers its epochs apart from
them: still reproducible, new each epoch, and shared by its workers.

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
"""

from __future__ import annotations

import os
import random
from typing import Any

from torch.utils.data import IterDataPipe

from wdspipes.distributed import sharding_filter_of

__all__ = ["Seeding", "sharding_position"]


class Seeding:
    """The seed state of one random stage: plain data, so it pickles with the stage."""

    def __init__(self, seed: int | None = None) -> None:
        if seed is not None and not isinstance(seed, int):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.seed = seed
        self.loader_seed: int | None = None
        self.seedings = 0  # set_seed calls
        self.iterations = 0  # epochs begun since the last set_seed call

    def set_seed(self, seed: int) -> None:
        """Take the seed a loader hands out as an epoch begins."""
        self.loader_seed = int(seed)
        self.seedings += 1
        self.iterations = 0

    @property
    def epoch(self) -> int:
        """The number of the epoch the next iterator begins, counted from 0."""
        return max(self.seedings - 1, 0) + self.iterations

    def next_rng(self, datapipe: IterDataPipe[Any] | None = None) -> random.Random:
        """A generator for the next epoch of ``datapipe`` (the stage asking).

        Downstream of a ShardingFilter, the filter's position is mixed in.
        """
        stream = sharding_position(datapipe) if datapipe is not None else None
        if self.seed is not None:
            material: tuple[object, ...] = ("seed", self.seed, self.epoch)
        elif self.loader_seed is not None:
            material = ("loader", self.loader_seed, self.epoch)
        else:
            material = ("entropy", os.urandom(16).hex())
        self.iterations += 1
        return random.Random(repr((*material, stream)))


def sharding_position(datapipe: IterDataPipe[Any]) -> tuple[int, int] | None:
    """``(num_of_instances, instance_id)`` of the ShardingFilter upstream of ``datapipe``.

    None when there is none, that is when ``datapipe`` sees the same items in every reader.
    """
    sharding_filter = sharding_filter_of(datapipe)
    if sharding_filter is None:
        return None
    return (sharding_filter.num_of_instances, sharding_filter.instance_id)
