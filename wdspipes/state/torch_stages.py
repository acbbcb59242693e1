"""torch's own stages in a pipeline that resumes: the one table that says how each follows the
state protocol (:mod:`wdspipes.state.protocol`): the only place that reads or sets their fields.

- ``IterableWrapper`` (adapter :class:`Wrapped`): a source, run again from its start;
- ``map``, ``collate``, ``filter`` (:class:`Passing`): one item out per item in, or items
  dropped: nothing to save;
- ``sharding_filter`` (:class:`Split`): it splits the shard URLs among readers, and restarts
  with them (how it splits is the loader's, and the assembler checks it);
- ``shuffle`` (:class:`Shuffled`): before the reader, the seed of its epoch; after it,
  refused (``buffer_shuffle`` saves where its samples are).

Any other torch stage is refused, naming it. :func:`part_of` gives the assembler
(:mod:`wdspipes.state.checkpoint`) a stage's part of the protocol: the stage itself for a
wdspipes stage, its adapter for one of the above. What a torch stage reads is found in its
attributes, as torch's own graph traversal finds it, but without pickling the stage
(:func:`datapipes_in`).

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> part_of(IterableWrapper(range(3)).map(str)).one_to_one
True
>>> part_of(IterableWrapper(range(3)).batch(2)).get_state()
Traceback (most recent call last):
...
wdspipes.errors.ResumeError: BatcherIterDataPipe (batch) cannot save its position: ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterDataPipe, MapDataPipe
from torch.utils.data.datapipes.iter import Filter, IterableWrapper, Mapper, Shuffler
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe

from wdspipes.errors import ResumeError
from wdspipes.state.protocol import AllReaders, Resumable, stage_name

__all__ = ["TORCH_STAGES", "TorchStage", "datapipes_in", "part_of"]

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


class TorchStage(Resumable):
    """A torch stage seen through the state protocol: :attr:`pipe` is the stage. As such it
    declares nothing, and is refused."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        """The DataPipes in the stage's attributes (see :func:`datapipes_in`), each once."""
        found: dict[int, IterDataPipe[Any]] = {}
        for value in vars(self.pipe).values():
            for pipe in datapipes_in(value):
                found.setdefault(id(pipe), pipe)
        return tuple(found.values())

    def get_state(self) -> Any:
        known = ", ".join(sorted(stage_name(cls) for cls in TORCH_STAGES))
        raise ResumeError(
            f"{stage_name(self.pipe)} cannot save its position: it is neither a wdspipes stage "
            f"nor one of the torch stages wdspipes knows how to restore ({known})"
        )


class Passing(TorchStage):
    """``map``, ``collate``, ``filter``: each item out is one item in, or items are dropped."""

    one_to_one = True

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        return (self.pipe.datapipe,)

    def get_state(self) -> Any:
        return None


class Wrapped(TorchStage):
    """``IterableWrapper``: a source, which gives the same items again from its start."""

    restartable = True

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        return ()

    def get_state(self) -> Any:
        return None


class Split(TorchStage):
    """``sharding_filter``: keeps every n-th item, as the loader set it up; restarted, it
    splits the same items again. Which items it keeps depends on their position, so it is not
    :attr:`~Passing.one_to_one`: a sample buffer after it (sharding samples, not shard URLs)
    cannot have its samples made again. How it splits is checked by the assembler."""

    restartable = True
    pipe: ShardingFilterIterDataPipe

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        return (self.pipe.source_datapipe,)

    def get_state(self) -> Any:
        return None

    def set_state(self, state: Any) -> None:
        return None


def split_layout(pipe: ShardingFilterIterDataPipe) -> tuple[int, int]:
    """``(readers, reader)``: how many readers ``pipe`` splits its items among, and which one
    this is, as the loader set it up."""
    return pipe.num_of_instances, pipe.instance_id


_EPOCH_SEED = "_wdspipes_epoch_seed"
"""The attribute in which a Shuffler before a reader keeps the seed of its epoch."""


class Shuffled(TorchStage):
    """``shuffle``: before the reader, its part is the seed of its epoch, chosen as the reader
    begins the epoch (the loader's seed if it gave one) so that it can be saved; after the
    reader, its buffer of samples cannot be saved."""

    restartable = True
    pipe: Shuffler[Any]

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        return (self.pipe.datapipe,)

    def epoch_begins(self) -> None:
        pipe = self.pipe
        seed = None
        if pipe._enabled:
            if pipe._seed is None:  # as Shuffler.reset would draw it
                pipe.set_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
            seed = pipe._seed
        setattr(pipe, _EPOCH_SEED, seed)

    def get_state(self) -> Any:
        pipe = self.pipe
        if not hasattr(pipe, _EPOCH_SEED) and pipe._valid_iterator_id is not None:
            raise ResumeError(
                f"{stage_name(pipe)} cannot save the samples in its buffer: use buffer_shuffle "
                "(wdspipes.shuffle in DataPipeline) for samples, which saves where they are"
            )
        # The seed of the epoch begun; before the first, the one a loader gave for it.
        seed = getattr(pipe, _EPOCH_SEED, None)
        if seed is None and pipe._enabled:
            seed = pipe._seed
        return None if seed is None else {"seed": seed}

    def set_state(self, state: Any) -> None:
        parts = state.parts if isinstance(state, AllReaders) else [state]
        seeds = {None if part is None else part["seed"] for part in parts}
        if len(seeds) > 1:
            raise ResumeError(
                f"{stage_name(self.pipe)}: the readers' states have different seeds for the "
                "shard order (states of different epochs or jobs?)"
            )
        (seed,) = seeds or {None}
        if seed is not None:
            self.pipe.set_seed(seed)


TORCH_STAGES: dict[type, type[TorchStage]] = {
    IterableWrapper: Wrapped,
    Mapper: Passing,  # collate too: a Mapper
    Filter: Passing,
    ShardingFilterIterDataPipe: Split,
    Shuffler: Shuffled,
}
"""torch stage class -> its adapter; a subclass takes its base class's."""


def part_of(pipe: object) -> Resumable:
    """The part of the state protocol that ``pipe`` plays: itself for a wdspipes stage, its
    adapter for a torch stage (one that refuses, for a stage not in :data:`TORCH_STAGES`)."""
    if isinstance(pipe, Resumable):
        return pipe
    for cls in type(pipe).__mro__:
        adapter = TORCH_STAGES.get(cls)
        if adapter is not None:
            return adapter(pipe)
    return TorchStage(pipe)
