"""The names torch and torchdata own, called webdataset's way: ``shuffle``, ``map``, ``slice``,
``repeat``.

webdataset's fluid methods of these names are torch's (``shuffle``, ``map``) or torchdata's
(``slice``, ``repeat``: registered once ``torchdata.datapipes`` is imported, as
``torchdata.dataloader2`` does; wdspipes never imports it) for other stages. wdspipes leaves
torch's registry as it is: the four are methods of its own stages
(:class:`~wdspipes.pipes.datapipe.StageDataPipe`), which run the functions of this module, so
torch's own DataPipes keep torch's meanings (``IterableWrapper(x).shuffle(4)`` is torch's
error; ``.buffer_shuffle(4)`` is the shuffle buffer on any DataPipe). On a wdspipes stage, a
torch-style call keeps doing what torch's does. The rule for the rest:

- a call that only webdataset's signature takes gets webdataset's meaning:
  ``.shuffle(1000)`` (torch's takes no positional size) is ``.buffer_shuffle(1000)``, with
  webdataset's ``initial=`` and ``seed=`` (a size below 1: no shuffle, as in webdataset);
  ``.map(f, handler=h)`` is ``.map_samples(f, handler=h)``; ``.repeat()``, ``.repeat(1)``,
  ``.repeat(0)``, ``.repeat(nepochs=n)``, ``.repeat(n, nbatches)`` are ``.repeat_epochs``
  (``.islice(nbatches)`` after it);
- a call both take, where torch's or torchdata's stage would do something else, runs theirs
  and says so with a :class:`~wdspipes.errors.TorchNameWarning` naming the wdspipes method, on
  a pipeline that holds a wdspipes stage: ``.slice(...)`` and ``.repeat(n)`` (n > 1) as the
  call is made; ``.map(f)`` the first time ``f`` returns None (webdataset's drops the sample)
  or a dict without the sample's ``__key__`` (webdataset's puts it back);
- where torchdata's ``slice`` or ``repeat`` is not registered, such a call on a wdspipes stage
  is an error that names the wdspipes method (``.islice``, ``.repeat_epochs``).

>>> import wdspipes as wds
>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> items = IterableWrapper(range(9)).islice(None)  # a wdspipes stage
>>> type(items.shuffle(4)).__name__, type(items.shuffle())
('BufferShuffler', <class 'torch.utils.data.datapipes.iter.combinatorics.ShufflerIterDataPipe'>)
>>> list(items.islice(5).map(lambda x: x or None, handler=wds.reraise_exception))
[1, 2, 3, 4]
>>> list(IterableWrapper("ab").islice(2).repeat(nepochs=2))
['a', 'b', 'a', 'b']
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NoReturn, cast

from torch.utils.data import IterDataPipe

from wdspipes.errors import TorchNameWarning
from wdspipes.pipes.datapipe import webdataset_call
from wdspipes.samples.epochs import EpochRepeater
from wdspipes.samples.fields import ItemSlicer, SampleMapper
from wdspipes.samples.shuffle import BufferShuffler, seed_from

__all__ = ["install"]

Theirs = Callable[..., Any] | None
"""The function torch or torchdata registered under the name; None where none is."""


def _shuffle(theirs: Theirs, source: IterDataPipe[Any], /, *args: Any, **kwargs: Any) -> Any:
    if not args and "size" not in kwargs:
        assert theirs is not None  # torch core registers shuffle
        return theirs(source, **kwargs)  # torch's: shuffle(buffer_size=..., unbatch_level=...)
    return _webdataset_shuffle(source, *args, **kwargs)


def _webdataset_shuffle(
    source: IterDataPipe[Any],
    size: int,
    initial: int = 100,
    seed: int | None = None,
    handler: Any = None,  # taken and not used, as in webdataset
    **others: Any,
) -> IterDataPipe[Any]:
    rng = others.pop("rng", None)  # webdataset's: the seed is drawn from it (seed_from)
    if others:
        raise TypeError(
            f"shuffle(size, ...) is webdataset's shuffle buffer, which takes initial= and "
            f"seed=, not {', '.join(sorted(others))}; torch's shuffle takes no size "
            "(shuffle(buffer_size=...))"
        )
    if not isinstance(size, int) or isinstance(size, bool):
        raise TypeError(f"shuffle(size): size must be an int, got {size!r}")
    if size < 1:  # webdataset: no shuffle
        return source
    shuffled = BufferShuffler(source, bufsize=size, initial=initial, seed=seed_from(rng, seed))
    return cast(IterDataPipe[Any], shuffled)


def _map(theirs: Theirs, source: IterDataPipe[Any], /, *args: Any, **kwargs: Any) -> Any:
    assert theirs is not None  # torch core registers map
    if "handler" in kwargs:
        return _webdataset_map(source, *args, **kwargs)
    mapper = theirs(source, *args, **kwargs)
    if len(args) == 1 and not kwargs:
        mapper.fn = TorchMapFunction(mapper.fn)
    return mapper


def _webdataset_map(
    source: IterDataPipe[Any], fn: Callable[[Any], Any], *, handler: Any
) -> IterDataPipe[Any]:
    return cast(IterDataPipe[Any], SampleMapper(source, fn, handler=handler))


class TorchMapFunction:
    """The function of torch's ``map`` on a wdspipes pipeline: it warns, once, the first time
    the result is one that webdataset's ``map`` would not yield as it is."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.warned = False

    def __call__(self, sample: Any) -> Any:
        result = self.fn(sample)
        if not self.warned and (result is None or _loses_key(sample, result)):
            self.warned = True
            _warn_map(self.fn, result)
        return result


def _loses_key(sample: Any, result: Any) -> bool:
    return (
        isinstance(sample, dict)
        and isinstance(result, dict)
        and "__key__" in sample
        and result.get("__key__") != sample["__key__"]
    )


def _warn_map(fn: Callable[[Any], Any], result: Any) -> None:
    name = getattr(fn, "__qualname__", type(fn).__name__)
    done = "returned None" if result is None else "returned a dict without the sample's __key__"
    what = "drops the sample" if result is None else "gives it the sample's __key__"
    warnings.warn(
        f".map({name}) on a wdspipes pipeline is torch's map, and {name} {done}: torch's map "
        f"yields it as it is, webdataset's .map {what}. For webdataset's, write "
        ".map_samples(...) (wds.map(...) in a DataPipeline)",
        TorchNameWarning,
        stacklevel=2,
    )


def _slice(theirs: Theirs, source: IterDataPipe[Any], /, *args: Any, **kwargs: Any) -> Any:
    if theirs is None:
        _no_slice(source)
    result = theirs(source, *args, **kwargs)
    warnings.warn(_slice_advice(args), TorchNameWarning, stacklevel=5)
    return result


def _slice_advice(args: tuple[Any, ...]) -> str:
    listed = ", ".join(repr(arg) for arg in args)
    return (
        f".slice({listed}) is torchdata's stage, which slices each item (a tuple, a list; a "
        f"sample dict by key); webdataset's .slice, the items from start to stop, is "
        f".islice({listed}) in wdspipes (wds.slice(...) in a DataPipeline)"
    )


def _no_slice(stage: IterDataPipe[Any]) -> NoReturn:
    raise AttributeError(
        f"'{type(stage).__name__}' object has no attribute 'slice': webdataset's .slice(...) "
        "is .islice(...) in wdspipes (wds.slice(...) in a DataPipeline); torchdata's .slice, "
        "which slices each item, exists once torchdata.datapipes is imported"
    )


def _repeat(theirs: Theirs, source: IterDataPipe[Any], /, *args: Any, **kwargs: Any) -> Any:
    ambiguous = len(args) == 1 and not kwargs and isinstance(args[0], int) and args[0] > 1
    if not ambiguous and set(kwargs) <= {"nepochs", "nbatches"} and len(args) <= 2:
        return _webdataset_repeat(source, *args, **kwargs)
    listed = ", ".join([repr(arg) for arg in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    advice = (
        f"webdataset's .repeat({listed}) repeats the epoch, torchdata's repeats each item: "
        f"write .repeat_epochs({listed}) for webdataset's (wds.repeat(...) in a DataPipeline)"
    )
    if theirs is None:
        raise TypeError(
            f"{advice}; torchdata's .repeat exists once torchdata.datapipes is imported"
        )
    result = theirs(source, *args, **kwargs)
    warnings.warn(f".repeat is torchdata's here: {advice}", TorchNameWarning, stacklevel=5)
    return result


def _webdataset_repeat(
    source: IterDataPipe[Any], nepochs: int = -1, nbatches: int = -1
) -> IterDataPipe[Any]:
    """As webdataset's ``DataPipeline.repeat``: ``nepochs`` below 1 for no end; ``nbatches``
    above 0 ends it after that many items, unless it is one epoch."""
    repeated = EpochRepeater(source, None if nepochs < 1 else nepochs)
    sliced = ItemSlicer(repeated, nbatches) if nbatches > 0 and nepochs != 1 else repeated
    return cast(IterDataPipe[Any], sliced)


_CALLS: dict[str, Callable[..., Any]] = {
    "map": _map,
    "repeat": _repeat,
    "shuffle": _shuffle,
    "slice": _slice,
}


def _calling(name: str) -> Callable[..., Any]:
    """The method ``name`` of wdspipes' stages: the rule of the module, with what torch or
    torchdata registers under ``name`` now (None where nothing is)."""
    call = _CALLS[name]

    def method(source: IterDataPipe[Any], /, *args: Any, **kwargs: Any) -> Any:
        return call(IterDataPipe.functions.get(name), source, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


def install() -> None:
    """Make webdataset's calls of the names owned, on wdspipes' stages, follow the rule of the
    module (torch's registry stays as torch and torchdata make it). Done as the module is
    imported, with the layer (:mod:`wdspipes.webdataset`), which ``import wdspipes`` loads."""
    for name in _CALLS:
        webdataset_call(name, _calling(name))


install()
