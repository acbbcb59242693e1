"""Mid-epoch resume: the state of a pipeline as positions, and how each stage gets back to it.

Every wdspipes stage has ``state_dict()`` and ``load_state_dict()`` (torchdata's ``Stateful``
protocol, which ``StatefulDataLoader`` calls in each worker), and they save and restore the
whole graph upstream of the stage they are called on. The state is small:

- the shard stages before the reader (``ShardList``, shard shuffles, resamplers, the sharding
  filter) are not saved item by item: their seed materials are, and on restore they run again
  from the start of the epoch while ``open_shards`` skips the shards already read;
- the reader (``open_shards`` + ``load_tar`` + ``group_samples``, or ``open_shards`` + a stream
  loader, ``load_cbor`` or ``load_msgpack``) saves the next sample's position: the shard's
  number in this reader's stream and a byte offset in it (see :mod:`wdspipes.positions`);
- a sample shuffle buffer saves, for each sample it holds, where it lives (shard number, byte
  offset), not its bytes, and the number of draws its generator made; on restore the reader
  reads those samples again, from only the shards they are in, and they pass through the
  stages between the reader and the buffer before normal reading goes on;
- the other stages save a count or nothing.

Restoring takes the same time wherever in the epoch the state was saved, but for the shard
list itself, which is walked again (a microsecond or so per shard).

A stage that cannot be restored (a plain function stage, torch's ``shuffle`` after the reader,
``unbatched`` in the middle of a batch, ...) raises :class:`~wdspipes.errors.ResumeError`
naming it when the state is asked for. Loading a state into a pipeline of other stages, or
split among another number of readers (workers times ranks), is refused the same way.

>>> import tempfile, os
>>> import wdspipes as wds
>>> directory = tempfile.mkdtemp()
>>> for shard in range(2):
...     with wds.TarWriter(os.path.join(directory, f"s-{shard}.tar")) as sink:
...         for index in range(3):
...             _ = sink.write({"__key__": f"{shard}{index}", "txt": f"{shard}{index}"})
>>> def pipeline():
...     return wds.WebDataset(f"{directory}/s-{{0..1}}.tar", shardshuffle=True, seed=1).map_dict(
...         txt=bytes.decode).buffer_shuffle(4, initial=2, seed=2)
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

import functools
from typing import TYPE_CHECKING, Any, cast

from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import (
    Filter,
    IterableWrapper,
    Mapper,
    Shuffler,
)
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe
from torch.utils.data.graph import traverse_dps

from wdspipes.errors import ResumeError

if TYPE_CHECKING:
    from wdspipes.io.opener import ShardOpener

__all__ = [
    "FORMAT",
    "ResumeError",
    "chain_of",
    "mark_shard_stages",
    "mend_stateful_dataloader",
    "pipeline_state",
    "restore_pipeline",
    "sample_source_of",
    "stage_name",
]

FORMAT = "wdspipes-state/1"
"""The ``format`` entry of every state: a state of another format is refused."""

_TORCH_PASS = (IterableWrapper, Mapper, Filter, ShardingFilterIterDataPipe)
"""Core torch stages that hold nothing between items: restored by running them again."""


def stage_name(datapipe: IterDataPipe[Any]) -> str:
    """A stage's class and, where it has one, its functional name: ``Shuffler (shuffle)``."""
    cls = type(datapipe)
    for name, function in IterDataPipe.functions.items():
        # ours carry their class; torch's are partials of a wrapper taking the class first
        built = getattr(function, "_wds_stage", None) or next(
            iter(getattr(function, "args", ())), None
        )
        if built is cls:
            return f"{cls.__name__} ({name})"
    return cls.__name__


def chain_of(sink: IterDataPipe[Any]) -> list[IterDataPipe[Any]]:
    """The stages from the source to ``sink``, which must form a single chain.

    Raises:
        ResumeError: a stage reads more than one DataPipe (zip, concat, mux, ...).
    """
    chain: list[Any] = []
    graph = traverse_dps(sink)
    while graph:
        ((pipe, inputs),) = graph.values()
        pipe = cast(IterDataPipe[Any], pipe)
        chain.append(pipe)
        if len(inputs) > 1:
            raise ResumeError(
                f"{stage_name(pipe)} reads {len(inputs)} DataPipes: wdspipes resumes pipelines "
                "that are a single chain of stages"
            )
        graph = inputs
    chain.reverse()
    return chain


def _reader_index(chain: list[IterDataPipe[Any]]) -> int:
    from wdspipes.io.opener import ShardOpener

    openers = [index for index, pipe in enumerate(chain) if isinstance(pipe, ShardOpener)]
    if len(openers) != 1:
        raise ResumeError(
            "resuming needs exactly one shard reader (open_shards) in the pipeline, found "
            f"{len(openers)}"
        )
    return openers[0]


def sample_source_of(pipe: IterDataPipe[Any]) -> Any:
    """The reader whose samples reach ``pipe`` one for one (each item one sample, or none);
    the name of the stage in between that breaks that; None where no reader is upstream
    (``pipe`` sees shard URLs)."""
    from wdspipes.datapipe import StageDataPipe
    from wdspipes.io.opener import ShardOpener
    from wdspipes.positions import SampleReader

    chain = chain_of(pipe)[:-1]
    if not any(isinstance(stage, ShardOpener) for stage in chain):
        return None
    for stage in reversed(chain):
        if isinstance(stage, SampleReader):
            return stage
        if not (isinstance(stage, StageDataPipe) and stage.keeps_refs) and not isinstance(
            stage, (Mapper, Filter)
        ):
            return stage_name(stage)
    return None


def _check_reader(chain: list[IterDataPipe[Any]], reader: int) -> None:
    from wdspipes.grouping import SampleGrouper
    from wdspipes.streams import StreamLoader
    from wdspipes.tar import TarLoader

    after = [type(pipe) for pipe in chain[reader + 1 : reader + 3]]
    if after[:1] and issubclass(after[0], StreamLoader):
        return
    if after != [TarLoader, SampleGrouper]:
        at = reader + 1 + (after[:1] == [TarLoader])
        found = stage_name(chain[at]) if at < len(chain) else "the end of the pipeline"
        raise ResumeError(
            f"{found} cannot save its position: resuming needs the reader open_shards -> "
            "load_tar -> group_samples (as WebDataset and tarfile_to_samples build it), or "
            "open_shards -> load_cbor or load_msgpack; bare tar members cannot resume"
        )


def pipeline_state(sink: IterDataPipe[Any]) -> dict[str, Any]:
    """The state of the pipeline ending in ``sink``: what ``sink.state_dict()`` returns.

    Raises:
        ResumeError: a stage cannot save its state; the message names it.
    """
    chain = chain_of(sink)
    reader = _reader_index(chain)
    _check_reader(chain, reader)
    states = (_stage_state(pipe, index < reader) for index, pipe in enumerate(chain))
    return {"format": FORMAT, "stages": dict(zip(_names(chain), states, strict=True))}


def _names(chain: list[IterDataPipe[Any]]) -> list[str]:
    """The keys of a state's stages: position and class, so that a state fits one pipeline."""
    return [f"{index}:{type(pipe).__name__}" for index, pipe in enumerate(chain)]


def _stage_state(pipe: IterDataPipe[Any], before_reader: bool) -> Any:
    saver = getattr(pipe, "resume_state", None)
    if saver is not None:
        return saver()
    if isinstance(pipe, ShardingFilterIterDataPipe):
        return {"instances": [pipe.num_of_instances, pipe.instance_id]}
    if isinstance(pipe, _TORCH_PASS) or (before_reader and isinstance(pipe, Shuffler)):
        return None  # Shuffler: its seed is in the reader's state
    if isinstance(pipe, Shuffler):
        raise ResumeError(
            f"{stage_name(pipe)} cannot save the samples in its buffer: use buffer_shuffle "
            "(wdspipes.shuffle in DataPipeline) for samples, which saves where they are"
        )
    raise ResumeError(
        f"{stage_name(pipe)} cannot save its position: it is not a wdspipes stage, nor a torch "
        "stage known to hold nothing between items (IterableWrapper, map, filter, "
        "sharding_filter)"
    )


def restore_pipeline(sink: IterDataPipe[Any], state: dict[str, Any]) -> None:
    """Make the next iteration of ``sink`` go on from ``state`` (see :func:`pipeline_state`).

    Raises:
        ResumeError: the state is not one of this pipeline's (other stages, another format),
            or was saved with the shards split among another number of readers.
    """
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ResumeError(f"not a wdspipes pipeline state (format {found!r}, expected {FORMAT!r})")
    chain = chain_of(sink)
    _reader_index(chain)
    names = _names(chain)
    saved = list(state["stages"])
    if names != saved:
        raise ResumeError(
            "the state was saved from another pipeline: its stages are "
            f"{_plain(saved)}, this pipeline's are {_plain(names)}"
        )
    for pipe, name in zip(chain, names, strict=True):
        _restore_stage(pipe, state["stages"][name])
    for pipe in chain:
        linker = getattr(pipe, "resume_link", None)
        if linker is not None:
            linker()


def _plain(names: list[str]) -> str:
    return " -> ".join(name.partition(":")[2] for name in names)


def _restore_stage(pipe: IterDataPipe[Any], state: Any) -> None:
    loader = getattr(pipe, "resume_from", None)
    if loader is not None:
        loader(state)
    elif isinstance(pipe, ShardingFilterIterDataPipe):
        saved = tuple(state["instances"])
        current = (pipe.num_of_instances, pipe.instance_id)
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


def mark_shard_stages(opener: ShardOpener, seeds: dict[str, int] | None) -> dict[str, int]:
    """Begin a reader's epoch: the random stages before ``opener`` start remembering the seed
    materials they hand out (see :meth:`wdspipes.seeds.Seeding.mark`), and torch's
    ``Shuffler`` stages there get a seed now (``seeds``' when restoring), so that it can be
    saved. Returns the Shuffler seeds, by stage position."""
    import torch

    chosen: dict[str, int] = {}
    for index, pipe in enumerate(chain_of(opener)[:-1]):
        seeding = getattr(pipe, "seeding", None)
        if seeding is not None:
            seeding.mark()
        elif isinstance(pipe, Shuffler) and pipe._enabled:
            key = str(index)
            if seeds is not None and key in seeds:
                pipe._seed = seeds[key]
            elif pipe._seed is None:  # as Shuffler.reset would draw it
                pipe._seed = int(torch.empty((), dtype=torch.int64).random_().item())
            chosen[key] = pipe._seed
    return chosen


_mended = False


def mend_stateful_dataloader() -> None:
    """Make torchdata's ``StatefulDataLoader.load_state_dict`` ready for wdspipes pipelines.

    For a pipeline with a wdspipes stage at its end, loading a state:

    - refuses, naming both counts, a state saved with another number of workers (torchdata
      would fail later with a bare assertion or a missing key);
    - primes the main process's copy of the pipeline with the epoch numbers of the state, so
      that the epochs after the restored one are numbered (and so shuffled) as in the run
      that saved it. Without workers the loader restores the pipeline itself; with persistent
      workers the restored workers go on; but workers started afresh for each epoch are
      copies of the main process's pipeline, which never sees the state.

    Other datasets are left to torchdata as they were. Applied once, when wdspipes is imported.
    """
    global _mended
    if _mended:
        return
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:  # pragma: no cover - torchdata < 0.8
        return
    from torch.utils.data.datapipes.datapipe import _IterDataPipeSerializationWrapper

    original = StatefulDataLoader.load_state_dict

    @functools.wraps(original)
    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        from wdspipes.datapipe import StageDataPipe

        pipe = getattr(self.dataset, "_datapipe", self.dataset)
        if isinstance(pipe, StageDataPipe) and state_dict:
            pipeline = _check_workers(self, state_dict)
            if pipeline is not None:
                _prime(pipe, pipeline)
        original(self, state_dict)

    StatefulDataLoader.load_state_dict = load_state_dict
    # DataLoader wraps a DataPipe for pickling, and the wrapper hides its methods: it has
    # state_dict and load_state_dict where the DataPipe is a wdspipes stage, and only there.
    for name in ("state_dict", "load_state_dict"):
        setattr(_IterDataPipeSerializationWrapper, name, _delegated(name))
    _mended = True


def _delegated(name: str) -> property:
    def get(wrapper: Any) -> Any:
        from wdspipes.datapipe import StageDataPipe

        pipe = wrapper._datapipe
        if isinstance(pipe, StageDataPipe):
            return getattr(pipe, name)
        raise AttributeError(name)

    return property(get)


def _check_workers(loader: Any, state: dict[str, Any]) -> dict[str, Any] | None:
    """Refuse a loader state of another worker count; return one worker's pipeline state."""
    if "_snapshot" in state:
        snapshot = state["_snapshot"]
        saved = snapshot["_main_snapshot"]["_num_workers"]
        workers = snapshot.get("_worker_snapshots", {})
        first = workers.get("worker_0") or {}
        pipeline = first.get("dataset_state")
    else:
        saved = 0
        pipeline = state.get("dataset_state")
    if saved != loader.num_workers:
        raise ResumeError(
            f"the state was saved by a StatefulDataLoader with {saved} workers, and this one has "
            f"{loader.num_workers}: wdspipes resumes only with the same number of workers, "
            "since each worker reads its own shards. Keep the count, or start the epoch afresh "
            "without the state."
        )
    return pipeline if isinstance(pipeline, dict) else None


def _prime(sink: IterDataPipe[Any], state: dict[str, Any]) -> None:
    if state.get("format") != FORMAT:
        return  # load_state_dict will say what is wrong
    try:
        chain = chain_of(sink)
    except ResumeError:
        return
    names = _names(chain)
    if names != list(state["stages"]):
        return
    for pipe, name in zip(chain, names, strict=True):
        seeding = getattr(pipe, "seeding", None)
        saved = state["stages"][name]
        if seeding is not None and isinstance(saved, dict) and "seeding" in saved:
            seeding.prime(saved["seeding"])
