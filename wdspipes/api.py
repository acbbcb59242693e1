"""Every public name of wdspipes, loaded: importing this module loads torch and registers
every stage's functional name on ``IterDataPipe``.

``import wdspipes`` alone loads none of it, so that the ``wdspipes`` command starts without
torch; the package loads this module the first time a program uses one of its names, or torch
(see :mod:`wdspipes.core.loading`). ``wdspipes.X`` is ``wdspipes.api.X`` for every name here.
"""

from wdspipes.core.compat import fix_dataloader2, mend_stateful_dataloader
from wdspipes.core.curried import Stage
from wdspipes.core.distributed import ShardSplitError, full_sync
from wdspipes.errors import (
    CollationError,
    CommandError,
    DataAfterEndError,
    DataWarning,
    DecodeError,
    DuplicateFieldError,
    EncodeError,
    IndexMismatchError,
    MissingFieldError,
    NoEndMarkerWarning,
    ResumeError,
    SampleError,
    ShardError,
    ShardIndexError,
    ShardItemError,
    ShardOpenError,
    ShardWriteError,
    StreamFormatError,
    TarFormatError,
    TorchNameWarning,
    TruncatedShardError,
    WdsError,
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from wdspipes.filters import getfirst, pipelinefilter
from wdspipes.gopen import gopen
from wdspipes.io import ShardStream, open_url, shard_url
from wdspipes.io.opener import ShardOpener
from wdspipes.pipeline import (
    DataPipeline,
    IterableSource,
    IteratorStage,
    PipelineStage,
    WebDataset,
    WebLoader,
    tarfile_to_samples,
)
from wdspipes.read.directory import DirectoryShardList, ShardClaimer
from wdspipes.read.grouping import SampleGrouper
from wdspipes.read.random_access import IndexReader, SamplerIndices, ShardListDataset, wids_sample
from wdspipes.read.samplers import ChunkedSampler, DistributedChunkedSampler, ShardedSampler
from wdspipes.read.shards import (
    ResampledShards,
    ShardList,
    ShardLister,
    ShardResampler,
    SimpleShardList,
    split_by_node,
    split_by_worker,
)
from wdspipes.read.specs import expand_urls
from wdspipes.read.streams import CborLoader, MsgpackLoader, cbors_to_samples, msgpack_to_samples
from wdspipes.read.tar import TarLoader
from wdspipes.read.walk import TarMember, iter_tar
from wdspipes.samples.batch import Batcher, SampleList, Unbatcher, batched, collate, unbatched
from wdspipes.samples.decoders import (
    Continue,
    Decoder,
    ImageDecoder,
    RandomResizedCrop,
    SampleDecoder,
    UntrustedDataError,
    decode,
    handle_extension,
)
from wdspipes.samples.epochs import (
    EpochLimiter,
    EpochRepeater,
    LengthSetter,
    repeat,
    with_epoch,
    with_length,
)
from wdspipes.samples.fields import (
    FieldMapper,
    ItemSlicer,
    Renamer,
    SampleMapper,
    SampleSelector,
    TupleMaker,
    TupleMapper,
    map,
    map_dict,
    map_tuple,
    rename,
    select,
    slice,
    to_tuple,
)
from wdspipes.samples.mix import Interleaver, RandomInterleaver, RandomMix, RoundRobin
from wdspipes.samples.shuffle import BufferShuffler, shuffle
from wdspipes.tariterators import group_by_keys, tar_file_expander, url_opener
from wdspipes.write import SampleEncoder, ShardWriter, TarWriter, encode_value
from wdspipes.write.streams import CborWriter, MsgpackWriter

fix_dataloader2()  # if torchdata's DataLoader2 was imported first (see wdspipes.core.compat)
mend_stateful_dataloader()  # state, refusals and epoch numbers on resume (see wdspipes.core.compat)

__all__ = [
    "Batcher",
    "BufferShuffler",
    "CborLoader",
    "CborWriter",
    "ChunkedSampler",
    "CollationError",
    "CommandError",
    "Continue",
    "DataAfterEndError",
    "DataPipeline",
    "DataWarning",
    "DecodeError",
    "Decoder",
    "DirectoryShardList",
    "DistributedChunkedSampler",
    "DuplicateFieldError",
    "EncodeError",
    "EpochLimiter",
    "EpochRepeater",
    "FieldMapper",
    "ImageDecoder",
    "IndexMismatchError",
    "IndexReader",
    "Interleaver",
    "ItemSlicer",
    "IterableSource",
    "IteratorStage",
    "LengthSetter",
    "MissingFieldError",
    "MsgpackLoader",
    "MsgpackWriter",
    "NoEndMarkerWarning",
    "PipelineStage",
    "RandomInterleaver",
    "RandomMix",
    "RandomResizedCrop",
    "Renamer",
    "ResampledShards",
    "ResumeError",
    "RoundRobin",
    "SampleDecoder",
    "SampleEncoder",
    "SampleError",
    "SampleGrouper",
    "SampleList",
    "SampleMapper",
    "SampleSelector",
    "SamplerIndices",
    "ShardClaimer",
    "ShardError",
    "ShardIndexError",
    "ShardItemError",
    "ShardList",
    "ShardListDataset",
    "ShardLister",
    "ShardOpenError",
    "ShardOpener",
    "ShardResampler",
    "ShardSplitError",
    "ShardStream",
    "ShardWriteError",
    "ShardWriter",
    "ShardedSampler",
    "SimpleShardList",
    "Stage",
    "StreamFormatError",
    "TarFormatError",
    "TarLoader",
    "TarMember",
    "TarWriter",
    "TorchNameWarning",
    "TruncatedShardError",
    "TupleMaker",
    "TupleMapper",
    "Unbatcher",
    "UntrustedDataError",
    "WdsError",
    "WebDataset",
    "WebLoader",
    "batched",
    "cbors_to_samples",
    "collate",
    "decode",
    "encode_value",
    "expand_urls",
    "fix_dataloader2",
    "full_sync",
    "getfirst",
    "gopen",
    "group_by_keys",
    "handle_extension",
    "ignore_and_continue",
    "ignore_and_stop",
    "iter_tar",
    "map",
    "map_dict",
    "map_tuple",
    "msgpack_to_samples",
    "open_url",
    "pipelinefilter",
    "rename",
    "repeat",
    "reraise_exception",
    "select",
    "shard_url",
    "shuffle",
    "slice",
    "split_by_node",
    "split_by_worker",
    "tar_file_expander",
    "tarfile_to_samples",
    "to_tuple",
    "unbatched",
    "url_opener",
    "warn_and_continue",
    "warn_and_stop",
    "wids_sample",
    "with_epoch",
    "with_length",
]
