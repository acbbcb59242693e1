"""The graph of stages, traversed without pickling it: what a stage reads, the chain of stages
that a state is saved from, the sharding filter before a stage, and the links stages make as an
epoch begins.

Each stage names what it reads (:meth:`~wdspipes.state.protocol.Resumable.upstream`; torch's
stages through their adapters, :mod:`wdspipes.state.torch_stages`). Torch's own traversal,
``traverse_dps``, pickles every stage to find the same: a stage class defined in a function, an
open file or a lambda in a stage made it fail, in one process, without any loader. The seeds,
the split check and the state all traverse the graph here instead; pickling is left to the loaders
that send a pipeline to their worker processes.

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> pipe = IterableWrapper(["a.tar"]).sharding_filter().map(str.upper)
>>> type(sharding_filter_of(pipe)).__name__, [type(p).__name__ for p in chain_of(pipe)]
('ShardingFilterIterDataPipe', ['IterableWrapperIterDataPipe', 'ShardingFilterIterDataPipe', \
'MapperIterDataPipe'])
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from wdspipes.errors import ResumeError
from wdspipes.state.protocol import Resumable, SamplePlaces, is_torch_datapipe, stage_name

__all__ = [
    "chain_of",
    "epoch_begins",
    "is_sharding_filter",
    "part_of",
    "sample_places_of",
    "sharding_filter_of",
    "upstream_of",
]

_SHARDING = "torch.utils.data.datapipes.iter.sharding"


def part_of(pipe: object) -> Resumable:
    """The part of the state protocol that ``pipe`` plays: itself for a wdspipes stage, its
    adapter for one of torch's (:mod:`wdspipes.state.torch_stages`, loaded only where torch's
    DataPipes can exist: torch is loaded), a refusal naming it for anything else."""
    if isinstance(pipe, Resumable):
        return pipe
    if is_torch_datapipe(pipe):
        from wdspipes.state.torch_stages import part_of as torch_part

        return torch_part(pipe)
    return _Unknown(pipe)


class _Unknown(Resumable):
    """A source that is neither a wdspipes stage nor one of torch's: refused by name."""

    def __init__(self, pipe: object) -> None:
        self.pipe = pipe

    def get_state(self) -> Any:
        raise ResumeError(f"{stage_name(self.pipe)} is not a stage wdspipes can save")


def is_sharding_filter(stage: object) -> bool:
    """Whether ``stage`` is torch's sharding filter (asked without importing torch)."""
    sharding = sys.modules.get(_SHARDING)
    return sharding is not None and isinstance(stage, sharding.ShardingFilterIterDataPipe)


def upstream_of(pipe: Any) -> Iterator[Any]:
    """The stages ``pipe`` reads, directly or not, each once, nearest first, whatever the
    shape of the graph."""
    seen = {id(pipe)}
    waiting = list(part_of(pipe).upstream())
    while waiting:
        stage = waiting.pop(0)
        if id(stage) not in seen:
            seen.add(id(stage))
            yield stage
            waiting.extend(part_of(stage).upstream())


def sharding_filter_of(pipe: Any) -> Any:
    """The core sharding filter nearest upstream of ``pipe`` (not ``pipe`` itself), if any
    (torch's ``ShardingFilterIterDataPipe``); None without one."""
    for stage in upstream_of(pipe):
        if is_sharding_filter(stage):
            return stage
    return None


def chain_of(sink: Any) -> list[Any]:
    """The stages from the source to ``sink``, which must form a single chain, each reached
    through the one after it (:meth:`~wdspipes.state.protocol.Resumable.upstream`), up to a
    stage whose part holds its sources' states
    (:attr:`~wdspipes.state.protocol.Resumable.holds_sources`), where the chain begins.

    Raises:
        ResumeError: a stage reads more than one DataPipe, and does not hold their states.
    """
    chain = [sink]
    part = part_of(sink)
    sources = () if part.holds_sources else part.upstream()
    while sources:
        if len(sources) > 1:
            raise ResumeError(
                f"{stage_name(chain[-1])} reads {len(sources)} DataPipes: wdspipes resumes "
                "pipelines that are a single chain of stages"
            )
        chain.append(sources[0])
        part = part_of(sources[0])
        sources = () if part.holds_sources else part.upstream()
    chain.reverse()
    return chain


def epoch_begins(reader: Any) -> None:
    """The link a reader makes as each of its epochs begins: every stage before it hears of it
    (:meth:`~wdspipes.state.protocol.Resumable.epoch_begins`) before its own epoch begins."""
    for pipe in upstream_of(reader):
        part_of(pipe).epoch_begins()


def sample_places_of(pipe: Any) -> SamplePlaces | str | None:
    """The link a sample buffer makes as its epoch begins: the
    :class:`~wdspipes.state.protocol.SamplePlaces` of the reader before ``pipe`` when every
    stage in between is :attr:`~wdspipes.state.protocol.Resumable.one_to_one`; the name of the
    first stage in between that is not; None where no reader is before ``pipe`` (it sees shard
    URLs, say)."""
    part = part_of(pipe)
    stage: object = pipe
    blocker = None
    while sources := part.upstream():
        if len(sources) > 1:
            return blocker or stage_name(stage)
        stage = sources[0]
        part = part_of(stage)
        places = part.sample_places()
        if places is not None:
            return places if blocker is None else blocker
        if blocker is None and not part.one_to_one:
            blocker = stage_name(stage)
    return None
