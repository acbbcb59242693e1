"""The DataPipes of the stages on samples whose logic is torch-free (:mod:`wdspipes.samples`),
each the front end of its core class."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper

from wdspipes.pipes.datapipe import Sample, StageDataPipe, front_end, functional_stage
from wdspipes.samples import batch, epochs, fields, mix, shuffle
from wdspipes.samples.decoders import decoder

__all__ = [
    "Batcher",
    "BufferShuffler",
    "EpochLimiter",
    "EpochRepeater",
    "FieldMapper",
    "Interleaver",
    "ItemSlicer",
    "LengthSetter",
    "RandomInterleaver",
    "RandomMix",
    "Renamer",
    "RoundRobin",
    "SampleDecoder",
    "SampleMapper",
    "SampleSelector",
    "TupleMaker",
    "TupleMapper",
    "Unbatcher",
]

T = TypeVar("T")


@functional_stage("buffer_shuffle")
class BufferShuffler(shuffle.BufferShuffler[T], StageDataPipe[T]):
    """The DataPipe of :class:`wdspipes.samples.shuffle.BufferShuffler`."""


@functional_stage("to_tuple")
class TupleMaker(fields.TupleMaker, StageDataPipe[tuple[Any, ...]]):
    """The DataPipe of :class:`wdspipes.samples.fields.TupleMaker`."""


@functional_stage("map_tuple")
class TupleMapper(fields.TupleMapper, StageDataPipe[tuple[Any, ...]]):
    """The DataPipe of :class:`wdspipes.samples.fields.TupleMapper`."""


@functional_stage("map_dict")
class FieldMapper(fields.FieldMapper, StageDataPipe[Sample]):
    """The DataPipe of :class:`wdspipes.samples.fields.FieldMapper`."""


@functional_stage("rename")
class Renamer(fields.Renamer, StageDataPipe[Sample]):
    """The DataPipe of :class:`wdspipes.samples.fields.Renamer`."""


@functional_stage("select")
class SampleSelector(fields.SampleSelector, StageDataPipe[Any]):
    """The DataPipe of :class:`wdspipes.samples.fields.SampleSelector`."""


@functional_stage("map_samples")
class SampleMapper(fields.SampleMapper, StageDataPipe[Any]):
    """The DataPipe of :class:`wdspipes.samples.fields.SampleMapper`."""


@functional_stage("islice")
class ItemSlicer(fields.ItemSlicer, StageDataPipe[Any]):
    """The DataPipe of :class:`wdspipes.samples.fields.ItemSlicer`."""


@functional_stage("with_epoch")
class EpochLimiter(epochs.EpochLimiter, StageDataPipe[Any]):
    """The DataPipe of :class:`wdspipes.samples.epochs.EpochLimiter`."""


@functional_stage("with_length")
class LengthSetter(epochs.LengthSetter, StageDataPipe[Any]):
    """The DataPipe of :class:`wdspipes.samples.epochs.LengthSetter`."""


@functional_stage("repeat_epochs")
class EpochRepeater(epochs.EpochRepeater, StageDataPipe[Any]):
    """The DataPipe of :class:`wdspipes.samples.epochs.EpochRepeater`."""


@functional_stage("decode")
class SampleDecoder(decoder.SampleDecoder, StageDataPipe[Sample]):
    """The DataPipe of :class:`wdspipes.samples.decoders.decoder.SampleDecoder`."""


@functional_stage("batched")
class Batcher(batch.Batcher, StageDataPipe[Any]):
    """The DataPipe of :class:`wdspipes.samples.batch.Batcher`."""


@functional_stage("unbatched")
class Unbatcher(batch.Unbatcher, StageDataPipe[Any]):
    """The DataPipe of :class:`wdspipes.samples.batch.Unbatcher`."""


def _as_datapipe(source: Iterable[T]) -> Iterable[T]:
    """A mixer's source as its DataPipe reads it: a DataPipe as it is, a plain iterable
    wrapped (not copied) in torch's ``IterableWrapper``, as torch's graph traversal expects."""
    return source if isinstance(source, IterDataPipe) else IterableWrapper(source, deepcopy=False)


@functional_stage("interleave")
class Interleaver(mix.Interleaver[T], StageDataPipe[T]):
    """The DataPipe of :class:`wdspipes.samples.mix.Interleaver`."""

    _as_source = staticmethod(_as_datapipe)


@front_end
class RoundRobin(mix.RoundRobin[T], Interleaver[T]):
    """The DataPipe of :class:`wdspipes.samples.mix.RoundRobin`."""


@functional_stage("interleave_randomly")
class RandomInterleaver(mix.RandomInterleaver[T], StageDataPipe[T]):
    """The DataPipe of :class:`wdspipes.samples.mix.RandomInterleaver`."""

    _as_source = staticmethod(_as_datapipe)


@front_end
class RandomMix(mix.RandomMix[T], RandomInterleaver[T]):
    """The DataPipe of :class:`wdspipes.samples.mix.RandomMix`."""
