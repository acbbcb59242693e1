"""A stage is its arguments; an epoch is an iterator it opens.

A stage (:class:`Stage`) keeps only what it was built with: its source and its arguments, plain
data that pickles and reads again. Each epoch the engine (:mod:`wdspipes.core.engine`) opens it:
``open(source, context, part)`` returns the epoch's iterator, reading ``source`` (the epoch of
the stage before it), told by ``context`` what it needs to know of the epoch and of the rest of
the pipeline (:class:`~wdspipes.core.context.EpochContext`), and going on from ``part`` when the
pipeline is restored. The iterator holds every position of the epoch and says its part
(:class:`~wdspipes.core.protocol.Epoch`); a stage with no position returns a generator. How the
part brings the stage back is the one thing it declares (``resumes``, a
:class:`~wdspipes.core.protocol.Resumes`).

Any stage is also the pipeline that ends in it: iterating it opens an epoch of its whole chain;
``state_dict()`` says where that epoch is, ``load_state_dict()`` makes the next one go on from
there, ``set_epoch(n)`` numbers the next one. A chain of these classes runs without torch (the
``wdspipes`` command reads shards so); built on one of torch's DataPipes, a stage is built as
its DataPipe front end (:attr:`Stage.DataPipe`, made from the class: see :mod:`wdspipes.pipes`).

>>> class Doubled(Stage):
...     resumes = Resumes.ITEM_BY_ITEM  # each item out is made of one item in
...
...     def open(self, source, context, part=None):
...         return (2 * item for item in source)
>>> pipe = Doubled(range(3))
>>> list(pipe), list(pipe)
([0, 2, 4], [0, 2, 4])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from wdspipes.core.arguments import int_at_least
from wdspipes.core.engine import Run
from wdspipes.core.protocol import (
    Epoch,
    Resumes,
    StageBase,
    front_end_of,
    is_torch_datapipe,
)
from wdspipes.core.statistics import PipelineStatistics

__all__ = ["Epoch", "Resumes", "Sample", "Stage"]

T_co = TypeVar("T_co", covariant=True)

Sample = dict[str, Any]
"""A sample: ``__key__``, ``__url__`` and one value per field."""

_NO_SOURCE: Any = object()


class _FrontEnd:
    """``StageClass.DataPipe``: the DataPipe front end of a stage class, made once, where torch
    is loaded (see :mod:`wdspipes.pipes`); the class itself otherwise, and for a front end."""

    def __get__(self, stage: object, cls: type) -> type:
        return front_end_of(cls)


class Stage(StageBase, Generic[T_co]):
    """The base of every stage: its arguments, and the epochs it opens (see the module).

    A stage that reads one source takes it first and keeps it as ``source_datapipe`` (the name
    torch's DataPipes give it); this constructor does that for a stage with no other argument.
    A subclass defines :meth:`open` and declares ``resumes`` (or opens an
    :class:`~wdspipes.core.protocol.Epoch` that says its part).
    """

    DataPipe = _FrontEnd()
    """The DataPipe front end of this class: the same stage, an ``IterDataPipe`` too."""

    def __new__(cls, /, *args: Any, **kwargs: Any) -> Any:
        """A stage built on one of torch's DataPipes is built as its DataPipe front end."""
        if any(_is_datapipe(arg) for arg in args):
            cls = front_end_of(cls)
        return object.__new__(cls)

    def __init__(self, source_datapipe: Any = _NO_SOURCE) -> None:
        if source_datapipe is not _NO_SOURCE:
            self.source_datapipe = source_datapipe

    def open(self, source: Any, context: Any, part: Any = None) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define open()")

    # --- the pipeline that ends in this stage ----------------------------------------------

    def _run(self) -> Run:
        run: Run | None = self.__dict__.get("_wds_run")
        if run is None:
            run = self.__dict__["_wds_run"] = Run()
        return run

    def __iter__(self) -> Iterator[T_co]:
        """An epoch of the pipeline that ends in this stage: each stage opened, source first,
        as its first item is asked for (so that a state loaded after ``iter()`` and before it
        is the one it goes on from, as StatefulDataLoader loads one), going on from a state
        loaded before, if any."""
        return self._run().items(self)

    def state_dict(self) -> dict[str, Any]:
        """The position of the pipeline that ends in this stage, mid-epoch: small data that
        :meth:`load_state_dict` takes back (see :mod:`wdspipes.core.engine`).

        This is torchdata's ``Stateful`` protocol: ``StatefulDataLoader`` calls it in each
        worker.

        Raises:
            ResumeError: a stage of the pipeline cannot save its state; the message names it.
        """
        return self._run().state(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Make the next epoch of the pipeline go on where :meth:`state_dict` was taken: in the
        same reader, exactly; with the states of all readers merged (``wdspipes.merge_states``),
        in a reader of any split, with its share of the work left in the epoch.

        Raises:
            ResumeError: the state is another pipeline's, or one reader's of a job with
                several loaded into another reader.
        """
        self._run().load(self, state_dict)

    def statistics(self) -> PipelineStatistics:
        """Where the time of the pipeline that ends in this stage goes, stage by stage: the
        statistics of its epoch under way, or of the last one measured; asked before any, those
        of its next epoch (see :mod:`wdspipes.core.statistics`). Measuring begins with the
        first epoch opened after it is first asked for (it costs two clock readings per item
        and stage), and goes on with the epochs after.

        >>> class Passed(Stage):
        ...     def open(self, source, context, part=None):
        ...         return iter(source)
        >>> pipe = Passed(range(1000))
        >>> stats = pipe.statistics()
        >>> total = sum(pipe)
        >>> [(record.name, record.items) for record in stats.stages]
        [('Passed', 1000)]
        """
        return self._run().statistics()

    def set_epoch(self, epoch: int) -> None:
        """Number the next epoch of the pipeline that ends in this stage ``epoch``, as
        ``DistributedSampler.set_epoch``: every random stage draws epoch ``epoch``'s numbers
        next, and the loader's epochs after it count on from there.

        Raises:
            ValueError: ``epoch`` is not an int of at least 0.
        """
        self._run().clock.set_epoch(int_at_least("epoch", epoch, least=0))

    def set_seed(self, seed: int) -> None:
        """A loader begins an epoch with ``seed`` for this stage (DataLoader2, DataLoader and
        StatefulDataLoader call it on every stage): a random stage draws from it (unless it was
        given ``seed=``), and the pipeline that ends here counts the epoch."""
        seed = int(seed)
        self._loader_seed = seed
        self._run().clock.set_seed(seed)


def _is_datapipe(value: object) -> bool:
    """One of torch's DataPipes, or a list or tuple holding one (a mixer's sources)."""
    if isinstance(value, list | tuple):
        return any(is_torch_datapipe(item) for item in value)
    return is_torch_datapipe(value)
