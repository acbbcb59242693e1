"""The engine: opens an epoch of a pipeline, and assembles and restores its state.

A stage keeps its arguments; the engine opens it, each epoch, with an
:class:`~wdspipes.core.context.EpochContext` built once for the epoch and, when the pipeline
goes on from a saved state, the stage's part of it. The pipeline is the chain of stages from its
source to the stage it is iterated from (its *sink*): each is opened on the epoch of the one
before it, source first, so a stage's epoch reads the epoch opened before it. This module holds
the only traversal of the graph there is (:func:`chain_of`, :func:`upstream_of`): what stages
need of each other is handed over in their contexts.

**The state** (``sink.state_dict()``) holds one part per stage, keyed by its position and class,
as each stage's epoch says it (:class:`~wdspipes.core.protocol.Epoch`), with, for a random stage,
what its numbers depend on (``"seeding"``: the loader's seed, the epoch, its repetition and
pass). It is small: positions, not samples.

- the stages before the reader (shard lists, shard shuffles, resamplers, the sharding filter,
  ``open_shards``, ``load_tar``) are not saved item by item: restored, they run their epoch again
  from its start, and ``open_shards`` skips the shards read already;
- the reader (``group_samples``, or ``load_cbor`` and ``load_msgpack``) saves the next sample's
  place: its shard's index in the epoch's shard list and a byte offset in it;
- a sample shuffle buffer saves where each sample it holds lives, and the number of draws its
  generator made; restored, the reader reads those samples again first;
- the other stages save a count or nothing.

The state also says which reader saved it (``"reader"``: the index and count of the sharding
filter's split, ``[0, 1]`` without one) and the epoch. Loaded into the same reader of the same
split, it goes on exactly. The states of all the readers of a job, merged
(:func:`wdspipes.core.elastic.merge_pipeline_states`), load into a pipeline split any other way:
each stage is then given the parts of every reader (:class:`~wdspipes.core.protocol.AllReaders`)
and takes its share, or, if it cannot share out work, is refused by name.

A stage that cannot save its place (a plain function stage, torch's ``shuffle`` after the
reader, ``unbatched`` inside a batch, a stage that has not declared how it resumes, ...) raises
:class:`~wdspipes.errors.ResumeError` naming it when the state is asked for; loading a state
into a pipeline of other stages, or one reader's state into another reader, is refused the same
way.

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

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from wdspipes.core.context import (
    PASS,
    EpochClock,
    EpochContext,
    SamplePlaces,
    ShardLog,
    Split,
)
from wdspipes.core.protocol import (
    AllReaders,
    Resumes,
    StageBase,
    is_torch_datapipe,
    reader_names,
    stage_name,
    unshared,
)
from wdspipes.core.statistics import PipelineStatistics, StageStatistics, timed
from wdspipes.errors import ResumeError

__all__ = [
    "FORMAT",
    "FORMATS",
    "PipelineEpoch",
    "Restoration",
    "Run",
    "chain_of",
    "node_of",
    "run_of",
    "set_torch_adapter",
    "upstream_of",
]

FORMAT = "wdspipes-state/3"
"""The ``format`` entry of every state. (Format 2 kept places by the number of the shard among a
reader's own; format 3 by its index in the epoch's shard list, which every reader shares, so
that states of several readers merge.)"""

FORMATS = {"wdspipes-state/1": "0.1.0.dev0 before mid-epoch resume kept shard indexes"}
"""Formats of states wdspipes no longer loads, and what wrote them."""

PASSING = (Resumes.ITEM_BY_ITEM, Resumes.FROM_START)
"""The kinds of the stages through which the opener's :class:`ShardLog` reaches the reader."""

_ADAPTERS: list[Callable[[Any], StageBase]] = []


def set_torch_adapter(adapt: Callable[[Any], StageBase]) -> None:
    """Install how one of torch's DataPipes takes part in a pipeline (``adapt(pipe)``: see
    :mod:`wdspipes.pipes.torch_stages`, the one table of torch's stages)."""
    _ADAPTERS[:] = [adapt]


class Foreign(StageBase):
    """Something in a pipeline that is neither a wdspipes stage nor one of torch's stages the
    adapter table knows: iterated as it is, as the head of the chain, and refused by name when
    the state is asked for."""

    def __init__(self, pipe: Any, found: tuple[Any, ...] = ()) -> None:
        self.pipe = pipe
        self.found = found

    def upstream(self) -> tuple[Any, ...]:
        return self.found

    def open(self, source: Any, context: EpochContext, part: Any = None) -> Iterable[Any]:
        return self.pipe  # type: ignore[no-any-return]

    def refusal(self) -> ResumeError:
        return ResumeError(f"{stage_name(self.pipe)} is not a stage wdspipes can save")


def node_of(pipe: Any) -> StageBase:
    """What ``pipe`` is to the engine: itself for a wdspipes stage, its adapter for one of
    torch's (:func:`set_torch_adapter`), a :class:`Foreign` for anything else."""
    if isinstance(pipe, StageBase):
        return pipe
    if _ADAPTERS and is_torch_datapipe(pipe):
        return _ADAPTERS[0](pipe)
    return Foreign(pipe)


def _is_opaque(node: StageBase) -> bool:
    """A node the engine iterates whole, without opening what it reads: one it does not know."""
    return isinstance(node, Foreign)


def upstream_of(pipe: Any) -> Iterator[Any]:
    """The stages ``pipe`` reads, directly or not, each once, nearest first, whatever the shape
    of the graph."""
    seen = {id(pipe)}
    waiting = list(node_of(pipe).upstream())
    while waiting:
        stage = waiting.pop(0)
        if id(stage) not in seen:
            seen.add(id(stage))
            yield stage
            waiting.extend(node_of(stage).upstream())


def chain_of(sink: Any) -> list[Any]:
    """The stages from the head of the pipeline to ``sink``, each reading the one before it.
    The head is a source, a mixer (whose sources are pipelines of their own), or something the
    engine does not know, which is iterated whole."""
    chain = [sink]
    node = node_of(sink)
    while True:
        sources = node.upstream()
        if len(sources) != 1 or node.resumes is Resumes.AS_MIXER or _is_opaque(node):
            break
        chain.append(sources[0])
        node = node_of(sources[0])
    chain.reverse()
    return chain


def declares_per_worker(source: object) -> bool:
    """Whether ``source`` (or the object a bound method ``source`` belongs to) declares that it
    gives each worker shards of its own: a true ``per_worker_shards`` attribute.

    >>> class Resampler:
    ...     per_worker_shards = True
    ...     def run(self): ...
    >>> declares_per_worker(Resampler()), declares_per_worker(Resampler().run)
    (True, True)
    >>> declares_per_worker(["a.tar"])
    False
    """
    owner = getattr(source, "__self__", None)
    return any(getattr(obj, "per_worker_shards", False) is True for obj in (source, owner))


class Layout:
    """What the engine knows of a pipeline before any epoch: its chain of stages (``pipes``,
    and ``nodes``, what each is to the engine), their keys in the state, and for each stage the
    split before it, whether a stage before it gives shards per worker, and which links it is
    handed: the reader's sample places (or why not), the opener's shard log."""

    def __init__(self, sink: Any) -> None:
        pipes = self.pipes = chain_of(sink)
        nodes = self.nodes = [node_of(pipe) for pipe in pipes]
        self.keys = [f"{index}:{type(pipe).__name__}" for index, pipe in enumerate(pipes)]
        kinds = [node.resumes for node in nodes]
        self.reader = next(
            (index for index, kind in enumerate(kinds) if kind is Resumes.AS_READER), None
        )
        split, per_worker = None, False
        for stage in upstream_of(pipes[0]):  # beyond the head: a mixer's sources, say
            per_worker = per_worker or declares_per_worker(stage)
            split = split or node_of(stage).split()
        self.splits: list[Split | None] = []
        self.per_worker: list[bool] = []
        self.reads_split = [False] * len(nodes)
        for index, (pipe, node) in enumerate(zip(pipes, nodes, strict=True)):
            self.splits.append(split)
            self.per_worker.append(per_worker)
            made = node.split()
            if made is not None:
                split = made
                if index + 1 < len(nodes):
                    self.reads_split[index + 1] = True
            per_worker = per_worker or declares_per_worker(pipe)
        self.sink_split = self.splits[-1]
        self._refusal: ResumeError | bool | None = False  # not checked yet (see check)
        # the opener's log reaches the stages after it through those that pass shards on
        self.logged = [
            all(kind in PASSING for kind in kinds[:index]) for index in range(len(kinds))
        ]
        # the reader's places reach a buffer through stages that make items one for one, or
        # say where each item they yield lives
        self.tracked = [False] * len(nodes)
        self.untracked: list[str | None] = [None] * len(nodes)
        blocker = stage_name(pipes[0]) if kinds[0] is Resumes.AS_MIXER else None
        for index in range(1, len(nodes)):
            if self.reader is not None and index - 1 >= self.reader:
                before = nodes[index - 1]
                keeps = before.resumes is Resumes.ITEM_BY_ITEM or before.keeps_places
                if index - 1 > self.reader and not keeps:
                    blocker = blocker or stage_name(pipes[index - 1])
                self.tracked[index] = blocker is None
                self.untracked[index] = blocker
            elif self.reader is None:
                self.untracked[index] = blocker

    @property
    def layout(self) -> tuple[int, int]:
        """``(readers, reader)``: how the sharding filter before the sink splits its shards, as
        the loader set it up; ``(1, 0)`` without one."""
        split = self.sink_split
        return (1, 0) if split is None else (split.readers, split.reader)

    def check(self) -> None:
        """The refusals of the pipeline's shape, which come before any stage's own: a stage the
        engine does not know at its head, no reader or several, a stage before the reader that
        cannot run its epoch again (found once: a loader asks for the state at every item)."""
        refusal = self._refusal
        if refusal is False:
            try:
                self._check()
                refusal = None
            except ResumeError as exn:
                refusal = exn
            self._refusal = refusal
        if isinstance(refusal, ResumeError):
            raise type(refusal)(*refusal.args)  # anew: a traceback of its own each time

    def _check(self) -> None:
        pipes, nodes = self.pipes, self.nodes
        head = nodes[0]
        if _is_opaque(head) and (len(nodes) > 1 or head.upstream()):
            raise head.refusal()
        readers = [
            index
            for index, node in enumerate(nodes)
            if node.resumes in (Resumes.AS_READER, Resumes.AS_MIXER)
        ]
        known = ", ".join(reader_names())
        if not readers:
            if _is_opaque(head):
                raise head.refusal()
            raise ResumeError(
                f"{stage_name(pipes[-1])}, at the end of the pipeline, cannot resume: no "
                "stage from the source to it keeps the place of what it reads, so nothing would "
                f"skip what was read before; resuming needs a reader ({known}: group_samples "
                "after open_shards -> load_tar, as WebDataset and tarfile_to_samples build it; "
                "bare tar members cannot resume)"
            )
        if len(readers) > 1:
            found = ", ".join(stage_name(pipes[index]) for index in readers)
            raise ResumeError(f"resuming needs exactly one reader ({known}), found {found}")
        for pipe, node in zip(pipes[: readers[0]], nodes[: readers[0]], strict=True):
            if node.resumes not in PASSING:
                if _is_opaque(node):
                    raise node.refusal()
                raise ResumeError(
                    f"{stage_name(pipe)} comes before the reader ({known}), which has it run "
                    "its epoch again from the start when the pipeline is restored, and it has "
                    "not declared that it gives the same items again: declare resumes = "
                    "Resumes.FROM_START (see docs/guide/writing-a-stage.md), or put it after "
                    "the reader"
                )


def _short_name(pipe: Any) -> str:
    """A stage's functional name (its class's where it has none), as statistics name it."""
    name = stage_name(pipe)
    return name[name.index("(") + 1 : -1] if name.endswith(")") else name


def _position(key: str) -> int:
    """The position of a stage's key, ``"<position>:<class>"``, in its pipeline (-1 for a key
    of another form, which then matches no stage)."""
    position = key.partition(":")[0]
    return int(position) if position.isdigit() else -1


def _plain(keys: list[str]) -> str:
    return " -> ".join(key.partition(":")[2] for key in keys)


class Restoration:
    """A state, checked against the pipeline it was loaded into, waiting for the pipeline's
    next epoch (see :meth:`Run.load`): each stage's part (or the parts of every reader of a job
    split another way), and what its random numbers depend on."""

    def __init__(self, layout: Layout, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ResumeError(_not_a_state(found))
        layout.check()
        keys = layout.keys
        stages = state["stages"]
        # by position: a loader may keep the parts in another order (StatefulDataLoader's
        # increments put the parts that changed last)
        saved = keys if stages is None else sorted(stages, key=_position)
        if keys != saved:
            raise ResumeError(
                "the state was saved from another pipeline: its stages are "
                f"{_plain(saved)}, this pipeline's are {_plain(keys)}"
            )
        readers, reader = layout.layout
        self.state = state
        self.epoch: int = state["epoch"] or 0
        self.parts: list[Any]
        if "readers" in state:  # merged
            starting = len(state["starting"])
            self.parts = [
                AllReaders([] if stages is None else stages[key], starting, state["epoch"])
                for key in keys
            ]
        elif tuple(state["reader"]) == (reader, readers):
            self.parts = [stages[key] for key in keys]
        elif state["reader"][1] == 1:  # a job's only reader: its state is the whole job's
            self.parts = [AllReaders([stages[key]], 0, state["epoch"]) for key in keys]
        else:
            saved_reader, saved_readers = state["reader"]
            raise ResumeError(
                f"the state is reader {saved_reader}'s of a job whose shards were split among "
                f"{saved_readers} readers (workers times ranks), and this pipeline is reader "
                f"{reader} of {readers}: give each reader its own state back, or the states of "
                f"all {saved_readers} readers merged by wdspipes.merge_states to every reader of "
                "a new split"
            )
        self.seedings: list[dict[str, Any] | None] = []
        self.owns: list[Any] = []
        for pipe, node, part, split in zip(
            layout.pipes, layout.nodes, self.parts, layout.splits, strict=True
        ):
            seeding, own = _taken_apart(part, split is None)
            if isinstance(own, AllReaders) and not node.shares:
                if any(each is not None for each in own.parts):
                    raise unshared(pipe)
                own = None
            self.seedings.append(seeding)
            self.owns.append(own)
        self.seeded: bool = state.get("seeded", False) or any(
            seeding is not None and seeding.get("loader_seed") is not None
            for seeding in self.seedings
        )


def _not_a_state(found: Any) -> str:
    known = FORMATS.get(found) if isinstance(found, str) else None
    if known is not None:
        return (
            f"the state's format is {found!r}, written by wdspipes {known}, which this version "
            f"does not load (it loads {FORMAT!r}): start the epoch afresh without the state, or "
            "resume with the version that saved it"
        )
    return f"not a wdspipes pipeline state (format {found!r}, expected {FORMAT!r})"


def _taken_apart(part: Any, before_split: bool) -> tuple[dict[str, Any] | None, Any]:
    """A stage's saved part as the seeding of its random numbers and its own part; for the
    parts of every reader, one seeding (see :func:`_readers_seeding`) and its own parts."""
    if isinstance(part, AllReaders):
        seedings = [
            each["seeding"] for each in part.parts if isinstance(each, dict) and "seeding" in each
        ]
        owns = [_own(each) for each in part.parts]
        seeding = _readers_seeding(seedings, part, before_split) if seedings else None
        return seeding, AllReaders(owns, part.starting, part.epoch)
    if isinstance(part, dict) and "seeding" in part:
        return part["seeding"], _own(part)
    return None, part


def _own(part: Any) -> Any:
    if not isinstance(part, dict) or "seeding" not in part:
        return part
    own = {key: value for key, value in part.items() if key != "seeding"}
    return own or None


def _readers_seeding(
    seedings: list[dict[str, Any]], states: AllReaders, before_split: bool
) -> dict[str, Any]:
    """The seeding a stage takes from every reader's of a job split another way: before the
    split, the one they share (their shard orders must agree); after it, their epoch and
    repetition alone, drawn afresh with this reader's own stream (its loader seed, ``None``,
    is the one given now).

    Raises:
        ResumeError: the readers were in different epochs or repetitions, or had other seeds
            before the split.
    """
    epochs = {seeding["epoch"] for seeding in seedings}
    repeats = {seeding["at"][0] for seeding in seedings if seeding["at"] is not None}
    if len(epochs) > 1 or len(repeats) > 1:
        raise ResumeError(
            "the readers' states are of different epochs or repetitions: merge the states of one "
            "job, saved at one time"
        )
    if before_split:
        if len({seeding["loader_seed"] for seeding in seedings}) > 1:
            raise ResumeError(
                "the readers' states have different seeds before the split (states of "
                "different jobs?)"
            )
        begun = [seeding for seeding in seedings if seeding["at"] is not None]
        return dict((begun or seedings)[0])
    epoch = epochs.pop() if epochs else states.epoch
    at = [repeats.pop(), 0] if repeats else None
    return {"loader_seed": None, "epoch": epoch, "at": at}


class PipelineEpoch:
    """One epoch of a pipeline: its stages opened, each with its context, source first.

    Iterate :meth:`items` for the epoch's items; :meth:`state` says the pipeline's state as of
    the last item delivered. A stage that reads its source again within the epoch
    (``with_epoch``, ``repeat_epochs``) has it opened anew through its context's ``reopen``;
    a mixer opens each of its sources, a pipeline of its own, through :class:`SourceOpener`.
    """

    def __init__(
        self,
        sink: Any,
        clock: EpochClock,
        restoration: Restoration | None = None,
        epoch: int | None = None,
        path: str = "",
        layout: Layout | None = None,
        stats: PipelineStatistics | None = None,
    ) -> None:
        self.layout = layout or Layout(sink)
        self.clock = clock
        self.path = path
        self.stats = stats
        self.records: list[StageStatistics | None] = [None] * len(self.layout.nodes)
        nodes = self.layout.nodes
        self.paths = [f"{path}{index}" for index in range(len(nodes))]
        self.started = False
        if restoration is not None:
            self.epoch = restoration.epoch
            if not path:  # the pipeline's own clock: a mixer's sources share the mixer's
                clock.restored(self.epoch, restoration.seeded, {})
            self.started = any(
                seeding is not None and seeding.get("at") is not None
                for seeding in restoration.seedings
            )
        else:
            self.epoch = clock.begin() if epoch is None else epoch
        self.contexts: list[EpochContext] = [EpochContext()] * len(nodes)
        self.epochs: list[Any] = [None] * len(nodes)
        self.opened = self._open(len(nodes), None, restoration)
        self._items: Iterator[Any] | None = None

    def _open(self, upto: int, again: str | None, restoration: Restoration | None) -> Any:
        """Open the stages before position ``upto`` (all of them: the pipeline), source first:
        afresh, as another repetition or pass (``again``), or from ``restoration``. Returns the
        epoch of the last one opened."""
        layout, clock = self.layout, self.clock
        places, log = SamplePlaces(), ShardLog()
        opened: Any = None
        for index in range(upto):
            pipe, node, path = layout.pipes[index], layout.nodes[index], self.paths[index]
            own: Any = None
            loader_seed = getattr(pipe, "_loader_seed", None)
            if restoration is not None:
                own, seeding = restoration.owns[index], restoration.seedings[index]
                at = None if seeding is None else seeding.get("at")
                repeat, passes = clock.runs[path] = (at[0], at[1]) if at else (0, 0)
                if seeding is not None and seeding.get("loader_seed") is not None:
                    loader_seed = seeding["loader_seed"]
                    if isinstance(pipe, StageBase):  # the loader's seed of the epoch restored
                        pipe._loader_seed = loader_seed  # type: ignore[attr-defined]
            else:
                repeat, passes = clock.opened(path, again)
            context = EpochContext(
                epoch=self.epoch,
                repeat=repeat,
                passes=passes,
                split=layout.splits[index],
                loader_seed=loader_seed,
                places=places if layout.tracked[index] or index == layout.reader else None,
                untracked=layout.untracked[index],
                shards=log if layout.logged[index] else None,
                per_worker=layout.per_worker[index],
                reads_split=layout.reads_split[index],
                reopen=self._reopener(index) if index else None,
            )
            if node.reads_ahead:  # its source in another thread: the stages after it their own
                context.places_after = SamplePlaces()
                context.parts_before = self._parts_before(index)
            if node.resumes is Resumes.AS_MIXER:
                source: Any = [
                    SourceOpener(each, self, f"{path}/{number}/")
                    for number, each in enumerate(pipe.source_datapipes)
                ]
            else:
                source = opened if index else node.head_source()
            opened = node.open(source, context, own)
            self.contexts[index] = context
            self.epochs[index] = opened
            if context.places_after is not None:
                places = context.places_after
            record = self._record(index, opened)
            if record is not None:
                context.stats = record  # read by the epoch as it begins
                opened = timed(opened, record)
        return opened

    def _record(self, index: int, opened: Any) -> StageStatistics | None:
        """Where the figures of the stage at ``index`` are kept, when the pipeline is measured:
        one record a stage, whatever its reopenings; None for a stage whose epoch ``opened``
        the one after reads through its own methods, whose time then counts in that stage's
        (named with it)."""
        if self.stats is None or getattr(opened, "read_by_next", False):
            return None
        record = self.records[index]
        if record is None:
            names = [_short_name(self.layout.pipes[index])]
            at = index
            while at > 0 and getattr(self.epochs[at - 1], "read_by_next", False):
                at -= 1
                names.insert(0, _short_name(self.layout.pipes[at]))
            record = self.records[index] = self.stats.stage(" + ".join(names))
            record.ahead = self.layout.nodes[index].reads_ahead
        return record

    def _parts_before(self, index: int) -> Callable[[], list[Any]]:
        """The parts of the stages before position ``index``, as of now."""
        layout = self.layout

        def parts() -> list[Any]:
            return [
                self._part(layout.pipes[at], layout.nodes[at], self.epochs[at], self.contexts[at])
                for at in range(index)
            ]

        return parts

    def _reopener(self, index: int) -> Callable[[str], Any]:
        def reopen(kind: str = PASS) -> Any:
            return self._open(index, kind, None)

        return reopen

    def items(self) -> Iterator[Any]:
        """The epoch's items: the sink's, taken once; the pipeline's iterators close when they
        end, and when this one is closed or dropped early."""
        if self.stats is not None:
            self.stats.began = time.perf_counter()
        try:
            self.started = True
            yield from self.opened
        finally:
            self.close()
            if self.stats is not None:
                self.stats.ended = time.perf_counter()

    def close(self) -> None:
        """End the epoch's iterators that hold resources (open shards, threads)."""
        for opened in reversed(self.epochs):
            close = getattr(opened, "close", None)
            if close is not None:
                close()

    def state(self) -> dict[str, Any]:
        """The pipeline's state as of the last item it delivered (see the module).

        Raises:
            ResumeError: a stage cannot save its place; the message names it.
        """
        self.layout.check()
        layout = self.layout
        parts: list[Any] = []
        for at in reversed(range(len(layout.nodes))):  # the last stage that reads ahead says
            ahead = self.epochs[at].parts_before() if layout.nodes[at].reads_ahead else None
            if ahead is not None:  # those before it, as of what it yielded last
                parts = list(ahead)
                break
        for at in range(len(parts), len(layout.nodes)):
            opened, context = self.epochs[at], self.contexts[at]
            parts.append(self._part(layout.pipes[at], layout.nodes[at], opened, context))
        stages = dict(zip(layout.keys, parts, strict=True))
        readers, reader = self.layout.layout
        return {
            "format": FORMAT,
            "epoch": self.epoch,
            "seeded": self.clock.seeded,
            "reader": [reader, readers],
            "stages": stages,
        }

    def _part(self, pipe: Any, node: StageBase, opened: Any, context: EpochContext) -> Any:
        own = node.part_of(opened)
        if not context.drew:
            return own
        seeding = {
            "loader_seed": context.loader_seed,
            "epoch": context.epoch,
            "at": [context.repeat, context.passes] if self.started else None,
        }
        if own is None:
            return {"seeding": seeding}
        if not isinstance(own, dict):
            raise ResumeError(f"{stage_name(pipe)}: a random stage's part must be a dict")
        return {"seeding": seeding, **own}


class SourceOpener:
    """How a mixer opens one of its sources, a pipeline of its own, in its epoch: with the
    mixer's clock and epoch, from the source's saved state or afresh."""

    def __init__(self, pipe: Any, mixer: PipelineEpoch, path: str) -> None:
        self.pipe = pipe
        self.mixer = mixer
        self.path = path

    def open(self, state: dict[str, Any] | None = None) -> PipelineEpoch:
        """The source's epoch, going on from ``state`` (a pipeline state) if given.

        Raises:
            ResumeError: the state is not the source's.
        """
        layout = Layout(self.pipe)
        restoration = None if state is None else Restoration(layout, state)
        mixer = self.mixer
        return PipelineEpoch(
            self.pipe, mixer.clock, restoration, mixer.epoch, self.path, layout=layout
        )

    def state(self) -> dict[str, Any]:
        """The state of the source before its epoch begins (it has not been read from yet)."""
        return Run.preview(self.pipe, self.mixer.clock, self.mixer.epoch, self.path)


class Run:
    """What a stage keeps when a pipeline is iterated from it (its *sink*): the pipeline's
    :class:`~wdspipes.core.context.EpochClock`, a state loaded for its next epoch, and its
    epoch under way, whose state ``state_dict()`` says. The clock and a loaded state pickle with
    the stage; the epoch under way does not."""

    __slots__ = ("clock", "epoch", "measured", "pending")

    def __init__(self) -> None:
        self.clock = EpochClock()
        self.pending: Restoration | None = None
        self.epoch: PipelineEpoch | None = None
        self.measured: PipelineStatistics | None = None  # the next epoch's, or the last's

    def __getstate__(self) -> dict[str, Any]:
        measuring = self.measured is not None
        return {"clock": self.clock, "pending": self.pending, "measuring": measuring}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.clock = state["clock"]
        self.pending = state["pending"]
        self.epoch = None
        self.measured = PipelineStatistics() if state.get("measuring") else None

    def statistics(self) -> PipelineStatistics:
        """The statistics of the epoch under way or the last one measured (see
        :mod:`wdspipes.core.statistics`); asked before any, those of the next epoch, which
        the pipeline measures from then on."""
        if self.measured is None:
            self.measured = PipelineStatistics()
        return self.measured

    def items(self, sink: Any) -> Iterator[Any]:
        """The items of the pipeline's next epoch, opened as the first is asked for."""
        yield from self.open(sink).items()

    def open(self, sink: Any) -> PipelineEpoch:
        """Open the pipeline's next epoch: from the state loaded, if any."""
        pending, self.pending = self.pending, None
        measured = self.measured
        if measured is not None and measured.began is not None:  # that one is an old epoch's
            measured = self.measured = PipelineStatistics()
        epoch = self.epoch = PipelineEpoch(sink, self.clock, pending, stats=measured)
        return epoch

    def load(self, sink: Any, state: dict[str, Any]) -> None:
        """Check ``state`` against the pipeline ending in ``sink`` and keep it for the next
        epoch: its stages are opened with their parts, and let go, so that a part a stage
        refuses is refused now."""
        layout = Layout(sink)
        restoration = Restoration(layout, state)
        PipelineEpoch(sink, EpochClock(), restoration, layout=layout).close()
        self.pending = restoration

    def state(self, sink: Any) -> dict[str, Any]:
        """The state of the pipeline: of its epoch under way (or the last one, ended); a state
        loaded and not yet gone on from; or, before the first epoch, of its beginning."""
        if self.pending is not None:
            Layout(sink).check()
            return self.pending.state
        if self.epoch is not None:
            return self.epoch.state()
        return self.preview(sink, self.clock, self.clock.upcoming(), "")

    @staticmethod
    def preview(sink: Any, clock: EpochClock, epoch: int, path: str) -> dict[str, Any]:
        """The state of the pipeline ending in ``sink`` as its next epoch (``epoch``) begins,
        asked of its stages opened and let go at once, the clock left as it was."""
        saved = (clock.begun, dict(clock.runs))
        try:
            opened = PipelineEpoch(sink, clock, None, epoch, path)
            try:
                return opened.state()
            finally:
                opened.close()
        finally:
            clock.begun, clock.runs = saved


def run_of(sink: Any, otherwise: Run) -> Run:
    """The :class:`Run` of the pipeline ending in ``sink``: the stage's own where ``sink`` is a
    wdspipes stage, ``otherwise`` (one the caller keeps) where it is not (one of torch's)."""
    find = getattr(sink, "_run", None)
    run = find() if callable(find) and isinstance(sink, StageBase) else None
    return run if isinstance(run, Run) else otherwise
