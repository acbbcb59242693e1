"""Mid-epoch resume: the walker that assembles a pipeline's state from its stages' parts and
hands the parts back, knowing no concrete stage (the protocol is :mod:`wdspipes.core.resumable`).

Every wdspipes stage has ``state_dict()`` and ``load_state_dict()`` (torchdata's ``Stateful``
protocol, which ``StatefulDataLoader`` calls in each worker), and they save and restore the
whole chain of stages upstream of the stage they are called on. The state is small:

- the stages before the reader (``ShardList``, shard shuffles, resamplers, the sharding filter,
  ``open_shards``, ``load_tar``) are not saved item by item: their seed materials are, and on
  restore they run again from the start of the epoch while ``open_shards`` skips the shards
  already read;
- the reader (``group_samples`` after ``open_shards`` and ``load_tar``, or a stream loader,
  ``load_cbor`` or ``load_msgpack``, after ``open_shards``) saves the next sample's position:
  the shard's number in this reader's stream and a byte offset in it (see
  :mod:`wdspipes.read.positions`);
- a sample shuffle buffer saves, for each sample it holds, where it lives (shard number, byte
  offset), not its bytes, and the number of draws its generator made; on restore the reader
  reads those samples again, from only the shards they are in, and they pass through the
  stages between the reader and the buffer before normal reading goes on;
- the other stages save a count or nothing.

Restoring takes the same time wherever in the epoch the state was saved, but for the shard
list itself, which is walked again (a microsecond or so per shard).

A stage that cannot be restored (a plain function stage, torch's ``shuffle`` after the reader,
``unbatched`` in the middle of a batch, a stage that has not declared how it resumes, ...)
raises :class:`~wdspipes.errors.ResumeError` naming it when the state is asked for. Loading a
state into a pipeline of other stages, or split among another number of readers (workers times
ranks), is refused the same way.

>>> import tempfile, os
>>> import wdspipes as wds
>>> directory = tempfile.mkdtemp()
>>> for shard in range(2):
...     with wds.TarWriter(os.path.join(directory, f"s-{shard}.tar")) as sink:
...         for index in range(3):
...             _ = sink.write({"__key__": f"{shard}{index}", "txt": f"{shard}{index}"})
>>> def pipeline():
...     pipe = wds.WebDataset(f"{directory}/s-{{0..1}}.tar", shardshuffle=True, seed=1)
...     return pipe.map_dict(txt=bytes.decode).buffer_shuffle(4, initial=2, seed=2)
>>> pipe = pipeline()
>>> it = iter(pipe)
>>> first = [next(it)["txt"] for _ in range(2)]
>>> state = pipe.state_dict()
>>> rest = [sample["txt"] for sample in it]
>>> resumed = pipeline()
>>> resumed.load_state_dict(state)
>>> [sample["txt"] for sample in resumed] == rest
True
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterDataPipe

from wdspipes.core.resumable import Resumable, SamplePlaces, reader_names
from wdspipes.core.torch_stages import part_of
from wdspipes.errors import ResumeError

__all__ = [
    "FORMAT",
    "ResumeError",
    "abandon_epoch",
    "begin_replay",
    "chain_of",
    "pipeline_state",
    "prime_pipeline",
    "restore_pipeline",
    "sample_places_of",
    "upstream_of",
]

FORMAT = "wdspipes-state/2"
"""The ``format`` entry of every state: a state of another format is refused. (Format 1 kept
the seed of a torch ``shuffle`` in the part of ``open_shards``; format 2 in its own.)"""


def chain_of(sink: IterDataPipe[Any]) -> list[IterDataPipe[Any]]:
    """The stages from the source to ``sink``, which must form a single chain, each reached
    through the one after it (:meth:`~wdspipes.core.resumable.Resumable.upstream`), up to a
    stage whose part holds its sources' states
    (:attr:`~wdspipes.core.resumable.Resumable.holds_sources`), where the chain begins.

    Raises:
        ResumeError: a stage reads more than one DataPipe, and does not hold their states.
    """
    chain = [sink]
    part = part_of(sink)
    sources = () if part.holds_sources else part.upstream()
    while sources:
        if len(sources) > 1:
            raise ResumeError(
                f"{part_of(chain[-1]).stage_label()} reads {len(sources)} DataPipes: wdspipes "
                "resumes pipelines that are a single chain of stages"
            )
        chain.append(sources[0])
        part = part_of(sources[0])
        sources = () if part.holds_sources else part.upstream()
    chain.reverse()
    return chain


def _reader_index(parts: list[Resumable]) -> int:
    """The position of the one reader among the stages (or of the stage that holds its
    sources' states, where the chain begins); ResumeError if there is not one."""
    readers = [
        index for index, part in enumerate(parts) if part.replays_source or part.holds_sources
    ]
    if len(readers) == 1:
        return readers[0]
    known = ", ".join(reader_names())
    if not readers:
        raise ResumeError(
            f"{parts[-1].stage_label()}, at the end of the pipeline, cannot resume: no stage "
            "from the source to it keeps the place of what it reads, so nothing would skip "
            f"what was read before; resuming needs a reader ({known}: group_samples after "
            "open_shards -> load_tar, as WebDataset and tarfile_to_samples build it; bare "
            "tar members cannot resume)"
        )
    found = ", ".join(parts[index].stage_label() for index in readers)
    raise ResumeError(f"resuming needs exactly one reader ({known}), found {found}")


def pipeline_state(sink: IterDataPipe[Any]) -> dict[str, Any]:
    """The state of the pipeline ending in ``sink``: what ``sink.state_dict()`` returns.

    Each stage gives its own part: the stages before the reader their
    :meth:`~wdspipes.core.resumable.Resumable.replay_state`, the reader and those after it their
    :meth:`~wdspipes.core.resumable.Resumable.resume_state`.

    Raises:
        ResumeError: a stage cannot save its state; the message names it.
    """
    chain = chain_of(sink)
    parts = [part_of(pipe) for pipe in chain]
    reader = _reader_index(parts)
    states = [
        part.replay_state() if index < reader else part.resume_state()
        for index, part in enumerate(parts)
    ]
    return {"format": FORMAT, "stages": dict(zip(_names(chain), states, strict=True))}


def _names(chain: list[IterDataPipe[Any]]) -> list[str]:
    """The keys of a state's stages: position and class, so that a state fits one pipeline."""
    return [f"{index}:{type(pipe).__name__}" for index, pipe in enumerate(chain)]


def restore_pipeline(sink: IterDataPipe[Any], state: dict[str, Any]) -> None:
    """Make the next iteration of ``sink`` go on from ``state`` (see :func:`pipeline_state`):
    each stage takes its part back (:meth:`~wdspipes.core.resumable.Resumable.resume_from`).

    Raises:
        ResumeError: the state is not one of this pipeline's (other stages, another format),
            or was saved with the shards split among another number of readers.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ResumeError(f"not a wdspipes pipeline state (format {found!r}, expected {FORMAT!r})")
    chain = chain_of(sink)
    parts = [part_of(pipe) for pipe in chain]
    _reader_index(parts)
    names = _names(chain)
    saved = list(state["stages"])
    if names != saved:
        raise ResumeError(
            "the state was saved from another pipeline: its stages are "
            f"{_plain(saved)}, this pipeline's are {_plain(names)}"
        )
    for part, name in zip(parts, names, strict=True):
        part.resume_from(state["stages"][name])


def _plain(names: list[str]) -> str:
    return " -> ".join(name.partition(":")[2] for name in names)


def prime_pipeline(sink: IterDataPipe[Any], state: dict[str, Any]) -> None:
    """Give each stage of ``sink``'s pipeline the epoch numbers of its part of ``state``
    (:meth:`~wdspipes.core.resumable.Resumable.prime_epoch`), where ``state`` is one of this
    pipeline's; otherwise do nothing (loading it will say what is wrong)."""
    if state.get("format") != FORMAT:
        return
    try:
        chain = chain_of(sink)
    except ResumeError:
        return
    names = _names(chain)
    if names != list(state["stages"]):
        return
    for pipe, name in zip(chain, names, strict=True):
        part_of(pipe).prime_epoch(state["stages"][name])


def upstream_of(pipe: IterDataPipe[Any]) -> Iterator[IterDataPipe[Any]]:
    """The stages ``pipe`` reads, directly or not, whatever the shape of the graph."""
    seen = {id(pipe)}
    waiting = list(part_of(pipe).upstream())
    while waiting:
        stage = waiting.pop()
        if id(stage) not in seen:
            seen.add(id(stage))
            yield stage
            waiting.extend(part_of(stage).upstream())


def begin_replay(reader: IterDataPipe[Any]) -> None:
    """The link a reader makes as each of its epochs begins: every stage before it hears of it
    (:meth:`~wdspipes.core.resumable.Resumable.begin_replay`) before its own epoch begins."""
    for pipe in upstream_of(reader):
        part_of(pipe).begin_replay()


def sample_places_of(pipe: IterDataPipe[Any]) -> SamplePlaces | str | None:
    """The link a sample buffer makes as its epoch begins: the
    :class:`~wdspipes.core.resumable.SamplePlaces` of the reader before ``pipe`` when every stage
    in between is :attr:`~wdspipes.core.resumable.Resumable.one_to_one`; the name of the first
    stage in between that is not; None where no reader is before ``pipe`` (it sees shard
    URLs, say)."""
    part = part_of(pipe)
    blocker = None
    while sources := part.upstream():
        if len(sources) > 1:
            return blocker or part.stage_label()
        part = part_of(sources[0])
        places = part.sample_places()
        if places is not None:
            return places if blocker is None else blocker
        if blocker is None and not part.one_to_one:
            blocker = part.stage_label()
    return None


def abandon_epoch(source: IterDataPipe[Any]) -> None:
    """For a stage restored at the end of its epoch (``with_epoch`` after its last item, say),
    which reads no more of ``source`` in it: begin the epoch ``source`` was restored into and
    abandon it at once, as the run that saved the state did, so that the stages before take
    their restored parts now and begin their next epoch afresh."""
    items = iter(source)
    try:
        next(items, None)
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
