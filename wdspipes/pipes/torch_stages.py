"""torch's own stages in a wdspipes pipeline: the one table that says how each takes part in an
epoch and in the state (as a :class:`~wdspipes.core.protocol.StageBase` that the engine opens),
and the only place that reads or sets their fields.

- ``IterableWrapper`` (adapter :class:`Wrapped`): a source, run again from its start;
- ``map``, ``collate``, ``filter`` (:class:`Passing`): one item out per item in, or items
  dropped: nothing to save;
- ``sharding_filter`` (:class:`Split`): it splits the shard URLs among readers, and restarts
  with them; the engine hands the split it makes to the stages after it;
- ``shuffle`` (:class:`Shuffled`): before the reader, the seed of its epoch; after it, refused
  once begun (``buffer_shuffle`` saves where its samples are).

Each is opened on the epoch of the stage before it by a shallow copy of it that reads that
epoch, so that the stage itself keeps only its arguments, as wdspipes' own do. Any other torch
stage is iterated whole, as the head of the chain the engine opens, and refused by name when the
state is asked for. What a torch stage reads is found in its attributes, as torch's own graph
traversal finds it, but without pickling the stage (:func:`datapipes_in`).

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> adapter(IterableWrapper(range(3)).map(str)).resumes
<Resumes.ITEM_BY_ITEM: 'item by item'>
>>> adapter(IterableWrapper(range(3)).batch(2)).refusal()
ResumeError('BatcherIterDataPipe (batch) cannot save its position: ...')
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import IterDataPipe, MapDataPipe
from torch.utils.data.datapipes.iter import Filter, IterableWrapper, Mapper, Shuffler
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe

from wdspipes.core.context import EpochContext
from wdspipes.core.context import Split as Splitting
from wdspipes.core.distributed import split_layout
from wdspipes.core.engine import Foreign, set_torch_adapter
from wdspipes.core.protocol import AllReaders, Epoch, Resumes, StageBase, stage_name
from wdspipes.errors import ResumeError

__all__ = ["TORCH_STAGES", "TorchStage", "adapter", "datapipes_in"]

_DEPTH = 3
"""How deep :func:`datapipes_in` looks into lists, tuples, sets and dicts."""


def datapipes_in(value: object, depth: int = _DEPTH) -> Iterator[IterDataPipe[Any]]:
    """The DataPipes ``value`` is or holds: the attributes of a stage, in lists, tuples, sets and
    dicts (their values) down to ``depth`` levels, as torch's graph traversal finds them when it
    pickles a stage; found here without pickling anything.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> a, b = IterableWrapper([1]), IterableWrapper([2])
    >>> [pipe is a for pipe in datapipes_in({"x": [a, (b,)], "y": 3})]
    [True, False]
    """
    if isinstance(value, IterDataPipe | MapDataPipe):
        yield value  # type: ignore[misc]
    elif depth and isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from datapipes_in(item, depth - 1)
    elif depth and isinstance(value, dict):
        for item in value.values():
            yield from datapipes_in(item, depth - 1)


class TorchStage(Foreign):
    """A torch stage the table does not know: iterated whole, and refused by name."""

    def __init__(self, pipe: Any) -> None:
        found: dict[int, Any] = {}
        for value in vars(pipe).values():
            for inner in datapipes_in(value):
                found.setdefault(id(inner), inner)
        super().__init__(pipe, tuple(found.values()))

    def refusal(self) -> ResumeError:
        known = ", ".join(sorted(stage_name(cls) for cls in TORCH_STAGES))
        return ResumeError(
            f"{stage_name(self.pipe)} cannot save its position: it is neither a wdspipes stage "
            f"nor one of the torch stages wdspipes knows how to restore ({known})"
        )


class _Reading(StageBase):
    """A torch stage that reads one DataPipe, kept in :attr:`attribute`; opened as a shallow
    copy of it that reads the epoch of the stage before it."""

    attribute = "datapipe"

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe

    def upstream(self) -> tuple[Any, ...]:
        return (getattr(self.pipe, self.attribute),)

    def head_source(self) -> Any:
        return None

    def opened(self, source: Iterable[Any]) -> Any:
        """A copy of the stage that reads ``source``."""
        clone = copy.copy(self.pipe)
        setattr(clone, self.attribute, source)
        return clone

    def open(self, source: Any, context: EpochContext, part: Any = None) -> Any:
        return self.opened(source)


class Passing(_Reading):
    """``map``, ``collate``, ``filter``: each item out is one item in, or items are dropped."""

    resumes = Resumes.ITEM_BY_ITEM


class Wrapped(StageBase):
    """``IterableWrapper``: a source, which gives the same items again from its start."""

    resumes = Resumes.FROM_START

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe

    def upstream(self) -> tuple[Any, ...]:
        return ()

    def head_source(self) -> Any:
        return None

    def open(self, source: Any, context: EpochContext, part: Any = None) -> Any:
        return self.pipe


class Split(_Reading):
    """``sharding_filter``: keeps every n-th item, as the loader set it up; restarted, it
    splits the same items again. Which items it keeps depends on their position, so it is not
    item by item: a sample buffer after it (sharding samples, not shard URLs) cannot have its
    samples made again."""

    resumes = Resumes.FROM_START
    attribute = "source_datapipe"

    def split(self) -> Splitting:
        pipe = self.pipe
        readers, reader = pipe.num_of_instances, pipe.instance_id
        try:
            shards: int | None = len(pipe.source_datapipe)
        except TypeError:
            shards = None
        groups = {priority.name: place for priority, place in pipe.groups.items()}
        layout = split_layout(readers, reader, groups) if readers > 1 else None
        return Splitting(readers, reader, shards, layout)


class Shuffled(_Reading):
    """``shuffle``: before the reader, its part is the seed of its epoch, chosen as the epoch
    opens (the loader's seed if it gave one, which the epoch takes, as torch's shuffle does);
    after the reader, its buffer of samples cannot be saved once it began."""

    resumes = Resumes.FROM_START
    shares = True

    def open(self, source: Any, context: EpochContext, part: Any = None) -> ShuffledEpoch:
        pipe = self.pipe
        if isinstance(part, AllReaders):
            seeds = {None if each is None else each["seed"] for each in part.parts}
            if len(seeds) > 1:
                raise ResumeError(
                    f"{stage_name(pipe)}: the readers' states have different seeds for the "
                    "shard order (states of different epochs or jobs?)"
                )
            (seed,) = seeds or {None}
        elif part is not None:
            seed = part["seed"]
        else:
            seed = None
        if pipe._enabled:
            if seed is None:
                seed = pipe._seed
            if seed is None:  # as Shuffler.reset would draw it
                seed = int(torch.empty((), dtype=torch.int64).random_().item())
            pipe._seed = None  # the epoch takes it, as torch's shuffle does
        clone = self.opened(source)
        clone._seed = seed
        after = context.places is not None or context.untracked is not None
        return ShuffledEpoch(pipe, clone, seed, after)


class ShuffledEpoch(Epoch[Any]):
    """An epoch of torch's ``shuffle``: the seed it shuffles with."""

    def __init__(self, pipe: Any, clone: Any, seed: int | None, after_reader: bool) -> None:
        self.pipe, self.clone = pipe, clone
        self.seed = seed
        self.after_reader = after_reader
        self.begun = False

    def __iter__(self) -> Iterator[Any]:
        self.begun = True
        yield from self.clone

    def part(self) -> dict[str, Any] | None:
        if self.after_reader and self.begun:
            raise ResumeError(
                f"{stage_name(self.pipe)} cannot save the samples in its buffer: use "
                "buffer_shuffle (wdspipes.shuffle in DataPipeline) for samples, which saves "
                "where they are"
            )
        return None if self.seed is None else {"seed": self.seed}


TORCH_STAGES: dict[type, type[StageBase]] = {
    IterableWrapper: Wrapped,
    Mapper: Passing,  # collate too: a Mapper
    Filter: Passing,
    ShardingFilterIterDataPipe: Split,
    Shuffler: Shuffled,
}
"""torch stage class -> its adapter; a subclass takes its base class's."""


def adapter(pipe: Any) -> StageBase:
    """What torch stage ``pipe`` is to the engine: its adapter (one that refuses, for a stage
    not in :data:`TORCH_STAGES`)."""
    for cls in type(pipe).__mro__:
        found = TORCH_STAGES.get(cls)
        if found is not None:
            return found(pipe)  # type: ignore[call-arg]
    return TorchStage(pipe)


set_torch_adapter(adapter)
