"""The base class of every wdspipes stage, and how stages get their functional names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from torch.utils.data import IterDataPipe

from wdspipes.core.stage import CoreStage, Sample, set_front_end
from wdspipes.loaders.compat import fix_dataloader2
from wdspipes.pipes.pickling import restored_state, stage_state
from wdspipes.state.protocol import functional_names, name_stage

__all__ = [
    "Sample",
    "StageDataPipe",
    "front_end",
    "functional_stage",
    "registered_stage",
    "webdataset_call",
]

T_co = TypeVar("T_co", covariant=True)
C = TypeVar("C", bound=type)


def functional_stage(name: str) -> Callable[[C], C]:
    """Register a stage class under a functional name, so ``source.<name>(...)`` builds it.

    As torch's ``functional_datapipe``, but the registered function takes the upstream DataPipe
    positionally only: torch's passes its own arguments by name (``cls``, ``source_dp``), and
    ``source.map_dict(cls=int)`` would fail on them. A name already taken is an error, as in
    torch, so wdspipes never replaces a torch or torchdata stage.
    """

    def register(cls: C) -> C:
        if not issubclass(cls, IterDataPipe):
            raise TypeError(f"{cls.__name__} is not an IterDataPipe")
        if name in IterDataPipe.functions:
            raise RuntimeError(f"the functional name {name!r} is already taken")

        def build(source: IterDataPipe[Any], /, *args: Any, **kwargs: Any) -> Any:
            return cls(source, *args, **kwargs)  # type: ignore[call-arg]

        build.__doc__ = _core_of(cls).__doc__
        build.__name__ = build.__qualname__ = name
        build._wds_stage = cls  # type: ignore[attr-defined]
        IterDataPipe.register_function(name, build)
        name_stage(name, cls)
        return front_end(cls)

    return register


def front_end(cls: C) -> C:
    """Record ``cls``, a DataPipe, as the front end of its core class (its first base that is
    a :class:`~wdspipes.core.stage.CoreStage` but no DataPipe), which a pipeline of DataPipes
    builds in its place (:func:`~wdspipes.core.stage.front_end_of`). Returns ``cls``."""
    core = _core_of(cls)
    if core is not cls:
        set_front_end(core, cls)
    return cls


def _core_of(cls: type) -> type:
    """The core class of a front end ``cls``; ``cls`` itself for a DataPipe without one."""
    for base in cls.__bases__:
        if issubclass(base, CoreStage) and not issubclass(base, IterDataPipe):
            return base
    return cls


_CALLS: dict[str, Callable[..., Any]] = {}


def webdataset_call(name: str, call: Callable[..., Any]) -> None:
    """Have ``stage.<name>(...)`` on every wdspipes stage run ``call(stage, *args, **kwargs)``:
    for the names torch and torchdata own that webdataset's fluid interface calls its own way
    (``shuffle``, ``map``, ``slice``, ``repeat``; see :mod:`wdspipes.pipes.torch_names`,
    which sets them). On torch's own DataPipes the names stay torch's.
    """
    _CALLS[name] = call


def _webdataset_call(name: str, stage: IterDataPipe[Any], args: Any, kwargs: Any) -> Any:
    call = _CALLS.get(name)
    if call is None:  # no module of wdspipes.pipes imported: a stage made by hand
        raise RuntimeError(f"webdataset's .{name} is not set up: import wdspipes.pipes")
    return call(stage, *args, **kwargs)


def registered_stage(name: str) -> type | None:
    """The wdspipes class registered under functional name ``name``, if any."""
    return functional_names().get(name)


class StageDataPipe(CoreStage[T_co], IterDataPipe[T_co]):
    """The base of every wdspipes DataPipe: its state follows the state protocol (its core
    class's, :class:`~wdspipes.core.stage.CoreStage`), it carries webdataset's calls of the
    names torch owns, and it mends DataLoader2 before DataLoader2 can run it.

    A front end subclasses its core class and this, and inherits ``__iter__``: torch wraps
    only an ``__iter__`` defined in a DataPipe class's own body, with per-item bookkeeping
    (profiling, a count of items, one valid iterator at a time), so a front end adds nothing
    per item. A DataPipe that defines ``__iter__`` itself is wrapped, and, for each item,
    torch checks ``hasattr(datapipe, "_is_child_datapipe")``; on a plain IterDataPipe that
    lookup fails through ``IterDataPipe.__getattr__``, which costs more than most stages' own
    work. Our stages are not the children of ``fork`` or ``demux``; saying so makes the check
    a class-attribute read.

    Torch's graph traversal pickles only a stage's upstream DataPipes, and functions cross to
    worker processes through dill where plain pickle cannot (see :mod:`wdspipes.pipes.pickling`).

    Pickling a stage mends DataLoader2's multiprocessing if torchdata is loaded (see
    :func:`wdspipes.loaders.compat.fix_dataloader2`): DataLoader2 pickles the graph it is given
    before it starts any worker; unpickling one mends it in a spawned worker.
    """

    _is_child_datapipe = False

    # webdataset's calls of the names torch and torchdata own: methods of wdspipes' stages, so
    # that torch's own DataPipes keep torch's meanings (see wdspipes.pipes.torch_names)

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
        return stage_state(self)  # lambdas stay unpickled without workers (wdspipes.pipes.pickling)

    def __setstate__(self, state: Any) -> None:
        fix_dataloader2()  # a spawned worker process: its prefetch buffer is mended too
        self.__dict__.update(restored_state(state))
