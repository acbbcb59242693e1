"""The DataPipes of the stages on samples whose logic is torch-free (:mod:`wdspipes.samples`),
each the front end of its core class."""

from __future__ import annotations

from typing import Any, TypeVar

from wdspipes.core.datapipe import Sample, StageDataPipe, functional_stage
from wdspipes.samples import epochs, fields, shuffle
from wdspipes.samples.decoders import decoder

__all__ = [
    "BufferShuffler",
    "EpochLimiter",
    "EpochRepeater",
    "FieldMapper",
    "ItemSlicer",
    "LengthSetter",
    "Renamer",
    "SampleDecoder",
    "SampleMapper",
    "SampleSelector",
    "TupleMaker",
    "TupleMapper",
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
