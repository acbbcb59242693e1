"""The state protocol: how a stage gives its part of a pipeline's state and takes it back.

As a node of torchdata.nodes does, a stage gives its part (:meth:`Resumable.get_state`) and takes
it back for its next iteration (:meth:`Resumable.set_state`); the assembler of the parts
(:mod:`wdspipes.state.checkpoint`) knows no concrete stage. Every wdspipes stage inherits the
protocol and its safe defaults from :class:`Resumable`; torch's own stages follow it through one
adapter table (:mod:`wdspipes.state.torch_stages`).

A pipeline resumes around one stage that keeps the place of what it reads, its *reader*
(``group_samples``, ``load_cbor``, ``load_msgpack``: :attr:`Resumable.reader`). The reader and
the stages after it go on from where they were; the stages before it (shard lists, shard
shuffles, the split, ``open_shards``) run their epoch again from its start, giving the same shard
URLs, and the opener skips those read already. So a stage before the reader must say that its
part makes it *restart* its epoch (:attr:`Resumable.restartable`).

A stage declares what it can do; a stage that has declared nothing is refused, never guessed:

>>> from torch.utils.data import IterDataPipe
>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> class Twice(Resumable, IterDataPipe):  # yields each item twice, says nothing
...     def __init__(self, source_datapipe):
...         self.source_datapipe = source_datapipe
...     def __iter__(self):
...         for item in self.source_datapipe:
...             yield from (item, item)
>>> Twice(IterableWrapper([1])).get_state()
Traceback (most recent call last):
...
wdspipes.errors.ResumeError: Twice has not declared how it resumes: ...

Two links join stages that work together, made as an epoch begins rather than item by item: a
reader tells the stages before it that it begins an epoch (:meth:`Resumable.epoch_begins`), and
a sample buffer after a reader takes the reader's :class:`SamplePlaces`
(:meth:`Resumable.sample_places`). The state of a job whose shards were split among another
number of readers reaches each stage as :class:`AllReaders` (see
:mod:`wdspipes.state.elastic`). docs/guide/writing-a-stage.md shows a new stage that follows
the protocol.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from wdspipes.errors import ResumeError

__all__ = [
    "AllReaders",
    "Place",
    "Resumable",
    "SamplePlaces",
    "functional_names",
    "is_torch_datapipe",
    "name_stage",
    "reader_names",
    "stage_name",
]

Place = tuple[int, int]
"""Where a sample lives: its shard's index in the epoch's list of shards (as the sharding filter
numbers them, from 0, before it splits them) and the byte offset where the sample starts."""

_GUIDE = "see docs/guide/writing-a-stage.md"


_FUNCTIONAL_NAMES: dict[str, type] = {}
_NAME_OF: dict[type, str] = {}


def name_stage(name: str, cls: type) -> None:
    """Record ``cls`` as the wdspipes stage of functional name ``name``, in wdspipes' own
    registry (torch's ``IterDataPipe.functions`` is torch's). A DataPipe front end takes the
    name of the core class it subclasses (see :mod:`wdspipes.pipes.datapipe`).

    Raises:
        RuntimeError: the name is another stage's already.
    """
    known = _FUNCTIONAL_NAMES.setdefault(name, cls)
    if not issubclass(cls, known):
        raise RuntimeError(f"the functional name {name!r} is {known.__qualname__}'s already")
    _NAME_OF[cls] = name


def functional_names() -> dict[str, type]:
    """wdspipes' registry: functional name -> stage class (the core class of a DataPipe front
    end), for the stages loaded so far."""
    return dict(_FUNCTIONAL_NAMES)


def is_torch_datapipe(value: object) -> bool:
    """Whether ``value`` is one of torch's ``IterDataPipe`` s. Asked without importing torch:
    none can exist before ``torch.utils.data`` is loaded.

    >>> is_torch_datapipe([1, 2])
    False
    """
    torch_data = sys.modules.get("torch.utils.data")
    return torch_data is not None and isinstance(value, torch_data.IterDataPipe)


def stage_name(datapipe: object) -> str:
    """A stage's class (or the class given) and, where it has one, its functional name
    (wdspipes' own registry, then torch's where torch is loaded).

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> stage_name(IterableWrapper([]).shuffle()), stage_name(IterableWrapper([]))
    ('ShufflerIterDataPipe (shuffle)', 'IterableWrapperIterDataPipe')
    """
    cls = datapipe if isinstance(datapipe, type) else type(datapipe)
    if cls in _NAME_OF:
        return f"{cls.__name__} ({_NAME_OF[cls]})"
    torch_data = sys.modules.get("torch.utils.data")
    functions = {} if torch_data is None else torch_data.IterDataPipe.functions
    for name, function in functions.items():
        # torch's are partials of a wrapper taking the class first
        if next(iter(getattr(function, "args", ())), None) is cls:
            return f"{cls.__name__} ({name})"
    return cls.__name__


def reader_names() -> list[str]:
    """The functional names of the registered readers (:attr:`Resumable.reader`)."""
    return sorted(name for name, cls in _FUNCTIONAL_NAMES.items() if getattr(cls, "reader", False))


class SamplePlaces:
    """The link between a reader and a sample buffer after it: where each sample lives.

    The reader sets :attr:`last` to the :data:`Place` of each sample before it yields it, so a
    buffer that sees the sample next reads where it lives (a buffer sees it next when every
    stage in between is :attr:`~Resumable.one_to_one`). A buffer restored with samples in it
    puts their places in :attr:`again` before its epoch begins, and the reader yields those
    samples first, read again from their shards. Plain data: it pickles with the reader.
    """

    __slots__ = ("again", "last")

    def __init__(self) -> None:
        self.last: Place = (0, 0)
        self.again: list[Place] = []


class AllReaders:
    """The parts of one stage from every reader of a job (workers times ranks), given to
    :meth:`Resumable.set_state` when the job goes on with its shards split another way.

    ``parts`` holds the part of each reader that had begun the epoch; ``starting`` counts the
    readers that had not (they delivered nothing of it); ``epoch`` is the epoch they were all
    in. The stage takes its own share when its epoch begins, knowing then which reader of how
    many it is (see :mod:`wdspipes.state.elastic`).
    """

    __slots__ = ("epoch", "parts", "starting")

    def __init__(self, parts: list[Any], starting: int = 0, epoch: int | None = None) -> None:
        self.parts = parts
        self.starting = starting
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"AllReaders({len(self.parts)} parts, {self.starting} starting)"


class Resumable:
    """The state protocol of a stage, and its defaults (see the module).

    With the defaults, a stage that declares nothing cannot be saved: :meth:`get_state` raises a
    :class:`~wdspipes.errors.ResumeError` naming it. A stage whose every item out is made of one
    item in, holding nothing between items, sets :attr:`one_to_one`; any other gives its part
    and takes it back.
    """

    one_to_one: ClassVar[bool] = False
    """Declares that each item the stage yields is made of one item it read (changed or not)
    and of nothing that changes within an epoch, or that it drops items by such a rule, and
    that it holds nothing between items. Such a stage needs no state of its own (a random one
    keeps its epoch's numbers: see ``decode``), restarts with its source, and a sample buffer
    after it can tell where each of its samples lives and have it made again on restore."""

    restartable: ClassVar[bool] = False
    """Declares that the stage's part, taken back, makes it give the items of the saved epoch
    again from its start (a random stage keeps what its draws depend on), so that it may come
    before the reader, which has it run its epoch again when the pipeline is restored."""

    reader: ClassVar[bool] = False
    """Declares that the stage is a reader: it keeps the place of the samples it reads, and,
    restored, has the stages before it restart their epoch and goes on from that place. A
    pipeline that resumes has exactly one."""

    holds_sources: ClassVar[bool] = False
    """Declares that the stage reads several pipelines, each with its own reader, and that its
    part holds their whole states (as ``interleave`` and ``interleave_randomly`` do): the assembler
    stops at it, and it and the stages after it resume, as a reader and the stages after it
    do."""

    def upstream(self) -> tuple[Any, ...]:
        """The stages this stage reads, through which the assembler reaches their parts: its
        ``source_datapipe`` by default where that is a stage (wdspipes' or torch's), none for
        a source (or one that reads a plain iterable). A stage that reads others names them
        all (they are the ones torch's graph traversal finds in its attributes)."""
        source = getattr(self, "source_datapipe", None)
        return (source,) if isinstance(source, Resumable) or is_torch_datapipe(source) else ()

    def get_state(self) -> Any:
        """This stage's part of the state: plain data (numbers, strings, lists, dicts, bytes)
        with which :meth:`set_state` makes the next iteration go on from here (or, before the
        reader, give the saved epoch again).

        Raises:
            ResumeError: the stage cannot save where it is; the message names it.
        """
        if self.one_to_one:
            return None
        raise ResumeError(
            f"{stage_name(self)} has not declared how it resumes: a stage that makes each "
            "item it yields of one item it reads alone (or drops items), holding nothing "
            "between items, sets one_to_one = True; any other implements get_state and "
            f"set_state ({_GUIDE})"
        )

    def set_state(self, state: Any) -> None:
        """Take back a part that :meth:`get_state` returned, for the next iteration; or, as
        :class:`AllReaders`, the parts of every reader of a job split another way. A loader's
        ``set_seed`` before that iteration begins a new epoch and drops it.

        Raises:
            ResumeError: the parts of several readers, which this stage cannot share out.
        """
        if isinstance(state, AllReaders) and any(part is not None for part in state.parts):
            raise ResumeError(
                f"{stage_name(self)} cannot resume with the shards split among another number "
                "of readers (workers times ranks): it keeps a place of its own in each reader; "
                "keep the count, or start the epoch afresh without the state"
            )

    def epoch_begins(self) -> None:
        """The reader after this stage begins an epoch, before this stage's own begins: fix
        now what the epoch's items depend on, so that :meth:`get_state` can give it (torch's
        ``shuffle`` draws its seed here). Nothing by default."""

    def sample_places(self) -> SamplePlaces | None:
        """A reader's :class:`SamplePlaces`, which it keeps up to date; None for other
        stages."""
        return None
