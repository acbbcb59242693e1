"""A pipeline's state: assembled from its stages' parts, and handed back to them, by an
assembler that knows no concrete stage (the protocol is :mod:`wdspipes.state.protocol`).

Every wdspipes stage has ``state_dict()`` and ``load_state_dict()`` (torchdata's ``Stateful``
protocol, which ``StatefulDataLoader`` calls in each worker), and they save and restore the
whole chain of stages upstream of the stage they are called on. The state is small:

- the stages before the reader (``ShardList``, shard shuffles, resamplers, the sharding filter,
  ``open_shards``, ``load_tar``) are not saved item by item: their seed numbers are, and on
  restore they run again from the start of the epoch while ``open_shards`` skips the shards
  already read;
- the reader (``group_samples`` after ``open_shards`` and ``load_tar``, or a stream loader,
  ``load_cbor`` or ``load_msgpack``, after ``open_shards``) saves the next sample's place:
  its shard's index in the epoch's shard list and a byte offset in it (see
  :mod:`wdspipes.read.positions`);
- a sample shuffle buffer saves, for each sample it holds, where it lives (shard index, byte
  offset), not its bytes, and the number of draws its generator made; on restore the reader
  reads those samples again, from only the shards they are in, and they pass through the
  stages between the reader and the buffer before normal reading goes on;
- the other stages save a count or nothing.

The state also says which reader saved it (``"reader"``: the index and count of the sharding
filter's split, ``[0, 1]`` without one) and the epoch it was saved in. Loaded into a pipeline
that is the same reader of the same split, the state goes on exactly where it was. The states
of all the readers of a job, merged (:func:`wdspipes.state.elastic.merge_states`), load into a
pipeline split any other way: each stage then takes its share of the work left in the epoch
(see :mod:`wdspipes.state.elastic`).

Restoring takes the same time wherever in the epoch the state was saved, but for the shard
list itself, which is walked again (a microsecond or so per shard).

A stage that cannot be restored (a plain function stage, torch's ``shuffle`` after the reader,
``unbatched`` in the middle of a batch, a stage that has not declared how it resumes, ...)
raises :class:`~wdspipes.errors.ResumeError` naming it when the state is asked for. Loading a
state into a pipeline of other stages, or one reader's state into another reader, is refused
the same way.

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

from collections.abc import Callable
from typing import Any

from wdspipes.errors import ResumeError
from wdspipes.state.graph import chain_of, part_of, sharding_filter_of
from wdspipes.state.protocol import AllReaders, Resumable, reader_names, stage_name

__all__ = [
    "FORMAT",
    "ResumeError",
    "abandon_epoch",
    "layout_of",
    "pipeline_state",
    "restore_pipeline",
    "stage_keys",
    "state_saver",
]

FORMAT = "wdspipes-state/3"
"""The ``format`` entry of every state: a state of another format is refused. (Format 2 kept
places by the number of the shard among a reader's own; format 3 by its index in the epoch's
shard list, which every reader shares, so that states of several readers merge.)"""


def _reader_index(chain: list[Any], parts: list[Resumable]) -> int:
    """The position of the one reader among the stages (or of the stage that holds its
    sources' states, where the chain begins); ResumeError if there is not one, or if a stage
    before it cannot restart its epoch."""
    readers = [index for index, part in enumerate(parts) if part.reader or part.holds_sources]
    if not readers:
        known = ", ".join(reader_names())
        raise ResumeError(
            f"{stage_name(chain[-1])}, at the end of the pipeline, cannot resume: no stage "
            "from the source to it keeps the place of what it reads, so nothing would skip "
            f"what was read before; resuming needs a reader ({known}: group_samples after "
            "open_shards -> load_tar, as WebDataset and tarfile_to_samples build it; bare "
            "tar members cannot resume)"
        )
    if len(readers) > 1:
        found = ", ".join(stage_name(chain[index]) for index in readers)
        known = ", ".join(reader_names())
        raise ResumeError(f"resuming needs exactly one reader ({known}), found {found}")
    reader = readers[0]
    for pipe, part in zip(chain[:reader], parts[:reader], strict=True):
        if not (part.restartable or part.one_to_one):
            known = ", ".join(reader_names())
            raise ResumeError(
                f"{stage_name(pipe)} comes before the reader ({known}), which has it run its "
                "epoch again from the start when the pipeline is restored, and it has not "
                "declared that it gives the same items again: declare restartable (see "
                "docs/guide/writing-a-stage.md), or put it after the reader"
            )
    return reader


def layout_of(sink: Any) -> tuple[int, int]:
    """``(readers, reader)``: how the sharding filter before ``sink`` splits its shards, as the
    loader set it up; ``(1, 0)`` without one."""
    split = sharding_filter_of(sink)
    if split is None:
        return (1, 0)
    from wdspipes.state.torch_stages import split_layout  # a sharding filter: torch is loaded

    return split_layout(split)


def stage_keys(chain: list[Any]) -> list[str]:
    """The keys of a state's stages: position and class, so that a state fits one pipeline."""
    return [f"{index}:{type(pipe).__name__}" for index, pipe in enumerate(chain)]


def pipeline_state(sink: Any, epoch: int | None = None) -> dict[str, Any]:
    """The state of the pipeline ending in ``sink``, saved in ``epoch``: what
    ``sink.state_dict()`` returns. Each stage gives its own part
    (:meth:`~wdspipes.state.protocol.Resumable.get_state`).

    Raises:
        ResumeError: a stage cannot save its state; the message names it.
    """
    return state_saver(sink)(epoch)


def state_saver(sink: Any) -> Callable[[int | None], dict[str, Any]]:
    """A function that gives :func:`pipeline_state` of ``sink`` in the epoch given it, the
    graph traversed once here (the stages' parts are asked for at each call): for a loader that
    takes the state of every batch.

    Raises:
        ResumeError: the graph cannot save its state (the stages' own refusals come from the
            function).
    """
    chain = chain_of(sink)
    parts = [part_of(pipe) for pipe in chain]
    _reader_index(chain, parts)
    readers, reader = layout_of(sink)
    keys = stage_keys(chain)

    def save(epoch: int | None) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "epoch": epoch,
            "reader": [reader, readers],
            "stages": {key: part.get_state() for key, part in zip(keys, parts, strict=True)},
        }

    return save


def restore_pipeline(sink: Any, state: dict[str, Any]) -> None:
    """Make the next iteration of ``sink`` go on from ``state``: each stage takes its part back
    (:meth:`~wdspipes.state.protocol.Resumable.set_state`). A state of one reader goes back into
    the same reader; a merged state (:func:`~wdspipes.state.elastic.merge_states`), or the state
    of a job's only reader, into a reader of any split: each stage gets the parts of all the
    saved readers (:class:`~wdspipes.state.protocol.AllReaders`) and takes its share.

    Raises:
        ResumeError: the state is not one of this pipeline's (other stages, another format),
            or is another reader's of a job with several.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ResumeError(f"not a wdspipes pipeline state (format {found!r}, expected {FORMAT!r})")
    chain = chain_of(sink)
    parts = [part_of(pipe) for pipe in chain]
    _reader_index(chain, parts)
    keys = stage_keys(chain)
    saved = keys if state["stages"] is None else list(state["stages"])
    if keys != saved:
        raise ResumeError(
            "the state was saved from another pipeline: its stages are "
            f"{_plain(saved)}, this pipeline's are {_plain(keys)}"
        )
    readers, reader = layout_of(sink)
    if "readers" in state:  # merged
        starting, epoch, stages = len(state["starting"]), state["epoch"], state["stages"]
        for part, key in zip(parts, keys, strict=True):
            part.set_state(AllReaders([] if stages is None else stages[key], starting, epoch))
        return
    saved_reader, saved_readers = state["reader"]
    if (saved_reader, saved_readers) == (reader, readers):
        for part, key in zip(parts, keys, strict=True):
            part.set_state(state["stages"][key])
        return
    if saved_readers == 1:  # a job's only reader: its state is the whole job's
        for part, key in zip(parts, keys, strict=True):
            part.set_state(AllReaders([state["stages"][key]], 0, state["epoch"]))
        return
    raise ResumeError(
        f"the state is reader {saved_reader}'s of a job whose shards were split among "
        f"{saved_readers} readers (workers times ranks), and this pipeline is reader {reader} of "
        f"{readers}: give each reader its own state back, or the states of all {saved_readers} "
        "readers merged by wdspipes.merge_states to every reader of a new split"
    )


def _plain(keys: list[str]) -> str:
    return " -> ".join(key.partition(":")[2] for key in keys)


def abandon_epoch(source: Any) -> None:
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
