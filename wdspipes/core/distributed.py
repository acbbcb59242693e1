"""Ranks and workers: who reads which shards, a check that the split leaves no rank idle, and
:func:`full_sync` to end every rank's epoch together under plain DataLoader.

Shards are split among readers (every worker of every rank) by the one core
``sharding_filter`` of a pipeline. The loaders number the readers differently:

- DataLoader2 with ``DistributedReadingService`` and ``MultiProcessingReadingService`` gives
  rank ``r``, worker ``w`` the reader number ``r * workers + w``: consecutive shards go to the
  workers of one rank first;
- plain DataLoader gives it ``w * ranks + r``: consecutive shards go to the ranks first.

With fewer shards than readers, some readers get none, and under DataLoader2 that can be a whole
rank (4 shards on 2 ranks of 4 workers: rank 1 gets nothing). A rank with no shards either ends
every rank's epoch at once (``DistributedReadingService`` stops all ranks when the first runs
out) or leaves the others waiting for it (DDP with plain DataLoader), so the opener checks the
split as each epoch begins (:func:`check_split`): a rank with no shards is an error, and an
uneven split is a warning that says how many shards each rank gets.

A pipeline with no sharding filter under several readers is told so only where every reader
really reads every shard: where the opener reads a shard list of known length, and no stage
before it declares that it gives each worker shards of its own. A source declares it with a
true ``per_worker_shards`` attribute (its class's, or its own): a resampler that draws apart in
each worker, a queue of shards that workers take from (``DirectoryShardList``), a program's
own source that splits by worker itself.

>>> layout = ReaderLayout(ranks=2, workers=4, rank=0, worker=0, rank_major=True)
>>> layout.shards_per_rank(4), layout.shards_per_rank(6), layout.shards_per_rank(16)
([4, 0], [4, 2], [8, 8])
>>> by_worker = ReaderLayout(ranks=2, workers=4, rank=0, worker=0, rank_major=False)
>>> by_worker.shards_per_rank(4)
[2, 2]
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from wdspipes.core.context import Split
from wdspipes.core.engine import declares_per_worker
from wdspipes.errors import ShardSplitError

if TYPE_CHECKING:
    import torch.distributed as dist

__all__ = [
    "ReaderLayout",
    "ShardSplitError",
    "check_split",
    "declares_per_worker",
    "full_sync",
    "split_layout",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class ReaderLayout:
    """How a sharding filter's readers are laid out: ``ranks`` ranks of ``workers`` workers,
    and which of them this one is. ``rank_major`` tells how readers are numbered: rank by rank
    (DataLoader2) or worker by worker (plain DataLoader)."""

    ranks: int
    workers: int
    rank: int
    worker: int
    rank_major: bool

    @property
    def readers(self) -> int:
        return self.ranks * self.workers

    @property
    def reader(self) -> int:
        """This reader's number, ``0 .. readers - 1``, as the sharding filter counts them."""
        if self.rank_major:
            return self.rank * self.workers + self.worker
        return self.worker * self.ranks + self.rank

    @property
    def is_first(self) -> bool:
        """Whether this is rank 0's worker 0, the reader that speaks for all."""
        return self.rank == 0 and self.worker == 0

    def rank_of(self, reader: int) -> int:
        """The rank of reader number ``reader``."""
        return reader // self.workers if self.rank_major else reader % self.ranks

    def shards_per_rank(self, shards: int) -> list[int]:
        """How many of ``shards`` shards each rank reads."""
        counts = [0] * self.ranks
        for reader in range(self.readers):
            counts[self.rank_of(reader)] += shards // self.readers + (
                reader < shards % self.readers
            )
        return counts

    def describe(self) -> str:
        ranks = f"{self.ranks} rank{'s' if self.ranks != 1 else ''}"
        workers = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        if self.ranks == 1:
            return workers
        if self.workers == 1:
            return ranks
        return f"{ranks} x {workers} = {self.readers} readers"

    def whom(self) -> str:
        if self.ranks == 1:
            return f"worker {self.worker}"
        if self.workers == 1:
            return f"rank {self.rank}"
        return f"rank {self.rank}, worker {self.worker}"


def _worker_info() -> Any:
    """torch's worker info of the DataLoader worker this runs in; None outside one, and
    without torch loaded (no DataLoader can run then)."""
    torch_data = sys.modules.get("torch.utils.data")
    return None if torch_data is None else torch_data.get_worker_info()


def _process_group() -> Any:
    """``torch.distributed`` where a process group is initialised, else None (without torch
    loaded none can be)."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is None or not (distributed.is_available() and distributed.is_initialized()):
        return None
    return distributed


def split_layout(readers: int, reader: int, groups: dict[Any, tuple[int, int]]) -> ReaderLayout:
    """The layout behind a sharding filter's split into ``readers`` (this one ``reader``), from
    the ``groups`` the loader gave it through ``apply_sharding`` (torch's sharding priorities'
    names: ``"DISTRIBUTED"``, ``"MULTIPROCESSING"``, ``"DEFAULT"``).

    DataLoader2's reading services name their groups (DISTRIBUTED, MULTIPROCESSING). Plain
    DataLoader gives one DEFAULT group of ranks x workers; the workers per rank then come from
    its worker info, and without workers every instance is a rank.

    >>> split_layout(8, 5, {"DISTRIBUTED": (2, 1), "MULTIPROCESSING": (4, 1)}).whom()
    'rank 1, worker 1'
    """
    if "DEFAULT" not in groups and groups:
        ranks, rank = groups.get("DISTRIBUTED", (1, 0))
        workers, worker = groups.get("MULTIPROCESSING", (1, 0))
        return ReaderLayout(ranks, workers, rank, worker, rank_major=True)
    info = _worker_info()
    workers = info.num_workers if info is not None else 1
    if readers % workers:  # sharding applied by hand: call every instance a rank
        workers = 1
    ranks = readers // workers
    return ReaderLayout(ranks, workers, reader % ranks, reader // ranks, rank_major=False)


def _loader_readers() -> int:
    """How many readers the surrounding plain DataLoader and process group make."""
    info, group = _worker_info(), _process_group()
    ranks = group.get_world_size() if group is not None else 1
    return ranks * (info.num_workers if info is not None else 1)


def _is_first_reader() -> bool:
    info, group = _worker_info(), _process_group()
    rank = group.get_rank() if group is not None else 0
    return rank == 0 and (info is None or info.id == 0)


def check_split(split: Split | None, per_worker: bool, listed: int | None, name: str) -> int | None:
    """Check how shards are split among readers, as an epoch of an opener begins: ``split`` is
    the sharding filter before it (from its context), ``per_worker`` whether a stage before it
    gives each worker shards of its own, ``listed`` the length of the shard list it reads (None
    where it has none), ``name`` the opener's, for the warning.

    Returns how many shards this reader gets, or None when that is not known in advance (the
    shard list has no length) or there is nothing to split.

    Raises:
        ShardSplitError: some rank gets no shard at all.

    Warns (from rank 0's worker 0 only, so once per job):
        RuntimeWarning: some readers get no shard, or ranks get different numbers of shards;
            or there is no sharding filter while a plain DataLoader or process group runs
            several readers, which then all read every shard of a list of known length
            (unless a stage declares it gives each worker its own: see the module).
    """
    if split is None:
        readers = _loader_readers()
        if readers > 1 and _is_first_reader() and not per_worker and listed is not None:
            warnings.warn(
                f"{name} has no sharding_filter upstream, so each of the "
                f"{readers} readers (ranks x workers) reads every shard; split the shard list "
                "with .sharding_filter(), split_by_node/split_by_worker, or WebDataset(...)",
                RuntimeWarning,
                stacklevel=2,
            )
        return None
    if split.readers == 1 or split.shards is None:
        return None
    layout: ReaderLayout = split.layout
    shards = split.shards
    per_rank = layout.shards_per_rank(shards)
    plural = "s" if shards != 1 else ""
    if min(per_rank) == 0:
        idle = ", ".join(str(rank) for rank, count in enumerate(per_rank) if count == 0)
        raise ShardSplitError(
            f"{shards} shard{plural} for {layout.describe()}: rank {idle} would read nothing, "
            "which ends every rank's epoch at once under DistributedReadingService and leaves "
            f"the other ranks waiting under DDP; use at least {layout.readers} shards (a "
            "multiple of ranks x workers splits evenly), fewer workers, or resampled shards"
        )
    if layout.is_first and (shards < layout.readers or max(per_rank) > min(per_rank)):
        counts = ", ".join(str(count) for count in per_rank)
        idle_readers = max(layout.readers - shards, 0)
        warnings.warn(
            f"{shards} shard{plural} for {layout.describe()}: "
            + (f"{_readers(idle_readers)} none; " if idle_readers else "")
            + (
                f"ranks get {counts} shards, so they run out at different times "
                "(DistributedReadingService stops every rank when the first runs out, leaving "
                "the rest of the others' shards unread this epoch; with plain DataLoader use "
                "wdspipes.full_sync(loader)); "
                if max(per_rank) > min(per_rank)
                else ""
            )
            + f"a multiple of {layout.readers} shards splits evenly",
            RuntimeWarning,
            stacklevel=2,
        )
    return shards // layout.readers + (layout.reader < shards % layout.readers)


def _readers(count: int) -> str:
    return f"{count} reader gets" if count == 1 else f"{count} readers get"


def warn_idle_reader(split: Split | None) -> None:
    """Warn that this reader got no shard in an epoch whose split could not be checked ahead."""
    if split is None or split.readers == 1 or split.layout is None:
        return
    layout: ReaderLayout = split.layout
    warnings.warn(
        f"{layout.whom()} of {layout.describe()} got no shard this epoch: the shard list "
        f"has fewer shards than readers",
        RuntimeWarning,
        stacklevel=2,
    )


_END = object()


def full_sync(items: Iterable[T], group: dist.ProcessGroup | None = None) -> Iterator[T]:
    """Yield ``items`` while every rank of ``group`` still has one; stop all ranks together.

    Wrap a plain DataLoader in the training loop (``for batch in full_sync(loader)``), so that
    a rank whose shards hold fewer samples does not leave the others waiting in DDP's
    all-reduce. Each item costs one all-reduce of one number: wrap the batched loader, not
    single samples. The items the other ranks still had when the first ran out are not
    yielded this epoch. ``DistributedReadingService`` does the same for DataLoader2 by itself.
    Without an initialised process group, ``items`` pass through as they are.
    """
    iterator = iter(items)
    if _process_group() is None:
        yield from iterator
        return
    import torch  # a process group: torch is loaded
    import torch.distributed as dist

    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    try:
        while True:
            item = next(iterator, _END)
            flag.fill_(0 if item is _END else 1)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
            if not flag.item():
                if item is not _END:
                    log.debug("full_sync: another rank ran out; items left here are dropped")
                return
            yield item  # type: ignore[misc]
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
