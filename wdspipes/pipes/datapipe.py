"""The DataPipe front end of every stage, made from its class, and the functional names,
registered on ``IterDataPipe`` from the one table (:func:`wdspipes.core.protocol.register`).

A stage class's front end (``StageClass.DataPipe``) is the class with :class:`StageDataPipe`
(torch's ``IterDataPipe``) added: made once, on first use, never written by hand. A stage built
on one of torch's DataPipes is built as its front end, so a pipeline of DataPipes is DataPipes
throughout, and ``source.<name>(...)`` builds the stage registered under ``name`` on any
DataPipe.

>>> from wdspipes.read.opener import ShardOpener
>>> front = ShardOpener.DataPipe
>>> front.__name__, front.__mro__[1] is ShardOpener, issubclass(front, IterDataPipe)
('ShardOpener', True, True)
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from torch.utils.data import IterDataPipe, get_worker_info
from torch.utils.data.datapipes.iter import IterableWrapper

from wdspipes.core.protocol import registered, set_front_ends
from wdspipes.core.stage import Sample, Stage
from wdspipes.loaders.compat import fix_dataloader2
from wdspipes.pipes.pickling import pickled_attributes, unpickled_attributes
from wdspipes.samples.handover import in_worker
from wdspipes.samples.raw_handover import leaving_worker

__all__ = ["Sample", "StageDataPipe", "front_end", "webdataset_call"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


_CALLS: dict[str, Any] = {}


def webdataset_call(name: str, call: Any) -> None:
    """Have ``stage.<name>(...)`` on every wdspipes stage run ``call(stage, *args, **kwargs)``:
    for the names torch and torchdata own that webdataset's fluid interface calls its own way
    (``shuffle``, ``map``, ``slice``, ``repeat``; see :mod:`wdspipes.webdataset.torch_names`,
    which sets them: webdataset's layer, on top, which ``import wdspipes`` loads). On torch's
    own DataPipes the names stay torch's.
    """
    _CALLS[name] = call


def _webdataset_call(name: str, stage: IterDataPipe[Any], args: Any, kwargs: Any) -> Any:
    call = _CALLS.get(name)
    if call is None:  # the command's process, which loads no more than it needs
        raise RuntimeError(f"webdataset's .{name} is not set up: import wdspipes.webdataset")
    return call(stage, *args, **kwargs)


def as_datapipe(source: Iterable[T]) -> Iterable[T]:
    """A source as a front end reads it: a DataPipe as it is, a plain iterable wrapped (not
    copied) in torch's ``IterableWrapper``, as torch's graph traversal expects."""
    if isinstance(source, IterDataPipe):
        return source
    return IterableWrapper(source, deepcopy=False)


class StageDataPipe(IterDataPipe[T_co]):
    """What a stage's front end adds to its class: it is an ``IterDataPipe``, it carries
    webdataset's calls of the names torch owns, and it mends DataLoader2 before DataLoader2 can
    run it.

    A front end iterates as its stage class does: torch wraps only an ``__iter__`` defined in
    a DataPipe class's own body, with per-item bookkeeping (profiling, a count of items, one
    valid iterator at a time), and a front end's is set on it after, so it adds nothing per
    item. It adds one check as each epoch begins: where the front end is the dataset of a
    worker of torch's ``DataLoader``, its items leave the worker with their large raw fields
    in shared memory (see :func:`_leaving_workers`). For each item
    torch's hooks would also look up ``_is_child_datapipe``; on a plain IterDataPipe that lookup
    fails through ``IterDataPipe.__getattr__``, which costs more than most stages' own work.
    Our stages are not the children of ``fork`` or ``demux``; saying so makes any such check a
    class-attribute read.

    Torch's graph traversal pickles only a stage's upstream DataPipes, and functions cross to
    worker processes through dill where plain pickle cannot (see :mod:`wdspipes.pipes.pickling`).
    Pickling a stage mends DataLoader2's multiprocessing if torchdata is loaded (see
    :func:`wdspipes.loaders.compat.fix_dataloader2`): DataLoader2 pickles the graph it is given
    before it starts any worker; unpickling one mends it in a spawned worker.
    """

    _is_child_datapipe = False

    # webdataset's calls of the names torch and torchdata own: methods of wdspipes' stages, so
    # that torch's own DataPipes keep torch's meanings (see wdspipes.webdataset.torch_names)

    def shuffle(self, *args: Any, **kwargs: Any) -> IterDataPipe[Any]:
        """``.shuffle(n, initial=..., seed=...)`` is webdataset's shuffle buffer
        (``.buffer_shuffle``); ``.shuffle()`` and ``.shuffle(buffer_size=...)`` torch's."""
        return _webdataset_call("shuffle", self, args, kwargs)  # type: ignore[no-any-return]

    def map(self, *args: Any, **kwargs: Any) -> IterDataPipe[Any]:
        """``.map(f, handler=h)`` is webdataset's (``.map_samples``); ``.map(f)`` torch's,
        which warns where webdataset's would do otherwise."""
        return _webdataset_call("map", self, args, kwargs)  # type: ignore[no-any-return]

    def slice(self, *args: Any, **kwargs: Any) -> IterDataPipe[Any]:
        """torchdata's ``slice`` with a warning naming ``.islice`` (webdataset's), or an
        AttributeError naming it where torchdata's is not registered."""
        return _webdataset_call("slice", self, args, kwargs)  # type: ignore[no-any-return]

    def repeat(self, *args: Any, **kwargs: Any) -> IterDataPipe[Any]:
        """``.repeat()``, ``.repeat(nepochs=...)`` are webdataset's (``.repeat_epochs``);
        ``.repeat(n)`` (n > 1) torchdata's with a warning, or a TypeError."""
        return _webdataset_call("repeat", self, args, kwargs)  # type: ignore[no-any-return]

    def __getstate__(self) -> Any:
        fix_dataloader2()
        return pickled_attributes(
            self
        )  # lambdas stay unpickled without workers (wdspipes.pipes.pickling)

    def __setstate__(self, attributes: Any) -> None:
        fix_dataloader2()  # a spawned worker process: its prefetch buffer is mended too
        self.__dict__.update(unpickled_attributes(attributes))


def front_end(cls: type) -> type:
    """The DataPipe front end of stage class ``cls``: made once, and kept on the class (as
    ``cls.DataPipe``, where pickle finds it); ``cls`` itself for a DataPipe or a class that is
    no stage."""
    if not isinstance(cls, type) or not issubclass(cls, Stage) or issubclass(cls, IterDataPipe):
        return cls
    made: type | None = cls.__dict__.get("_wds_front_end")
    if made is None:
        body = {
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}.DataPipe",
            "__doc__": f"The DataPipe of :class:`{cls.__module__}.{cls.__qualname__}`.",
            "_as_source": staticmethod(as_datapipe),
        }
        made = types.new_class(
            cls.__name__, (cls, StageDataPipe), exec_body=lambda ns: ns.update(body)
        )
        # set after torch's metaclass has seen the body: it would wrap it with per-item hooks
        type.__setattr__(made, "__iter__", _leaving_workers(cls.__iter__))
        type.__setattr__(cls, "_wds_front_end", made)
    return made


def _leaving_workers(iterate: Any) -> Any:
    """A front end's ``__iter__``: its stage class's ``iterate``, and where the front end is
    the dataset of a worker of torch's ``DataLoader`` (or ``StatefulDataLoader``), whose loop
    pickles each item for the training process, the items made so that their large raw fields
    cross through shared memory (:func:`wdspipes.samples.raw_handover.leaving_worker`). One
    check as each epoch begins; in the training process the items are the stage's own."""

    def iterate_leaving(self: Any) -> Iterator[Any]:
        items = iterate(self)
        info = get_worker_info()
        if info is None or not in_worker():
            return items  # type: ignore[no-any-return]
        dataset = getattr(info.dataset, "_datapipe", info.dataset)  # torch wraps a DataPipe
        return leaving_worker(items) if dataset is self else items

    iterate_leaving.__name__ = iterate_leaving.__qualname__ = "__iter__"
    return iterate_leaving


def _register(name: str, cls: type) -> None:
    """Register stage ``cls`` under its functional name on ``IterDataPipe``, so that
    ``source.<name>(...)`` builds its front end. As torch's ``functional_datapipe``, but the
    registered function takes the upstream DataPipe positionally only: torch's passes its own
    arguments by name (``cls``, ``source_dp``), and ``source.map_dict(cls=int)`` would fail on
    them. A name torch or torchdata own is an error, so wdspipes never replaces theirs.
    """
    known = IterDataPipe.functions.get(name)
    if known is not None and getattr(known, "_wds_stage", None) is None:
        raise RuntimeError(f"the functional name {name!r} is already taken")

    def build(source: IterDataPipe[Any], /, *args: Any, **kwargs: Any) -> Any:
        return front_end(cls)(source, *args, **kwargs)

    build.__doc__ = cls.__doc__
    build.__name__ = build.__qualname__ = name
    build._wds_stage = cls  # type: ignore[attr-defined]
    IterDataPipe.register_function(name, build)


set_front_ends(front_end)
registered(_register)
