"""The state protocol: how each stage saves and takes back its own part of a pipeline's state.

A pipeline's state (see :mod:`wdspipes.core.resume`) holds one part per stage, and each stage saves
and restores its part itself: the walker that assembles them calls the methods below and knows
no concrete stage. Every wdspipes stage inherits the protocol, with its safe defaults, from
:class:`Resumable`; torch's own stages follow it through one adapter table
(:mod:`wdspipes.core.torch_stages`).

A pipeline resumes around one stage that keeps the place of what it reads, its *reader*
(``group_samples``, ``load_cbor``, ``load_msgpack``: :attr:`Resumable.replays_source`):

- the reader and the stages after it *resume*: restored, they go on from where they were
  (:meth:`Resumable.resume_state`);
- the stages before it are *replayed*: restored, they run their epoch again from its start and
  give the same items again (the same shard URLs), and the reader's shard opener skips those
  read already (:meth:`Resumable.replay_state`).

A stage declares what it can do; a stage that has declared nothing is refused, never guessed:

>>> from torch.utils.data import IterDataPipe
>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> class Twice(Resumable, IterDataPipe):  # yields each item twice, says nothing
...     def __init__(self, source_datapipe):
...         self.source_datapipe = source_datapipe
...     def __iter__(self):
...         for item in self.source_datapipe:
...             yield from (item, item)
>>> Twice(IterableWrapper([1])).resume_state()
Traceback (most recent call last):
...
wdspipes.errors.ResumeError: Twice has not declared how it resumes: ...

Stages that need to know about each other are linked explicitly, when an epoch begins: a
reader tells the stages before it that it begins an epoch (:meth:`Resumable.begin_replay`,
through :func:`wdspipes.core.resume.begin_replay`), and a sample buffer after a reader takes the
reader's :class:`SamplePlaces` (:meth:`Resumable.sample_places`, through
:func:`wdspipes.core.resume.sample_places_of`). docs/guide/writing-a-stage.md shows a new stage
that follows the protocol.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch.utils.data import IterDataPipe

from wdspipes.errors import ResumeError

__all__ = ["Place", "Resumable", "SamplePlaces", "reader_names", "stage_name"]

Place = tuple[int, int]
"""Where a sample lives: its shard's number among those its reader opened this epoch (from 1)
and the byte offset where it starts."""

_GUIDE = "see docs/guide/writing-a-stage.md"


def stage_name(datapipe: object) -> str:
    """A stage's class (or the class given) and, where it has one, its functional name.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> stage_name(IterableWrapper([]).shuffle()), stage_name(IterableWrapper([]))
    ('ShufflerIterDataPipe (shuffle)', 'IterableWrapperIterDataPipe')
    """
    cls = datapipe if isinstance(datapipe, type) else type(datapipe)
    for name, registered in IterDataPipe.functions.items():
        # ours carry their class; torch's are partials of a wrapper taking the class first
        # (under the names torch owns, wrapped: see wdspipes.samples.torch_names)
        function = getattr(registered, "_wds_theirs", registered)
        built = getattr(function, "_wds_stage", None) or next(
            iter(getattr(function, "args", ())), None
        )
        if built is cls:
            return f"{cls.__name__} ({name})"
    return cls.__name__


def reader_names() -> list[str]:
    """The functional names of the registered readers (:attr:`Resumable.replays_source`)."""
    return sorted(
        name
        for name, function in IterDataPipe.functions.items()
        if getattr(getattr(function, "_wds_stage", None), "replays_source", False)
    )


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


class Resumable:
    """The state protocol of a stage, and its defaults (see the module).

    With the defaults, a stage that declares nothing cannot be saved: :meth:`resume_state` and
    :meth:`replay_state` raise :class:`~wdspipes.errors.ResumeError` naming it. A stage whose
    every item out is made of one item in, holding nothing between items, sets
    :attr:`one_to_one`; any other implements the methods its place in a pipeline needs.
    """

    one_to_one: ClassVar[bool] = False
    """Declares that each item the stage yields is made of one item it read (changed or not)
    and of nothing that changes within an epoch, or that it drops items by such a rule, and
    that it holds nothing between items. Such a stage needs no state of its own (a random one
    keeps its epoch's seed material: see ``decode``), and a sample buffer after it can tell
    where each of its samples lives and have it made again on restore."""

    replays_source: ClassVar[bool] = False
    """Declares that the stage is a reader: it keeps the place of the items it reads, and,
    restored, has its source run again from the start of the epoch and skips to that place.
    A pipeline that resumes has exactly one."""

    holds_sources: ClassVar[bool] = False
    """Declares that the stage reads several pipelines, each with its own reader, and that its
    part holds their whole states (as ``interleave`` and ``interleave_randomly`` do, through
    :func:`wdspipes.core.resume.pipeline_state`): the walker stops at it, and it and the stages
    after it resume, as a reader and the stages after it do."""

    def stage_label(self) -> str:
        """The name that errors give the stage (see :func:`stage_name`)."""
        return stage_name(self)

    def upstream(self) -> tuple[IterDataPipe[Any], ...]:
        """The DataPipes this stage reads, through which the walker reaches their parts: its
        ``source_datapipe`` by default, none for a source. A stage that reads others names
        them all (they are the ones torch's graph walk finds in its attributes)."""
        source = getattr(self, "source_datapipe", None)
        return (source,) if isinstance(source, IterDataPipe) else ()

    def resume_state(self) -> Any:
        """This stage's part of the state, where it is the reader or comes after it: plain
        data with which :meth:`resume_from` makes the next iteration go on from here.

        Raises:
            ResumeError: the stage cannot save where it is; the message names it.
        """
        if self.one_to_one:
            return None
        raise ResumeError(
            f"{self.stage_label()} has not declared how it resumes: a stage that makes each "
            "item it yields of one item it reads alone (or drops items), holding nothing "
            "between items, sets one_to_one = True; any other implements resume_state and "
            f"resume_from ({_GUIDE})"
        )

    def replay_state(self) -> Any:
        """This stage's part of the state, where it comes before the reader: plain data with
        which :meth:`resume_from` makes the next iteration give the items of the saved epoch
        again, from its start (for a random stage, the seed materials of the epoch).

        Raises:
            ResumeError: the stage cannot give the same items again; the message names it.
        """
        if self.one_to_one:
            return None
        readers = ", ".join(reader_names())
        raise ResumeError(
            f"{self.stage_label()} comes before the reader ({readers}), which has it run its "
            "epoch again from the start when the pipeline is restored, and it has not declared "
            "how to give the same items again: implement replay_state and resume_from, or put "
            f"it after the reader ({_GUIDE})"
        )

    def resume_from(self, state: Any) -> None:
        """Take back a part that :meth:`resume_state` or :meth:`replay_state` returned, for the
        next iteration. A loader's ``set_seed`` before that iteration begins a new epoch and
        drops it."""

    def begin_replay(self) -> None:
        """The reader after this stage begins an epoch, before this stage's own begins: start
        keeping what :meth:`replay_state` needs (a random stage marks its
        :class:`~wdspipes.core.seeds.Seeding`). Nothing by default."""

    def prime_epoch(self, state: Any) -> None:
        """Take only the epoch numbers of a saved part, not its place: for a copy of the
        pipeline that loaders copy again for each epoch's workers, and that never loads the
        state itself (see :mod:`wdspipes.core.compat`). Nothing by default."""

    def sample_places(self) -> SamplePlaces | None:
        """A reader's :class:`SamplePlaces`, which it keeps up to date; None for other
        stages."""
        return None
