"""The DataPipe front end: every stage class of wdspipes (torch-free, in ``read/``,
``samples/``, ...) with torch's ``IterDataPipe`` added, made from the class on first use
(``StageClass.DataPipe``; see :mod:`wdspipes.pipes.datapipe`), and every functional name of the
table registered on ``IterDataPipe``. A front end adds nothing per item: it inherits its stage
class's ``__iter__``. torch's own stages take part in a pipeline through the adapters of
:mod:`wdspipes.pipes.torch_stages`. Importing this package loads torch.

The front ends are here by their stage classes' names (``wdspipes.pipes.TarLoader``, ...:
:mod:`wdspipes.pipes.read` and :mod:`wdspipes.pipes.samples`), for programs that build a stage
by its class rather than by its functional name:

>>> from wdspipes.pipes import ShardList, TarLoader
>>> type(TarLoader(ShardList(["a.tar"]).open_shards())).__name__
'TarLoader'
"""

from wdspipes.pipes import datapipe, torch_stages  # noqa: F401  (registration, adapters)
from wdspipes.pipes.read import (
    CborLoader,
    MsgpackLoader,
    SampleGrouper,
    ShardClaimer,
    ShardList,
    ShardLister,
    ShardOpener,
    ShardResampler,
    TarLoader,
)
from wdspipes.pipes.samples import (
    Batcher,
    BufferShuffler,
    EpochLimiter,
    EpochRepeater,
    FieldMapper,
    Interleaver,
    ItemPrefetcher,
    ItemSlicer,
    LengthSetter,
    RandomInterleaver,
    Renamer,
    SampleDecoder,
    SampleMapper,
    SampleSelector,
    TupleMaker,
    TupleMapper,
    Unbatcher,
)

__all__ = [
    "Batcher",
    "BufferShuffler",
    "CborLoader",
    "EpochLimiter",
    "EpochRepeater",
    "FieldMapper",
    "Interleaver",
    "ItemPrefetcher",
    "ItemSlicer",
    "LengthSetter",
    "MsgpackLoader",
    "RandomInterleaver",
    "Renamer",
    "SampleDecoder",
    "SampleGrouper",
    "SampleMapper",
    "SampleSelector",
    "ShardClaimer",
    "ShardList",
    "ShardLister",
    "ShardOpener",
    "ShardResampler",
    "TarLoader",
    "TupleMaker",
    "TupleMapper",
    "Unbatcher",
]
