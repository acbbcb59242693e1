"""The torch-free base of every stage's logic, and wdspipes' own registry of functional names.

A stage's logic is a plain Python iterable (:class:`CoreStage`) that gives and takes its part
of the state through the protocol of :mod:`wdspipes.state.protocol`, as a node of
torchdata.nodes does; a chain of them runs without torch (``wdspipes cat`` reads shards so).
Each is registered under its functional name (:func:`core_stage`); its DataPipe front end, in
:mod:`wdspipes.pipes`, is the same class with torch's ``IterDataPipe`` added, registered on
``IterDataPipe`` under the same name (:func:`wdspipes.pipes.datapipe.functional_stage`).

>>> from wdspipes.state.protocol import stage_name
>>> from wdspipes.read.shards import ShardLister
>>> stage_name(ShardLister)
'ShardLister (list_shards)'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from wdspipes.core.seeds import pipeline_epoch, set_pipeline_epoch
from wdspipes.state.checkpoint import pipeline_state, restore_pipeline
from wdspipes.state.protocol import Resumable, name_stage

__all__ = ["CoreStage", "Sample", "core_stage", "front_end_of", "offered", "set_front_end"]

T_co = TypeVar("T_co", covariant=True)
C = TypeVar("C", bound=type)

Sample = dict[str, Any]
"""A sample: ``__key__``, ``__url__`` and one value per field."""

_FRONT_ENDS: dict[type, type] = {}


def core_stage(name: str) -> Callable[[C], C]:
    """Register a core stage class under its functional name in wdspipes' registry (the name
    its DataPipe front end takes on ``IterDataPipe``)."""

    def register(cls: C) -> C:
        name_stage(name, cls)
        return cls

    return register


def set_front_end(core: type, front_end: type) -> None:
    """Record ``front_end`` as the DataPipe of the core class ``core`` (its subclass)."""
    _FRONT_ENDS[core] = front_end


def front_end_of(cls: Any) -> Any:
    """The DataPipe front end of the core class ``cls`` where one is loaded; ``cls`` itself
    otherwise (a front end, a function, a core class without torch)."""
    return _FRONT_ENDS.get(cls, cls)


def offered(source: object, capability: str) -> Any:
    """What ``source`` offers under the method name ``capability`` (``source.shard_opener()``,
    ``source.tar_loader()``): how a stage finds the stages it works with by what they can do,
    never by their class; None where ``source`` has no such method.

    >>> class Opener:
    ...     def shard_opener(self):
    ...         return self
    >>> opener = Opener()
    >>> offered(opener, "shard_opener") is opener, offered([], "shard_opener")
    (True, None)
    """
    find = getattr(source, capability, None)
    return find() if callable(find) else None


class CoreStage(Resumable, Generic[T_co]):
    """The base of a stage's logic: a plain iterable over its source, with its state (see
    :class:`~wdspipes.state.protocol.Resumable` and docs/guide/writing-a-stage.md). It reads
    its source from the attribute ``source_datapipe`` (the name torch's DataPipes give it,
    which its DataPipe front end keeps)."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The position of the pipeline that ends in this stage, mid-epoch: small data that
        :meth:`load_state_dict` takes back (see :mod:`wdspipes.state.checkpoint`).

        This is torchdata's ``Stateful`` protocol: ``StatefulDataLoader`` calls it in each
        worker.

        Raises:
            ResumeError: a stage of the pipeline cannot save its state; the message names it.
        """
        return pipeline_state(self, pipeline_epoch(self))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Make the next iteration go on where :meth:`state_dict` was taken: in the same
        reader, exactly; with the states of all readers merged (``wdspipes.merge_states``),
        in a reader of any split, with its share of the work left in the epoch.

        Raises:
            ResumeError: the state is another pipeline's, or one reader's of a job with
                several loaded into another reader.
        """
        restore_pipeline(self, state_dict)

    def set_epoch(self, epoch: int) -> None:
        """Number the next epoch of the pipeline that ends in this stage ``epoch``, as
        ``DistributedSampler.set_epoch`` (see :func:`wdspipes.core.seeds.set_pipeline_epoch`):
        every random stage draws epoch ``epoch``'s numbers next, and the loader's epochs after
        it count on from there.

        Raises:
            ValueError: ``epoch`` is not an int of at least 0.
        """
        set_pipeline_epoch(self, epoch)
