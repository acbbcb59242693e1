"""The DataPipes of the stages on samples (:mod:`wdspipes.samples`): each stage class's front
end (``StageClass.DataPipe``, see :mod:`wdspipes.pipes.datapipe`), by its name."""

from __future__ import annotations

from wdspipes.samples import batch, epochs, fields, mix, prefetch, shuffle
from wdspipes.samples.decoders import decoder

__all__ = [
    "Batcher",
    "BufferShuffler",
    "EpochLimiter",
    "EpochRepeater",
    "FieldMapper",
    "Interleaver",
    "ItemPrefetcher",
    "ItemSlicer",
    "LengthSetter",
    "RandomInterleaver",
    "Renamer",
    "SampleDecoder",
    "SampleMapper",
    "SampleSelector",
    "TupleMaker",
    "TupleMapper",
    "Unbatcher",
]

BufferShuffler = shuffle.BufferShuffler.DataPipe
TupleMaker = fields.TupleMaker.DataPipe
TupleMapper = fields.TupleMapper.DataPipe
FieldMapper = fields.FieldMapper.DataPipe
Renamer = fields.Renamer.DataPipe
SampleSelector = fields.SampleSelector.DataPipe
SampleMapper = fields.SampleMapper.DataPipe
ItemSlicer = fields.ItemSlicer.DataPipe
EpochLimiter = epochs.EpochLimiter.DataPipe
LengthSetter = epochs.LengthSetter.DataPipe
EpochRepeater = epochs.EpochRepeater.DataPipe
SampleDecoder = decoder.SampleDecoder.DataPipe
Batcher = batch.Batcher.DataPipe
Unbatcher = batch.Unbatcher.DataPipe
Interleaver = mix.Interleaver.DataPipe
RandomInterleaver = mix.RandomInterleaver.DataPipe
ItemPrefetcher = prefetch.ItemPrefetcher.DataPipe
