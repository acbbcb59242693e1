"""Large raw fields that cross from a worker process to the training process through shared
memory, not through the loader's pipe.

A batch's column of ``bytes`` values, or a sample's ``bytes`` field, crosses from a loader's
worker pickled through a pipe: on 100 kB samples the pipe and the copies on both of its ends
held two workers to a sixth of what one process reads (benchmarks/README.md, issue 34). Here
the large ones take the slots of :mod:`wdspipes.samples.handover` instead: when the worker
pickles an item for the training process, its large values are copied one after another into a
free slot of the worker's pool, and the item crosses with each of them replaced by its place
there; the training process copies them back into ``bytes`` objects as it unpickles the item
and frees the slot at once. What arrives is what was sent: ``bytes`` objects, in the lists,
dicts and tuples they were in. When no slot is free, the item crosses as before.

Large means a ``bytes`` value of at least :data:`~wdspipes.samples.handover.RAW_MIN_BYTES`
(64 KiB), or a batch column of ``bytes`` values adding up to that. Which items carry them:

- a batch that ``collate`` made in a worker: its large column is a
  :class:`~wdspipes.samples.handover.BytesColumn` (a ``list`` that crosses as one block), under
  any loader;
- the :class:`~wdspipes.samples.batch.SampleList` of ``batched(n, collation_fn=None)``: the
  large fields of its samples, in one slot;
- under DataLoader2, every item of a wdspipes pipeline (which crosses in a
  :class:`~wdspipes.loaders.loader_state.Tagged`): its large values (of a sample, of a batch's
  columns, of a SampleList's samples), in one slot;
- under torch's ``DataLoader`` (and ``StatefulDataLoader``), a sample that the pipeline gives
  the worker's loop: each of its large values, as a :class:`CrossingBytes` (a copy). The
  DataPipe front ends mark them so (:func:`leaving_worker`): their ``__iter__`` checks once an
  epoch whether the front end is the dataset of such a worker
  (:func:`wdspipes.pipes.datapipe.front_end`); nothing else outside this module knows of it.

Small values cross by value, as before, and so does everything when no slot is free (the
worker keeps at most :data:`~wdspipes.samples.handover.MAX_SLOTS`, each busy from the moment
the worker pickles an item until the training process has unpickled it). Outside worker
processes nothing changes: the types above pickle as plain lists and bytes. A worker's slots
go to the process that started it (its parent as ``multiprocessing`` knows it, under fork,
spawn and forkserver alike); a process that dies takes its slots with it, which are memory
files with no name (``memfd_create``), so a killed worker or training process leaves nothing
behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from multiprocessing.reduction import ForkingPickler
from typing import Any

from wdspipes.loaders.loader_state import Tagged
from wdspipes.samples.batch import SampleList
from wdspipes.samples.handover import (
    RAW_MIN_BYTES,
    BytesColumn,
    in_worker,
    pack_bytes,
    unpack_bytes,
)

__all__ = ["CrossingBytes", "leaving_worker"]


class CrossingBytes(bytes):
    """A large ``bytes`` value of a sample on its way out of a worker of torch's ``DataLoader``
    (see :func:`leaving_worker`): a copy, which crosses through a slot and arrives a plain
    ``bytes``; pickled any other way, it is a plain ``bytes``."""

    def __reduce__(self) -> tuple[Any, ...]:
        return bytes, (bytes(self),)


def leaving_worker(items: Iterable[Any]) -> Iterator[Any]:
    """The items a pipeline gives the loop of a worker of torch's ``DataLoader``, with each
    large ``bytes`` value of a sample (a dict's values, a tuple's or list's items) made a
    :class:`CrossingBytes`, which crosses through a slot."""
    for item in items:
        kind = type(item)
        if kind is dict:
            if any(_large(value) for value in item.values()):
                item = {key: _crossing(value) for key, value in item.items()}
        elif (kind is tuple or kind is list) and any(_large(value) for value in item):
            item = kind(_crossing(value) for value in item)
        yield item


def _large(value: Any) -> bool:
    return type(value) is bytes and len(value) >= RAW_MIN_BYTES


def _crossing(value: Any) -> Any:
    return CrossingBytes(value) if _large(value) else value


# -- pickling: large values into a slot, placeholders in their places ------------------------


class _Field:
    """The place of a large value among the values of a slot."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple[Any, ...]:
        return _Field, (self.index,)


class _Column:
    """The places of a :class:`~wdspipes.samples.handover.BytesColumn`'s values among the
    values of a slot."""

    __slots__ = ("count", "start")

    def __init__(self, start: int, count: int) -> None:
        self.start, self.count = start, count

    def __reduce__(self) -> tuple[Any, ...]:
        return _Column, (self.start, self.count)


_CONTAINERS = (dict, list, tuple, SampleList)


def _strip(value: Any, fields: list[bytes], depth: int) -> Any:
    """``value`` with its large values (down ``depth`` levels of containers) moved to
    ``fields`` and placeholders in their places; ``value`` itself where it has none."""
    kind = type(value)
    if kind is bytes or kind is CrossingBytes:
        if len(value) < RAW_MIN_BYTES:
            return value
        fields.append(value)
        return _Field(len(fields) - 1)
    if kind is BytesColumn:
        fields.extend(value)
        return _Column(len(fields) - len(value), len(value))
    if not depth or kind not in _CONTAINERS:
        return value
    found = len(fields)
    if kind is dict:
        stripped: Any = {key: _strip(each, fields, depth - 1) for key, each in value.items()}
    else:
        stripped = kind([_strip(each, fields, depth - 1) for each in value])
    return value if len(fields) == found else stripped


def _fill(value: Any, fields: list[bytes], depth: int) -> Any:
    """The inverse of :func:`_strip`: the values in the places of the placeholders."""
    kind = type(value)
    if kind is _Field:
        return fields[value.index]
    if kind is _Column:
        return fields[value.start : value.start + value.count]
    if not depth or kind not in _CONTAINERS:
        return value
    if kind is dict:
        return {key: _fill(each, fields, depth - 1) for key, each in value.items()}
    return kind([_fill(each, fields, depth - 1) for each in value])


def _carried(value: Any, depth: int) -> tuple[Any, ...] | None:
    """The reduction of ``value`` with its large values in a slot; None if it has none, or no
    slot is free."""
    fields: list[bytes] = []
    skeleton = _strip(value, fields, depth)
    if not fields:
        return None
    packed = pack_bytes(fields)
    return None if packed is None else (_unpacked, (skeleton, depth, *packed))


def _unpacked(
    skeleton: Any, depth: int, fd_box: Any, key: Any, generation: int, lengths: list[int]
) -> Any:
    return _fill(skeleton, unpack_bytes(fd_box, key, generation, lengths), depth)


class _Carried:
    """A value that unpickles as itself, its large values having crossed through a slot."""

    __slots__ = ("reduction",)

    def __init__(self, reduction: tuple[Any, ...]) -> None:
        self.reduction = reduction

    def __reduce__(self) -> tuple[Any, ...]:
        return self.reduction


def _reduce_alone(value: CrossingBytes | BytesColumn) -> tuple[Any, ...]:
    return (in_worker() and _carried(value, 0)) or value.__reduce__()


def _reduce_samples(samples: SampleList) -> tuple[Any, ...]:
    return (in_worker() and _carried(samples, 2)) or (SampleList, (list(samples),))


def _reduce_tagged(tagged: Tagged) -> tuple[Any, ...]:
    reduction = in_worker() and _carried(tagged.value, 3)
    value = _Carried(reduction) if reduction else tagged.value
    return _tagged, (value, tagged.number, tagged.epoch, tagged.worker)


def _tagged(value: Any, number: int, epoch: int | None, worker: int) -> Tagged:
    tagged = Tagged(value, number, epoch)
    tagged.worker = worker
    return tagged


# Only wdspipes' own types: pickled for another process, they carry their large values in a
# slot where this is a worker (elsewhere as ever, the check a function call).
ForkingPickler.register(CrossingBytes, _reduce_alone)
ForkingPickler.register(BytesColumn, _reduce_alone)
ForkingPickler.register(SampleList, _reduce_samples)
ForkingPickler.register(Tagged, _reduce_tagged)
