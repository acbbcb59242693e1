"""Samplers for datasets read by index, as wids has them: the same orders for the same seed
and epoch, with exact resume. No torch: a DataLoader takes any iterable of indices as its
``sampler``.

- :class:`ShardedSampler`: the shards in a shuffled order, the samples of each shard
  shuffled: one shard at a time is read.
- :class:`ChunkedSampler`: the indices cut into chunks of ``chunksize`` neighbours, the chunks
  shuffled and the indices within each: a true shuffle within a window that keeps reads near
  each other (a few shards at a time, for the shard cache).
- :func:`DistributedChunkedSampler`: a :class:`ChunkedSampler` over this rank's contiguous
  part of the indices (so each rank fetches its own shards only).

An epoch's order depends only on ``seed`` and the epoch number: ``random.Random(seed +
1289738273 * epoch)`` shuffles the chunks (from the second epoch on, or from the first with
``shufflefirst=True``), then the indices in each, as wids 0.1.11 does. The epoch advances by
one each time an iteration runs to its end; :meth:`~ChunkedSampler.set_epoch` sets it, as for
torch's ``DistributedSampler``.

**Resume.** ``state_dict()`` is ``{"epoch", "position", "seed"}``: the epoch under way and how
many indices of it the sampler has given; after ``load_state_dict(state)`` the next iteration
gives the rest of that epoch, exactly. torchdata's ``StatefulDataLoader`` saves and restores
it with its own state; with a plain ``DataLoader``, which asks for indices ahead of the
batches it delivers, save ``{"epoch": e, "position": batches_done * batch_size, "seed": s}``
yourself.

>>> sampler = ChunkedSampler(range(10), chunksize=4, seed=1, shufflefirst=True)
>>> first = list(sampler)
>>> sorted(first) == list(range(10)), sampler.epoch
(True, 1)
>>> sampler.set_epoch(0)
>>> it = iter(sampler); head = [next(it) for _ in range(3)]
>>> state = sampler.state_dict(); state
{'epoch': 0, 'position': 3, 'seed': 1}
>>> resumed = ChunkedSampler(range(10), chunksize=4, seed=1, shufflefirst=True)
>>> resumed.load_state_dict(state)
>>> head + list(resumed) == first
True
"""

from __future__ import annotations

import math
import random
import sys
import warnings
from collections.abc import Iterator, Sequence, Sized
from typing import Any

from wdspipes.core.arguments import int_at_least

__all__ = ["ChunkedSampler", "DistributedChunkedSampler", "ShardedSampler"]

_EPOCH_STRIDE = 1289738273  # wids' seed for epoch e: seed + e * this


class _RangeSampler:
    """Ranges of indices, shuffled and read out as the module says; the state of an epoch."""

    def __init__(
        self,
        ranges: Sequence[tuple[int, int]],
        *,
        seed: int,
        shuffle: bool,
        shufflefirst: bool,
    ) -> None:
        if type(seed) is not int:
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.ranges = list(ranges)
        self.seed = seed
        self.shuffle = shuffle
        self.shufflefirst = shufflefirst
        self.epoch = 0
        self.position = 0  # indices given in the epoch under way
        self._resume = 0  # indices of the epoch to skip on the next iteration

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration give epoch ``epoch``'s order, from its start."""
        if type(epoch) is not int or epoch < 0:
            raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")
        self.epoch = epoch
        self.position = self._resume = 0

    def order(self, epoch: int) -> Iterator[int]:
        """The indices of epoch ``epoch``, in order."""
        rng = random.Random(self.seed + _EPOCH_STRIDE * epoch)
        shuffle_ranges = self.shuffle and (self.shufflefirst or epoch > 0)
        numbers = list(range(len(self.ranges)))
        if shuffle_ranges:
            rng.shuffle(numbers)
        for number in numbers:
            low, high = self.ranges[number]
            indices = list(range(low, high))
            if self.shuffle:
                rng.shuffle(indices)
            yield from indices

    def __iter__(self) -> Iterator[int]:
        epoch, skip = self.epoch, self._resume
        self._resume = 0
        self.position = skip
        order = self.order(epoch)
        for _ in range(skip):
            next(order, None)
        for index in order:
            self.position += 1
            yield index
        if self.epoch == epoch:  # not set meanwhile
            self.epoch = epoch + 1
            self.position = 0

    def state_dict(self) -> dict[str, Any]:
        """The epoch under way, the indices of it given so far, and the seed."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next iteration give the rest of the epoch of ``state``.

        Raises:
            ValueError: the state is malformed or of a sampler with another seed.
        """
        try:
            epoch, position, seed = state["epoch"], state["position"], state["seed"]
        except (KeyError, TypeError):
            raise ValueError(f"not a sampler state: {state!r}") from None
        if seed != self.seed:
            raise ValueError(f"the state is of a sampler seeded {seed!r}, this one {self.seed!r}")
        count = self.count()
        if type(position) is not int or not 0 <= position <= count:
            raise ValueError(f"position must be an integer in 0..{count}, got {position!r}")
        self.set_epoch(epoch)
        self.position = self._resume = position

    def count(self) -> int:
        """The number of indices an epoch gives."""
        return sum(high - low for low, high in self.ranges)

    def __len__(self) -> int:
        return self.count()


class ShardedSampler(_RangeSampler):
    """The shards in a shuffled order and the samples of each shard shuffled (wids'
    ``ShardedSampler``): one shard is read at a time.

    Args:
        dataset: a dataset with ``lengths``, its shards' numbers of samples
            (:class:`~wdspipes.read.random_access.ShardListDataset` and wids' have it).
        lengths: the shards' numbers of samples, instead of the dataset's.
        seed: the orders depend on it and on the epoch only.
        shufflefirst: shuffle the shards' order in the first epoch too (as wids, the first
            epoch keeps the index's shard order by default; samples are shuffled always).

    >>> sampler = ShardedSampler(None, lengths=[3, 2], seed=0)
    >>> order = list(sampler)
    >>> sorted(order[:3]), sorted(order[3:])  # first epoch: shard order kept
    ([0, 1, 2], [3, 4])
    """

    def __init__(
        self,
        dataset: Any,
        *,
        lengths: Sequence[int] | None = None,
        seed: int = 0,
        shufflefirst: bool = False,
    ) -> None:
        if lengths is None:
            lengths = list(dataset.lengths)
        ranges = []
        start = 0
        for length in lengths:
            ranges.append((start, start + length))
            start += length
        super().__init__(ranges, seed=seed, shuffle=True, shufflefirst=shufflefirst)


class ChunkedSampler(_RangeSampler):
    """The indices in chunks of ``chunksize`` neighbours, the chunks and the indices within
    each shuffled (wids' ``ChunkedSampler``).

    Args:
        dataset: the dataset (its ``len()``).
        dslength_per_replica: the length to report (for a rank's share); by default the
            number of indices given.
        num_samples: the indices to give: ``n`` for ``0..n-1``, or ``(low, high)``; by
            default all.
        chunksize: neighbours per chunk.
        seed: the orders depend on it and on the epoch only.
        shuffle: shuffle at all (False: the indices in order).
        shufflefirst: shuffle the chunks' order in the first epoch too.
    """

    def __init__(
        self,
        dataset: Sized,
        *,
        dslength_per_replica: int = -1,
        num_samples: int | tuple[int, int] | None = None,
        chunksize: int = 2000,
        seed: int = 0,
        shuffle: bool = True,
        shufflefirst: bool = False,
    ) -> None:
        int_at_least("chunksize", chunksize)
        if num_samples is None:
            low, high = 0, len(dataset)
        elif isinstance(num_samples, int):
            low, high = 0, num_samples
        else:
            low, high = num_samples
        ranges = [(i, min(i + chunksize, high)) for i in range(low, high, chunksize)]
        super().__init__(ranges, seed=seed, shuffle=shuffle, shufflefirst=shufflefirst)
        self.dslength_per_replica = dslength_per_replica if dslength_per_replica > 0 else high - low

    def __len__(self) -> int:
        return self.dslength_per_replica


def DistributedChunkedSampler(
    dataset: Sized,
    *,
    num_replicas: int | None = None,
    num_samples: int | None = None,
    rank: int | None = None,
    shuffle: bool = True,
    shufflefirst: bool = False,
    seed: int = 0,
    drop_last: bool | None = None,
    chunksize: int = 1000000,
) -> ChunkedSampler:
    """A :class:`ChunkedSampler` over this rank's contiguous share of the indices (wids'
    ``DistributedChunkedSampler``): rank ``r`` of ``R`` gets ``ceil(n / R)`` indices from
    ``r * ceil(n / R)`` on (the last rank fewer), so each rank reads its own shards.

    ``num_replicas`` and ``rank`` default to ``torch.distributed``'s world size and rank if it
    is initialised, else 1 and 0. Unlike wids 0.1.11, values given are used even without
    ``torch.distributed`` (wids then ignores them), and ``rank=0`` is rank 0 (wids asks
    ``torch.distributed`` for the rank then). ``drop_last`` is ignored, as in wids, with a
    warning.

    >>> [list(DistributedChunkedSampler(range(5), num_replicas=2, rank=r, shuffle=False))
    ...  for r in (0, 1)]
    [[0, 1, 2], [3, 4]]
    """
    if drop_last is not None:
        warnings.warn(
            "DistributedChunkedSampler ignores drop_last (as wids' does)", UserWarning, stacklevel=2
        )
    world, own = _world()
    num_replicas = world if num_replicas is None else num_replicas
    rank = own if rank is None else rank
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be in 0..{num_replicas - 1}, got {rank}")
    total = len(dataset)
    length = math.ceil(total / num_replicas) if num_replicas > 1 else total
    count = num_samples or total
    share = (count + num_replicas - 1) // num_replicas
    start = rank * share
    end = min(start + share, count)
    return ChunkedSampler(
        dataset,
        dslength_per_replica=length,
        num_samples=(start, max(start, end)),
        chunksize=chunksize,
        seed=seed,
        shuffle=shuffle,
        shufflefirst=shufflefirst,
    )


def _world() -> tuple[int, int]:
    """``(world size, rank)`` of ``torch.distributed`` if it is initialised, else ``(1, 0)``;
    without importing torch (if it was never imported, it cannot be initialised)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0
