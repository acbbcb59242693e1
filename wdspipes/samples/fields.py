"""Stages on the fields of samples: pick them into tuples, map, rename, select, slice.

A field spec names one field or alternatives separated by ``;`` (``"jpg;png"``: the first one
present). Errors about a sample name its URL and key.

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> samples = IterableWrapper([{"__key__": "0", "png": b"P", "cls": 3}])
>>> list(samples.to_tuple("jpg;png", "cls"))
[(b'P', 3)]
>>> list(samples.rename(image="jpg;png", keep=False))
[{'image': b'P'}]
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from wdspipes.core.context import EpochContext
from wdspipes.core.protocol import AllReaders, Epoch, Resumes, register, stage_name, unshared
from wdspipes.core.stage import Sample, Stage
from wdspipes.errors import (
    Handler,
    MissingFieldError,
    SampleError,
    handle,
    reraise_exception,
    sample_location,
)
from wdspipes.samples.threads import DROP, check_threads, opened

__all__ = [
    "FieldMapper",
    "ItemSlicer",
    "Renamer",
    "SampleMapper",
    "SampleSelector",
    "TupleMaker",
    "TupleMapper",
]


def first_present(sample: Sample, alternatives: tuple[str, ...]) -> Any:
    """The value of the first of ``alternatives`` present in ``sample``.

    Raises:
        MissingFieldError: none is present.
    """
    for field in alternatives:
        if field in sample:
            return sample[field]
    raise MissingFieldError(
        f"no field {';'.join(alternatives)!r} among {[f for f in sample if f[:2] != '__']}",
        **sample_location(sample),
    )


@register("to_tuple")
class TupleMaker(Stage[tuple[Any, ...]]):
    """Turn each sample into a tuple of fields (functional name: ``to_tuple``).

    Args:
        source_datapipe: yields sample dicts.
        *fields: field specs (``"jpg;png"`` takes the first present), or one string of
            space-separated specs (``"jpg;png cls"``).
        handler: what to do with a sample missing a field.
        missing_is_error: a missing field is an error; otherwise it gives None.
        none_is_error: a None value is an error (default: as ``missing_is_error``).

    Yields:
        Tuples, one value per spec.

    Raises:
        MissingFieldError: through ``handler``, naming the field, the URL and the key.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([{"a": 1, "b": 2}]).to_tuple("b a"))
    [(2, 1)]
    """

    resumes = Resumes.ITEM_BY_ITEM

    def __init__(
        self,
        source_datapipe: Iterable[Sample],
        *fields: str,
        handler: Handler = reraise_exception,
        missing_is_error: bool = True,
        none_is_error: bool | None = None,
    ) -> None:
        super().__init__()
        if len(fields) == 1 and " " in fields[0]:
            fields = tuple(fields[0].split())
        if not fields:
            raise ValueError("to_tuple needs at least one field")
        self.source_datapipe = source_datapipe
        self.fields = tuple(tuple(spec.split(";")) for spec in fields)
        self.handler = handler
        self.missing_is_error = missing_is_error
        self.none_is_error = missing_is_error if none_is_error is None else none_is_error

    def open(self, source: Iterable[Sample], context: Any, part: Any = None) -> Iterator[Any]:
        for sample in source:
            try:
                result = tuple(self._get(sample, alternatives) for alternatives in self.fields)
                if self.none_is_error:
                    self._check_none(sample, result)
            except MissingFieldError as exn:
                if handle(self.handler, exn):
                    continue
                return
            yield result

    def _check_none(self, sample: Sample, result: tuple[Any, ...]) -> None:
        for alternatives, value in zip(self.fields, result, strict=True):
            if value is None:  # "is": arrays answer "==" element by element
                spec = ";".join(alternatives)
                raise MissingFieldError(f"field {spec!r} is None", **sample_location(sample))

    def _get(self, sample: Sample, alternatives: tuple[str, ...]) -> Any:
        if self.missing_is_error:
            return first_present(sample, alternatives)
        return next((sample[f] for f in alternatives if f in sample), None)


@register("map_tuple")
class TupleMapper(Stage[tuple[Any, ...]]):
    """Apply a function to each position of tuple samples (functional name: ``map_tuple``).

    Args:
        source_datapipe: yields tuples (or lists).
        *fns: one function per position; None leaves that position as it is. Positions beyond
            the functions, and functions beyond the positions, are left alone.
        handler: what to do when a function raises.
        threads: map this many samples at once in threads (see :mod:`wdspipes.samples.threads`);
            0 for none.

    Yields:
        Tuples, in the order read.

    Raises:
        SampleError: through ``handler``, naming the position (as the field), with the
            function's error as the ``__cause__``.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([(1, "a", 2.5)]).map_tuple(str, None, int))
    [('1', 'a', 2)]
    """

    resumes = Resumes.ITEM_BY_ITEM
    shares = True  # the samples in flight in its threads, in this reader's shards

    def __init__(
        self,
        source_datapipe: Iterable[tuple[Any, ...]],
        *fns: Callable[[Any], Any] | None,
        handler: Handler = reraise_exception,
        threads: int = 0,
    ) -> None:
        super().__init__()
        for position, fn in enumerate(fns):
            if fn is not None and not callable(fn):
                raise TypeError(f"map_tuple function {position} is not callable: {fn!r}")
        self.source_datapipe = source_datapipe
        self.fns = fns
        self.handler = handler
        self.threads = check_threads(threads)

    def open(self, source: Iterable[Any], context: EpochContext, part: Any = None) -> Iterable[Any]:
        work, threads, handler = self._mapped, self.threads, self.handler
        return opened(stage_name(self), source, work, threads, SampleError, handler, context, part)

    def _mapped(self, sample: Any) -> tuple[Any, ...]:
        values = list(sample)
        for position, fn in enumerate(self.fns[: len(values)]):
            if fn is not None:
                values[position] = _apply(fn, values[position], sample, str(position))
        return tuple(values)


@register("map_dict")
class FieldMapper(Stage[Sample]):
    """Apply functions to named fields of dict samples (functional name: ``map_dict``).

    Args:
        source_datapipe: yields sample dicts.
        handler: what to do when a function raises or a field is missing.
        threads: map this many samples at once in threads (see :mod:`wdspipes.samples.threads`);
            0 for none.
        **fns: field name to function.

    Yields:
        Sample dicts with the fields replaced.

    Raises:
        MissingFieldError, SampleError: through ``handler``; a function's own error is the
            ``__cause__`` of a SampleError naming the field, URL and key.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([{"cls": b"3", "txt": b"x"}]).map_dict(cls=int))
    [{'cls': 3, 'txt': b'x'}]
    """

    resumes = Resumes.ITEM_BY_ITEM
    shares = True  # the samples in flight in its threads, in this reader's shards

    def __init__(
        self,
        source_datapipe: Iterable[Sample],
        /,
        handler: Handler = reraise_exception,
        threads: int = 0,
        **fns: Callable[[Any], Any],
    ) -> None:
        super().__init__()
        if not fns:
            raise ValueError("map_dict needs at least one field=function")
        for field, fn in fns.items():
            if not callable(fn):
                raise TypeError(f"map_dict function for {field!r} is not callable: {fn!r}")
        self.source_datapipe = source_datapipe
        self.handler = handler
        self.threads = check_threads(threads)
        self.fns = fns

    def open(
        self, source: Iterable[Sample], context: EpochContext, part: Any = None
    ) -> Iterable[Sample]:
        work, threads, handler = self._mapped, self.threads, self.handler
        return opened(stage_name(self), source, work, threads, SampleError, handler, context, part)

    def _mapped(self, sample: Sample) -> Sample:
        result = dict(sample)
        for field, fn in self.fns.items():
            result[field] = _apply(fn, first_present(sample, (field,)), sample, field)
        return result


def _apply(fn: Callable[[Any], Any], value: Any, sample: Any, field: str | None) -> Any:
    """``fn(value)``, with a failure turned into a SampleError that says where."""
    try:
        return fn(value)
    except Exception as exn:
        name = getattr(fn, "__name__", repr(fn))
        raise SampleError.like(exn)(  # also a ValueError where fn raised one, as in webdataset
            f"{name} failed: {type(exn).__name__}: {exn}", field=field, **sample_location(sample)
        ) from exn


@register("rename")
class Renamer(Stage[Sample]):
    """Rename fields of dict samples (functional name: ``rename``).

    Args:
        source_datapipe: yields sample dicts.
        handler: what to do with a sample missing a field to rename.
        keep: keep the fields not renamed; otherwise the result holds only the new names.
        **renames: new name to field spec (``image="jpg;png"``).

    Yields:
        Sample dicts.

    Raises:
        MissingFieldError: through ``handler``.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([{"__key__": "0", "jpg": b"J"}]).rename(image="jpg;png"))
    [{'__key__': '0', 'image': b'J'}]
    """

    resumes = Resumes.ITEM_BY_ITEM

    def __init__(
        self,
        source_datapipe: Iterable[Sample],
        /,
        handler: Handler = reraise_exception,
        keep: bool = True,
        **renames: str,
    ) -> None:
        super().__init__()
        if not renames:
            raise ValueError("rename needs at least one new_name='old_name' pair")
        self.source_datapipe = source_datapipe
        self.handler = handler
        self.keep = keep
        self.renames = {new: tuple(spec.split(";")) for new, spec in renames.items()}
        self.replaced = frozenset(f for alternatives in self.renames.values() for f in alternatives)

    def open(self, source: Iterable[Sample], context: Any, part: Any = None) -> Iterator[Sample]:
        for sample in source:
            try:
                renamed = {new: first_present(sample, old) for new, old in self.renames.items()}
            except MissingFieldError as exn:
                if handle(self.handler, exn):
                    continue
                return
            if self.keep:
                kept = {f: v for f, v in sample.items() if f not in self.replaced}
                yield {**kept, **renamed}
            else:
                yield renamed


@register("select")
class SampleSelector(Stage[Any]):
    """Keep the samples for which ``predicate`` is true (functional name: ``select``).

    Args:
        source_datapipe: yields samples.
        predicate: a function of a sample.

    Yields:
        The samples kept, in order.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(6)).select(lambda x: x % 3 == 0))
    [0, 3]
    """

    resumes = Resumes.ITEM_BY_ITEM

    def __init__(self, source_datapipe: Iterable[Any], predicate: Callable[[Any], Any]) -> None:
        super().__init__()
        if not callable(predicate):
            raise TypeError(f"select needs a predicate function, got {predicate!r}")
        self.source_datapipe = source_datapipe
        self.predicate = predicate

    def open(self, source: Iterable[Any], context: Any, part: Any = None) -> Iterator[Any]:
        predicate = self.predicate
        for sample in source:
            if predicate(sample):
                yield sample


@register("map_samples")
class SampleMapper(Stage[Any]):
    """Apply ``fn`` to each sample; a None result drops it (functional name: ``map_samples``).

    When a dict sample maps to a dict, the result keeps the sample's ``__key__``.

    Args:
        source_datapipe: yields samples.
        fn: a function of a sample.
        handler: what to do when ``fn`` raises.
        threads: call ``fn`` on this many samples at once in threads (see
            :mod:`wdspipes.samples.threads`); 0 for none.

    Yields:
        The results that are not None, in the order read.

    Raises:
        SampleError: through ``handler``, naming URL and key, with ``fn``'s error as cause.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([1, 2, 3, 4]).map_samples(lambda x: x * 10 if x % 2 else None))
    [10, 30]
    """

    resumes = Resumes.ITEM_BY_ITEM
    shares = True  # the samples in flight in its threads, in this reader's shards

    def __init__(
        self,
        source_datapipe: Iterable[Any],
        fn: Callable[[Any], Any],
        handler: Handler = reraise_exception,
        threads: int = 0,
    ) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"map needs a function, got {fn!r}")
        self.source_datapipe = source_datapipe
        self.fn = fn
        self.handler = handler
        self.threads = check_threads(threads)

    def open(self, source: Iterable[Any], context: EpochContext, part: Any = None) -> Iterable[Any]:
        work, threads, handler = self._mapped, self.threads, self.handler
        return opened(stage_name(self), source, work, threads, SampleError, handler, context, part)

    def _mapped(self, sample: Any) -> Any:
        result = _apply(self.fn, sample, sample, None)
        if result is None:
            return DROP
        if isinstance(sample, dict) and isinstance(result, dict):
            result["__key__"] = sample.get("__key__")
        return result


@register("islice")
class ItemSlicer(Stage[Any]):
    """Items from ``start`` to ``stop`` by ``step`` (functional name: ``islice``).

    As ``itertools.islice`` over the source.

    Args:
        source_datapipe: yields items.
        *args: ``stop``, or ``start, stop[, step]``.

    Yields:
        The selected items.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper(range(10)).islice(2, 8, 3))
    [2, 5]
    """

    resumes = Resumes.FROM_PART

    def __init__(self, source_datapipe: Iterable[Any], *args: int | None) -> None:
        super().__init__()
        itertools.islice((), *args)  # the arguments' checks, with islice's own messages
        self.source_datapipe = source_datapipe
        self.args = args
        window = builtins.slice(*args)
        self.start, self.stop, self.step = window.start or 0, window.stop, window.step or 1

    def open(self, source: Iterable[Any], context: Any, part: Any = None) -> SliceEpoch:
        if isinstance(part, AllReaders):
            raise unshared(self)  # a slice of each reader's items
        return SliceEpoch(self, source, 0 if part is None else part["position"])


class SliceEpoch(Epoch[Any]):
    """An epoch of ``islice``: the position, in its source, of the next item."""

    def __init__(self, stage: ItemSlicer, source: Iterable[Any], position: int) -> None:
        self.stage, self.source, self.position = stage, source, position

    def __iter__(self) -> Iterator[Any]:
        start, stop, step = self.stage.start, self.stage.stop, self.stage.step
        if stop is not None and self.position >= stop:
            return
        for item in self.source:
            index = self.position
            self.position = index + 1
            if index >= start and not (index - start) % step:
                yield item
            if stop is not None and self.position >= stop:
                return

    def part(self) -> dict[str, Any]:
        return {"position": self.position}
