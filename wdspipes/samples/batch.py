"""Batching: groups of samples collated column by column, and back.

:func:`collate` turns a list of samples into one batch: dict samples into a dict of columns,
tuples into a tuple of columns, other items into one column. In each column, tensors are
stacked, numpy arrays stacked into a tensor, numbers (bool, int, float) become a tensor (bool,
int64, float64, as torch's ``default_collate``), and anything else (strings, None, nested
values) a list; a batch of such items is a :class:`SampleList` of them.

>>> import numpy as np
>>> first = {"__key__": "a", "x": np.zeros(2), "y": 1}
>>> batch = collate([first, {"__key__": "b", "x": np.ones(2), "y": 0}])
>>> batch["__key__"], batch["x"].shape, batch["y"]
(['a', 'b'], torch.Size([2, 2]), tensor([1, 0]))
>>> list(unbatch(batch))[1]["__key__"]
'b'

:func:`unbatch` reads a batch as webdataset's ``unbatched`` does: a dict of columns gives
dicts, a tuple or a list of columns (as ``collate`` makes them, or torch's ``DataLoader``,
which turns tuples into lists) gives a tuple per row, a tensor or an array its rows. A
:class:`SampleList`, the list of samples that ``batched(n, collation_fn=None)`` yields, gives
its samples back.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from wdspipes.core.arguments import int_at_least
from wdspipes.core.protocol import Epoch, Resumes, register
from wdspipes.core.stage import Stage
from wdspipes.errors import CollationError, ResumeError, sample_location

if TYPE_CHECKING:
    import torch

__all__ = ["Batcher", "SampleList", "Unbatcher", "collate", "unbatch"]

Collate = Callable[[list[Any]], Any]


def collate(samples: Sequence[Any]) -> Any:
    """One batch from ``samples``, column by column (see the module).

    Raises:
        CollationError: samples with different fields, or a column of tensors or arrays with
            unequal shapes, naming the field.
    """
    first = samples[0]
    if isinstance(first, dict):
        fields = list(first)
        for sample in samples[1:]:
            if sample.keys() != first.keys():
                raise CollationError(
                    f"samples have different fields: {sorted(first)} and {sorted(sample)}",
                    **sample_location(sample),
                )
        return {field: _column(field, [sample[field] for sample in samples]) for field in fields}
    if isinstance(first, list | tuple):
        lengths = {len(sample) for sample in samples}
        if len(lengths) > 1:
            raise CollationError(f"tuple samples of different lengths {sorted(lengths)}")
        return tuple(
            _column(str(i), list(column)) for i, column in enumerate(zip(*samples, strict=True))
        )
    column = _column("sample", list(samples))
    return SampleList(column) if isinstance(column, list) else column  # items, not columns


_Numbers = tuple[tuple[frozenset[type], Any], ...]


@functools.cache
def _tensors() -> tuple[Any, Callable[..., np.ndarray | None], _Numbers, Collate]:
    """torch, the handover's :func:`~wdspipes.samples.handover.batch_array`, the table of
    Python numbers in a column -> tensor dtype (as torch's ``default_collate``), and its
    :func:`~wdspipes.samples.handover.bytes_column`, loaded when collation
    first makes a column: the module loads no torch, and each column of a batch looks them up
    in one cached call."""
    import torch

    from wdspipes.samples.handover import batch_array, bytes_column

    numbers = (
        (frozenset([bool]), torch.bool),
        (frozenset([int]), torch.int64),
        (frozenset([int, float]), torch.float64),
    )
    return torch, batch_array, numbers, bytes_column


def _column(field: str, values: list[Any]) -> Any:
    torch, batch_array, numbers, bytes_column = _tensors()
    first = values[0]
    if isinstance(first, torch.Tensor):
        _check_shapes(field, values, torch.Tensor)
        out = _tensor_batch(first, len(values))
        return torch.stack(values) if out is None else torch.stack(values, out=out)
    if isinstance(first, np.ndarray | np.generic):
        _check_shapes(field, values, np.ndarray | np.generic)
        array = batch_array((len(values), *first.shape), first.dtype)
        stacked = np.stack(values) if array is None else np.stack(values, out=array)
        if stacked.dtype.kind not in _TENSOR_KINDS:  # strings, objects: no tensor holds them
            return values
        return torch.from_numpy(stacked)
    kinds = {type(value) for value in values}
    for number_kinds, dtype in numbers:
        if kinds <= number_kinds:
            try:
                return torch.tensor(values, dtype=dtype)
            except (OverflowError, RuntimeError, ValueError) as exn:
                raise CollationError(f"cannot batch field {field!r}: {exn}", field=field) from exn
    return bytes_column(values)  # in a worker, large raw bytes cross through shared memory


def _tensor_batch(first: torch.Tensor, rows: int) -> torch.Tensor | None:
    """An empty tensor for stacking ``rows`` tensors like ``first`` in a worker's shared slot
    (see :mod:`wdspipes.samples.handover`), or None to stack as torch does."""
    import torch  # loaded: ``first`` is a tensor

    batch_array = _tensors()[1]
    if first.device.type != "cpu" or first.layout != torch.strided or first.requires_grad:
        return None
    array = batch_array((rows * first.nbytes,), np.dtype(np.uint8))
    if array is None:
        return None
    return torch.from_numpy(array).view(first.dtype).view(rows, *first.shape)


_TENSOR_KINDS = frozenset("biufc")  # numpy dtype kinds torch tensors hold


def _check_shapes(field: str, values: list[Any], kind: Any) -> None:
    if not all(isinstance(v, kind) for v in values):
        types = sorted({type(v).__name__ for v in values})
        raise CollationError(f"cannot batch field {field!r}: mixed types {types}", field=field)
    shapes = sorted({tuple(v.shape) for v in values})
    if len(shapes) > 1:
        raise CollationError(f"cannot stack field {field!r}: unequal shapes {shapes}", field=field)


class SampleList(list[Any]):
    """A list of samples, as ``batched(n, collation_fn=None)`` yields it: ``unbatched`` gives
    its samples back, where it reads any other list as columns (as webdataset's does). It
    stays one through torch's ``DataLoader``, which copies lists as they are.

    >>> list(unbatch(SampleList([("a", 1), ("b", 2)]))), list(unbatch([["a", "b"], [1, 2]]))
    ([('a', 1), ('b', 2)], [('a', 1), ('b', 2)])
    """


def unbatch(batch: Any) -> Iterator[Any]:
    """The samples of a batch (see the module): a dict of columns gives dicts, a tuple or list
    of columns tuples, a :class:`SampleList` its samples, a tensor or array its rows. Numbers
    come back as 0-d tensors.

    Raises:
        CollationError: columns of different lengths.
    """
    if isinstance(batch, dict):
        for row in range(_rows(batch.values())):
            yield {field: column[row] for field, column in batch.items()}
    elif isinstance(batch, tuple | list) and not isinstance(batch, SampleList):
        _rows(batch)
        yield from zip(*batch, strict=True)
    else:
        yield from batch


def _rows(columns: Iterable[Any]) -> int:
    """The common length of the columns of a batch (0 for none)."""
    lengths = {len(column) for column in columns}
    if len(lengths) > 1:
        raise CollationError(f"cannot unbatch columns of different lengths {sorted(lengths)}")
    return lengths.pop() if lengths else 0


@register("batched")
class Batcher(Stage[Any]):
    """Group samples into batches of ``batchsize`` (functional name: ``batched``).

    Args:
        source_datapipe: yields samples.
        batchsize: samples per batch.
        collation_fn: makes a batch from a list of samples (:func:`collate` by default); None
            gives the list itself, as a :class:`SampleList`.
        partial: yield the last batch even if it is smaller.

    Yields:
        Batches.

    Raises:
        CollationError: samples that cannot be collated (see :func:`collate`).

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> [b.tolist() for b in IterableWrapper(range(5)).batched(2)]
    [[0, 1], [2, 3], [4]]
    >>> list(IterableWrapper(range(5)).batched(2, collation_fn=None, partial=False))
    [[0, 1], [2, 3]]
    """

    resumes = Resumes.FROM_PART  # its part is empty: between batches it holds nothing

    def __init__(
        self,
        source_datapipe: Iterable[Any],
        batchsize: int,
        collation_fn: Collate | None = collate,
        partial: bool = True,
    ) -> None:
        super().__init__()
        self.source_datapipe = source_datapipe
        self.batchsize = int_at_least("batchsize", batchsize)
        self.collation_fn = collation_fn
        self.partial = partial

    def open(self, source: Iterable[Any], context: Any, part: Any = None) -> Iterator[Any]:
        if self.collation_fn is collate or "torch" in sys.modules:  # it makes tensors:
            # a loader worker's batches of labels go by value, not a shared segment each
            from wdspipes.samples.handover import send_small_by_value

            send_small_by_value()
        batch: list[Any] = []
        for sample in source:
            batch.append(sample)
            if len(batch) == self.batchsize:
                yield self._finish(batch)
                batch = []
        if batch and self.partial:
            yield self._finish(batch)

    def _finish(self, batch: list[Any]) -> Any:
        return SampleList(batch) if self.collation_fn is None else self.collation_fn(batch)


@register("unbatched")
class Unbatcher(Stage[Any]):
    """Split batches back into samples (functional name: ``unbatched``).

    Batches are read as webdataset's ``unbatched`` reads them (see :func:`unbatch`): a dict of
    columns, a tuple or a list of columns (a loader's collated batch), a tensor or an array;
    and the :class:`SampleList` of ``batched(n, collation_fn=None)`` gives its samples back.

    Args:
        source_datapipe: yields batches, as ``batched`` or a loader makes them.

    Yields:
        Samples: dicts, tuples, or a tensor's rows.

    Raises:
        CollationError: a batch's columns have different lengths.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> list(IterableWrapper([(["a", "b"], [1, 2])]).unbatched())
    [('a', 1), ('b', 2)]
    """

    resumes = Resumes.FROM_PART

    def open(self, source: Iterable[Any], context: Any, part: Any = None) -> UnbatchEpoch:
        return UnbatchEpoch(source)


class UnbatchEpoch(Epoch[Any]):
    """An epoch of ``unbatched``: how many rows of the last batch are still to come."""

    def __init__(self, source: Iterable[Any]) -> None:
        self.source = source
        self.rows_left = 0

    def __iter__(self) -> Iterator[Any]:
        for batch in self.source:
            rows = list(unbatch(batch))
            for index, row in enumerate(rows):
                self.rows_left = len(rows) - index - 1
                yield row

    def part(self) -> None:
        """Nothing, between batches; inside one, it cannot save its place.

        Raises:
            ResumeError: samples of the last batch are still to come.
        """
        if self.rows_left:
            raise ResumeError(
                f"Unbatcher (unbatched) cannot save its place inside a batch ({self.rows_left} "
                "samples of it are still to come): save the state after the batch's last "
                "sample, or shuffle and batch without unbatching"
            )
