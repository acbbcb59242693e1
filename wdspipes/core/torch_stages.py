"""torch's own stages in a pipeline that resumes: the one table that says how each follows the
state protocol (:mod:`wdspipes.core.resumable`): the only place that saves or sets their fields.

- ``IterableWrapper`` (adapter :class:`Wrapped`): a source, run again from its start;
- ``map``, ``collate``, ``filter`` (:class:`Passing`): one item out per item in, or items
  dropped: nothing to save;
- ``sharding_filter`` (:class:`Split`): how the shards are split, checked on restore (before
  the reader, where it splits shard URLs);
- ``shuffle`` (:class:`Shuffled`): before the reader, the seed of its epoch; after it,
  refused (``buffer_shuffle`` saves where its samples are).

Any other torch stage is refused, naming it. :func:`part_of` gives the walker
(:mod:`wdspipes.core.resume`) a stage's part of the protocol: the stage itself for a wdspipes stage,
its adapter for one of the above.

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> part_of(IterableWrapper(range(3)).map(str)).one_to_one
True
>>> part_of(IterableWrapper(range(3)).batch(2)).resume_state()
Traceback (most recent call last):
...
wdspipes.errors.ResumeError: BatcherIterDataPipe (batch) cannot save its position: ...
"""

from __future__ import annotations

import pickle
from typing import Any, cast

import torch
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import Filter, IterableWrapper, Mapper, Shuffler
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe
from torch.utils.data.graph import traverse_dps

from wdspipes.core.resumable import Resumable, stage_name
from wdspipes.errors import ResumeError

__all__ = ["TORCH_STAGES", "TorchStage", "part_of"]


class TorchStage(Resumable):
    """A torch stage seen through the state protocol: :attr:`pipe` is the stage. As such it
    declares nothing, and is refused."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe

    def stage_label(self) -> str:
        return stage_name(self.pipe)

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        """What torch's graph walk finds in the stage's attributes (it pickles them); none
        where that fails: the stage is refused anyway."""
        try:
            graph = traverse_dps(self.pipe)
        except (pickle.PicklingError, TypeError, AttributeError):
            return ()
        ((_, inputs),) = graph.values()
        return tuple(cast(IterDataPipe[Any], pipe) for pipe, _ in inputs.values())

    def resume_state(self) -> Any:
        raise self._unknown()

    def replay_state(self) -> Any:
        raise self._unknown()

    def _unknown(self) -> ResumeError:
        known = ", ".join(sorted(stage_name(cls) for cls in TORCH_STAGES))
        return ResumeError(
            f"{self.stage_label()} cannot save its position: it is neither a wdspipes stage "
            f"nor one of the torch stages wdspipes knows how to restore ({known})"
        )


class Passing(TorchStage):
    """``map``, ``collate``, ``filter``: each item out is one item in, or items are dropped."""

    one_to_one = True

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        return (self.pipe.datapipe,)

    def resume_state(self) -> Any:
        return None

    def replay_state(self) -> Any:
        return None


class Wrapped(TorchStage):
    """``IterableWrapper``: a source, which gives the same items again from its start."""

    def replay_state(self) -> Any:
        return None


class Split(TorchStage):
    """``sharding_filter``: keeps every n-th item; its part is how the shards are split (the
    number of readers and this one's index), which must not change. Which items it keeps
    depends on their position, so it is not :attr:`~Passing.one_to_one`: a sample buffer after
    it (sharding samples, not shard URLs) cannot have its samples made again."""

    pipe: ShardingFilterIterDataPipe

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        return (self.pipe.source_datapipe,)

    def resume_state(self) -> Any:
        return {"instances": [self.pipe.num_of_instances, self.pipe.instance_id]}

    def replay_state(self) -> Any:
        return self.resume_state()

    def resume_from(self, state: Any) -> None:
        saved = tuple(state["instances"])
        current = (self.pipe.num_of_instances, self.pipe.instance_id)
        if saved[0] != current[0]:
            raise ResumeError(
                f"the state was saved with the shards split among {saved[0]} readers (workers "
                f"times ranks), and this pipeline has {current[0]}: wdspipes resumes only with "
                "the same number of workers and ranks, since each reader's remaining samples "
                "depend on it. Keep the count, or start the epoch afresh without the state."
            )
        if saved != current:
            raise ResumeError(
                f"this reader is number {current[1]} of {current[0]}, the state is reader "
                f"{saved[1]}'s: give each worker and rank its own state back"
            )


_EPOCH_SEED = "_wdspipes_epoch_seed"
"""The attribute in which a Shuffler before a reader keeps the seed of its epoch."""


class Shuffled(TorchStage):
    """``shuffle``: before the reader, its part is the seed of its epoch, chosen as the reader
    begins the epoch (the loader's seed if it gave one) so that it can be saved; after the
    reader, its buffer of samples cannot be saved."""

    pipe: Shuffler[Any]

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        return (self.pipe.datapipe,)

    def begin_replay(self) -> None:
        pipe = self.pipe
        seed = None
        if pipe._enabled:
            if pipe._seed is None:  # as Shuffler.reset would draw it
                pipe.set_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
            seed = pipe._seed
        setattr(pipe, _EPOCH_SEED, seed)

    def replay_state(self) -> Any:
        # The seed of the epoch begun; before the first, the one a loader gave for it.
        seed = getattr(self.pipe, _EPOCH_SEED, None)
        if seed is None and self.pipe._enabled:
            seed = self.pipe._seed
        return None if seed is None else {"seed": seed}

    def resume_state(self) -> Any:
        raise ResumeError(
            f"{self.stage_label()} cannot save the samples in its buffer: use buffer_shuffle "
            "(wdspipes.shuffle in DataPipeline) for samples, which saves where they are"
        )

    def resume_from(self, state: Any) -> None:
        if state is not None:
            self.pipe.set_seed(state["seed"])


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
