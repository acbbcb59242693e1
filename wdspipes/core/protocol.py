"""What a stage declares: how it resumes (:class:`Resumes`), its epochs (:class:`Epoch`), and its
functional name in the one table from which every front end is made (:func:`register`).

A stage keeps only its arguments; each epoch it opens an iterator that holds every position of
the epoch and says its part of the pipeline's state (see :mod:`wdspipes.core.stage`). How that
part brings the stage back is the one thing a stage declares, its :class:`Resumes` kind; a stage
that has declared nothing is refused by name, never guessed:

>>> from wdspipes.core.stage import Stage
>>> class Twice(Stage):  # yields each item twice, says nothing
...     def open(self, source, context, part=None):
...         return (item for each in source for item in (each, each))
>>> stage = Twice([1])
>>> stage.part_of(stage.open([1], None))
Traceback (most recent call last):
...
wdspipes.errors.ResumeError: Twice has not declared how it resumes: ...
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from wdspipes.errors import ResumeError

if TYPE_CHECKING:
    from wdspipes.core.context import EpochContext, Split

__all__ = [
    "AllReaders",
    "Epoch",
    "Resumes",
    "StageBase",
    "front_end_of",
    "functional_name",
    "functional_names",
    "is_torch_datapipe",
    "register",
    "registered",
    "set_front_ends",
    "stage_name",
]

T_co = TypeVar("T_co", covariant=True)
C = TypeVar("C", bound=type)

GUIDE = "see docs/guide/writing-a-stage.md"


class Resumes(enum.Enum):
    """How a stage's part of a pipeline's state brings it back, mid-epoch: the one thing a
    stage declares about resuming (its class attribute ``resumes``).

    A pipeline resumes around one stage that keeps the place of what it reads, its *reader*
    (``group_samples``, ``load_cbor``, ``load_msgpack``). The reader and the stages after it go
    on from where they were; the stages before it (shard lists, shard shuffles, the split,
    ``open_shards``) run their epoch again from its start, giving the same shard URLs, and the
    opener skips those read already.
    """

    ITEM_BY_ITEM = "item by item"
    """Each item it yields is made of one item it read (changed or not) and of nothing that
    changes within the epoch, or it drops items by such a rule, and it holds nothing between
    items (``map_dict``, ``select``, ``decode``): it needs no part of its own, restarts with its
    source, and a sample buffer after it can have its samples made again on restore."""

    FROM_START = "from the start"
    """Before the reader: its part, taken back, makes it give the saved epoch's items again
    from their start (a random stage's part keeps what its draws depend on): ``list_shards``,
    ``resample_shards``, ``open_shards``."""

    AS_READER = "as the reader"
    """The reader: it keeps the place of the samples it reads, and, restored, goes on from that
    place while the stages before it restart. A pipeline that resumes has exactly one."""

    AS_MIXER = "as a mixer"
    """It reads several pipelines, each with its own reader, and its part holds their whole
    states (``interleave``, ``interleave_randomly``): it and the stages after it resume as a
    reader and the stages after it do."""

    FROM_PART = "from its part"
    """It goes on from the part its epoch says (a count: ``islice``, ``with_epoch``; or nothing
    between the batches it yields: ``batched``). A stage whose epoch says its part
    (:meth:`Epoch.part`) and declares nothing else resumes so."""


class Epoch(Generic[T_co]):
    """An epoch of a stage: the iterator its ``open`` returns when it has a position to keep.

    A subclass defines ``__next__`` (an iterator) or ``__iter__`` (a generator of the epoch's
    items, which the engine takes once); it holds every position of the epoch in its own
    attributes and says its part of the pipeline's state in :meth:`part` (plain data: numbers,
    strings, lists, dicts, bytes), from which the stage's ``open`` makes the same epoch go on.
    A stage with no position returns any iterator (a generator) from ``open`` instead.
    """

    def __iter__(self) -> Iterator[T_co]:
        return self  # a subclass that defines __next__

    def __next__(self) -> T_co:
        raise NotImplementedError(f"{type(self).__name__} defines neither __next__ nor __iter__")

    def part(self) -> Any:
        """The stage's part of the pipeline's state, as of the last item it yielded."""
        return None

    read_by_next: ClassVar[bool] = False
    """Whether the stage after it reads its items through the epoch's own methods (``load_tar``'s
    members, which ``group_samples`` takes as plain tuples): measured, its time counts in that
    stage's (see :mod:`wdspipes.core.statistics`)."""

    def parts_before(self) -> list[Any] | None:
        """For a stage that reads its source in another thread (``reads_ahead``): the parts of
        the stages before it as of the last item it yielded; None for others."""
        return None


class AllReaders:
    """The parts of one stage from every reader of a job (workers times ranks), given to the
    stage's ``open`` when the job goes on with its shards split another way.

    ``parts`` holds the part of each reader that had begun the epoch; ``starting`` counts the
    readers that had not (they delivered nothing of it); ``epoch`` is the epoch they were all
    in. A stage that can share out the work left declares ``shares = True`` and takes its own
    share, knowing from its context's split which reader of how many it is (see
    :mod:`wdspipes.core.elastic`); any other is refused, unless every part is empty.
    """

    __slots__ = ("epoch", "parts", "starting")

    def __init__(self, parts: list[Any], starting: int = 0, epoch: int | None = None) -> None:
        self.parts = parts
        self.starting = starting
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"AllReaders({len(self.parts)} parts, {self.starting} starting)"


class StageBase:
    """What the engine (:mod:`wdspipes.core.engine`) asks of a stage: how it resumes, what it
    reads, and to open an epoch. :class:`wdspipes.core.stage.Stage` is its base for stages;
    torch's own stages take part through adapters that follow it too
    (:mod:`wdspipes.pipes.torch_stages`)."""

    resumes: ClassVar[Resumes | None] = None
    """How the stage's part brings it back mid-epoch (see :class:`Resumes`); None: it has not
    said, and a state of a pipeline that holds it is refused, naming it."""

    shares: ClassVar[bool] = False
    """Whether the stage takes its share of the parts of every reader of a job split another
    way (:class:`AllReaders`); one that does not is refused such parts by name, unless they are
    all empty."""

    reads_ahead: ClassVar[bool] = False
    """Whether the stage reads its source in another thread, ahead of the stages after it
    (``prefetch_items``): its epoch then says the parts of the stages before it as of the item
    it yielded last (:meth:`Epoch.parts_before`, from its context's ``parts_before()``, asked
    in the thread that reads them), and the stages after it are handed places of their own,
    which it keeps up to date (its context's ``places_after``)."""

    keeps_places: ClassVar[bool] = False
    """Whether the stage, after the reader, says where each sample it yields lives (its
    context's ``places.last``), holding samples a while (a shuffle buffer): the reader's places
    then reach the stages after it (see :class:`~wdspipes.core.context.SamplePlaces`). A stage
    that resumes item by item keeps them by its nature: it yields each sample as it reads it."""

    def upstream(self) -> tuple[Any, ...]:
        """The stages this one reads (wdspipes' or torch's), through which the engine reaches
        theirs: its ``source_datapipe`` by default, where that is a stage."""
        source = getattr(self, "source_datapipe", None)
        return (source,) if isinstance(source, StageBase) or is_torch_datapipe(source) else ()

    def head_source(self) -> Any:
        """What the stage reads when it is not a stage: a plain iterable (iterated anew each
        epoch), or None."""
        source = getattr(self, "source_datapipe", None)
        return None if isinstance(source, StageBase) or is_torch_datapipe(source) else source

    def open(self, source: Any, context: EpochContext, part: Any = None) -> Any:
        """The stage's epoch: an iterable of its items read from ``source`` (the epoch of the
        stage before it, iterated once), given ``context`` (see
        :class:`~wdspipes.core.context.EpochContext`) and, restored, the part its epoch said
        (or, as :class:`AllReaders`, the parts of every reader of a job split another way)."""
        raise NotImplementedError(f"{type(self).__name__} does not open epochs")

    def split(self) -> Split | None:
        """The split among readers this stage makes (torch's sharding filter does); None."""
        return None

    def part_of(self, opened: Any) -> Any:
        """The stage's part of the state, given the epoch it opened.

        Raises:
            ResumeError: the stage cannot save its place, or has not said how it resumes.
        """
        if isinstance(opened, Epoch) and type(opened).part is not Epoch.part:
            return opened.part()
        if self.resumes is None:
            raise self.refusal()
        return None

    def refusal(self) -> ResumeError:
        """Why a pipeline that holds this stage cannot save its state."""
        return undeclared(self)


# --- the one table of functional names -----------------------------------------------------

_TABLE: dict[str, type] = {}
_NAME_OF: dict[type, str] = {}
_LISTENERS: list[Callable[[str, type], None]] = []
_FRONT_ENDS: list[Callable[[type], type]] = []


def register(name: str) -> Callable[[C], C]:
    """A class decorator: register a stage under its functional name, in the one table from
    which the front ends are made (``source.<name>(...)`` on every DataPipe builds it; see
    :mod:`wdspipes.pipes`). Returns the class.

    Raises:
        RuntimeError: the name is another stage's already, or torch's or torchdata's.
    """

    def registering(cls: C) -> C:
        known = _TABLE.setdefault(name, cls)
        if not issubclass(cls, known):
            raise RuntimeError(f"the functional name {name!r} is {known.__qualname__}'s already")
        _TABLE[name] = cls
        _NAME_OF[cls] = name
        for listener in _LISTENERS:
            listener(name, cls)
        return cls

    return registering


def functional_names() -> dict[str, type]:
    """The table: functional name -> stage class, for the stages loaded so far."""
    return dict(_TABLE)


def registered(listener: Callable[[str, type], None]) -> None:
    """Call ``listener(name, cls)`` for every stage of the table, now and as more register: how
    a front end makes itself from the table."""
    _LISTENERS.append(listener)
    for name, cls in list(_TABLE.items()):
        listener(name, cls)


def set_front_ends(make: Callable[[type], type]) -> None:
    """Install how the DataPipe front end of a stage class is made (``make(cls)``): a stage
    built on a DataPipe is built as its front end (see
    :meth:`wdspipes.core.stage.Stage.__new__`)."""
    _FRONT_ENDS[:] = [make]


def front_end_of(cls: type) -> type:
    """The DataPipe front end of stage class ``cls`` (made once), where one can be made (torch
    is loaded); ``cls`` itself otherwise."""
    return _FRONT_ENDS[0](cls) if _FRONT_ENDS else cls


def functional_name(cls: type) -> str | None:
    """The functional name of stage class ``cls`` (or of the stage class it is the front end
    of), if it has one."""
    return next((_NAME_OF[known] for known in cls.__mro__ if known in _NAME_OF), None)


def is_torch_datapipe(value: object) -> bool:
    """Whether ``value`` is one of torch's DataPipes. Asked without importing torch: none can
    exist before ``torch.utils.data`` is loaded.

    >>> is_torch_datapipe([1, 2])
    False
    """
    torch_data = sys.modules.get("torch.utils.data")
    return torch_data is not None and isinstance(
        value, torch_data.IterDataPipe | torch_data.MapDataPipe
    )


def stage_name(stage: object) -> str:
    """A stage's class (or the class given) and, where it has one, its functional name
    (wdspipes' table, then torch's where torch is loaded).

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> stage_name(IterableWrapper([]).shuffle()), stage_name(IterableWrapper([]))
    ('ShufflerIterDataPipe (shuffle)', 'IterableWrapperIterDataPipe')
    """
    cls = stage if isinstance(stage, type) else type(stage)
    name = functional_name(cls)
    if name is not None:
        return f"{cls.__name__} ({name})"
    torch_data = sys.modules.get("torch.utils.data")
    functions = {} if torch_data is None else torch_data.IterDataPipe.functions
    for name, function in functions.items():
        # torch's are partials of a wrapper taking the class first
        if next(iter(getattr(function, "args", ())), None) is cls:
            return f"{cls.__name__} ({name})"
    return cls.__name__


def reader_names() -> list[str]:
    """The functional names of the registered readers."""
    return sorted(
        name for name, cls in _TABLE.items() if getattr(cls, "resumes", None) is Resumes.AS_READER
    )


def undeclared(stage: object) -> ResumeError:
    """The refusal of a stage that has not declared how it resumes."""
    return ResumeError(
        f"{stage_name(stage)} has not declared how it resumes: a stage that makes each item "
        "it yields of one item it reads alone (or drops items), holding nothing between items, "
        "declares resumes = Resumes.ITEM_BY_ITEM; any other opens an Epoch that says its part "
        f"({GUIDE})"
    )


def unshared(stage: object) -> ResumeError:
    """The refusal of a stage given the parts of several readers, which it cannot share out."""
    return ResumeError(
        f"{stage_name(stage)} cannot resume with the shards split among another number of "
        "readers (workers times ranks): it keeps a place of its own in each reader; keep the "
        "count, or start the epoch afresh without the state"
    )
