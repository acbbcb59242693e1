"""webdataset's ``webdataset.filters`` (``wdspipes.filters``): the curried stages of
``DataPipeline(...)`` (:mod:`wdspipes.webdataset.stages`), and the helpers programs build their
own stages from: ``pipelinefilter``, ``getfirst``, ``_shuffle``, ``pick``, ``compose``.

>>> getfirst({"png": 1, "jpg": 2}, "jpg;png")
2
>>> list(_shuffle(iter(range(5)), bufsize=3, initial=2, seed=0)) == list(
...     _shuffle(iter(range(5)), bufsize=3, initial=2, seed=0))
True
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from wdspipes.errors import Handler, reraise_exception
from wdspipes.pipeline import PipelineStage
from wdspipes.webdataset.missing import no_counterpart
from wdspipes.webdataset.stages import (
    batched,
    decode,
    detshuffle,
    map,
    map_dict,
    map_tuple,
    rename,
    select,
    shuffle,
    slice,
    to_tuple,
    unbatched,
)
from wdspipes.webdataset.utils import identity

__all__ = [
    "PipelineStage",
    "_shuffle",
    "batched",
    "compose",
    "decode",
    "detshuffle",
    "getfirst",
    "identity",
    "map",
    "map_dict",
    "map_tuple",
    "pick",
    "pipelinefilter",
    "rename",
    "reraise_exception",
    "select",
    "shuffle",
    "slice",
    "to_tuple",
    "unbatched",
]

T = TypeVar("T")


class _Curried:
    """``f`` waiting for its data: ``_Curried(f, *args, **kw)(data)`` is ``f(data, *args,
    **kw)``. In ``DataPipeline(...)`` it runs as a plain iterator function (see
    :class:`~wdspipes.pipeline.IteratorStage`); it pickles where ``f`` and the arguments do."""

    def __init__(self, f: Callable[..., Any], *args: Any, **kw: Any) -> None:
        self.f, self.args, self.kw = f, args, kw

    def __call__(self, data: Iterator[Any]) -> Any:
        return self.f(data, *self.args, **self.kw)

    def __repr__(self) -> str:
        params = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kw.items()]
        return f"{getattr(self.f, '__name__', self.f)}({', '.join(params)})"


def pipelinefilter(f: Callable[..., Any]) -> Callable[..., _Curried]:
    """A stage for ``DataPipeline(...)`` from a function of an iterator and more arguments,
    as webdataset's: ``pipelinefilter(f)(*args, **kw)`` runs ``f(upstream, *args, **kw)``.

    >>> from wdspipes.pipeline import DataPipeline
    >>> def times(src, n):
    ...     return (x * n for x in src)
    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(DataPipeline(IterableWrapper([1, 2]), pipelinefilter(times)(10)))
    [10, 20]
    """
    return functools.wraps(f)(functools.partial(_Curried, f))


def getfirst(
    a: Mapping[str, Any],
    keys: str | Sequence[str],
    default: Any = None,
    missing_is_error: bool = True,
) -> Any:
    """The value of the first of ``keys`` (a list, or names joined with ``;``) that ``a``
    holds, as webdataset's.

    Raises:
        ValueError: none is there and ``missing_is_error``, naming the keys and what ``a``
            holds.
    """
    names = keys.split(";") if isinstance(keys, str) else keys
    for name in names:
        if name in a:
            return a[name]
    if missing_is_error:
        raise ValueError(f"didn't find {list(names)} in {list(a)}")
    return default


def pick(buf: list[T], rng: random.Random) -> T:
    """Remove and return a random item of ``buf``, as webdataset's ``pick`` does (the last
    item takes its place)."""
    k = rng.randint(0, len(buf) - 1)
    item = buf[k]
    buf[k] = buf[-1]
    buf.pop()
    return item


def _shuffle(
    data: Iterable[T],
    bufsize: int = 1000,
    initial: int = 100,
    rng: random.Random | None = None,
    seed: int | None = None,
    handler: Handler | None = None,
) -> Iterator[T]:
    """webdataset's shuffle buffer as a plain function, drawing from ``rng`` (or
    ``random.Random(seed)``, or a generator of the time and process) as webdataset's does, so
    that a program's stage built on it gives the same order for the same generator. The
    ``shuffle`` stage (``buffer_shuffle``) is wdspipes' own: seeded by the loader, resumable.

    Raises:
        ValueError: both ``rng`` and ``seed``.
    """
    if seed is not None:
        if rng is not None:
            raise ValueError("_shuffle: give rng= or seed=, not both")
        rng = random.Random(seed)
    elif rng is None:
        rng = random.Random(int((os.getpid() + time.time()) * 1e9))
    initial = min(initial, bufsize)
    source = iter(data)
    buf: list[T] = []
    for item in source:
        buf.append(item)
        if len(buf) < bufsize:  # grow: one more item while below bufsize
            extra = next(source, _END)
            if extra is not _END:
                buf.append(extra)
        if len(buf) >= initial:
            yield pick(buf, rng)
    while buf:
        yield pick(buf, rng)


_END: Any = object()


def compose(*fns: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The functions applied left to right, as webdataset's ``compose``."""
    return functools.reduce(lambda f, g: lambda x: g(f(x)), fns)


MISSING = {
    "default_collation_fn": "wdspipes.collate, the default of batched(): numbers and arrays "
    "become torch tensors, a tuple sample's batch a tuple",
    "unlisted": "unbatched(), which gives the samples of batched(n, collation_fn=None) back",
    "transform_with": "map_tuple(*fns)",
    "extract_keys": 'to_tuple("jpg;png", ...): exact field names, ";" between alternatives',
    "rename_keys": 'rename(new="old1;old2"); map for patterns',
    "xdecode": 'decode(handle_extension("ext", fn), ...)',
    "associate": "map(fn), with fn adding the fields",
    "rsample": "select(predicate), with a predicate that draws",
    "info": "map(fn), with fn logging the sample and returning it",
    "log_keys": "map(fn), with fn logging the sample and returning it",
    "Cached": "torchdata's .in_memory_cache(); for shards, cache_dir=",
    "LMDBCached": "cache_dir= for shards",
    "parse_field_spec": 'to_tuple("a;b c") takes the same spec',
    "compose2": "compose(f, g)",
    "pipeline": "DataPipeline(source, *stages)",
    "FilterFunction": "pipelinefilter(f)(*args, **kw)",
    "RestCurried": "pipelinefilter(f)",
    "combine_values": "wdspipes.collate",
    "tuple2dict": "wdspipes.collate",
    "dict2tuple": "wdspipes.collate",
    "decode_bin": 'decode(handle_extension("ext", fn)); fields nobody decodes stay bytes',
    "decode_text": "the basic decoders read .txt fields",
    "decode_pickle": "decode(trusted=True) reads pickle fields",
    "default_decoders": 'decode(handle_extension("ext", fn), ...)',
    "find_decoder": 'decode(handle_extension("ext", fn), ...)',
}
"""webdataset's names that wdspipes does not provide here, and what to use instead."""


def __getattr__(name: str) -> Any:
    raise no_counterpart("wdspipes.filters", name, MISSING)
