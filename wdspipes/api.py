"""Every public name of wdspipes, loaded: importing this module loads torch and registers
every stage's functional name on ``IterDataPipe``.

``import wdspipes`` alone loads none of it, so that the ``wdspipes`` command starts without
torch; the package loads this module the first time a program uses one of its names, or torch
(see :mod:`wdspipes.core.loading`). ``wdspipes.X`` is ``wdspipes.api.X`` for every name here.
"""

from wdspipes.core.compat import fix_dataloader2, mend_stateful_dataloader
from wdspipes.core.curried import Stage
from wdspipes.core.distributed import ShardSplitError, full_sync
from wdspipes.core.loader_state import merge_states
from wdspipes.errors import (
    CollationError,
    CommandError,
    DataAfterEndError,
    DataWarning,
    DecodeError,
    DuplicateFieldError,
    EncodeError,
    MissingFieldError,
    NoEndMarkerWarning,
    ResumeError,
    SampleError,
    ShardError,
    ShardItemError,
    ShardOpenError,
    ShardWriteError,
    StreamFormatError,
    TarFormatError,
    TorchNameWarning,
    TruncatedShardError,
    WdsError,
    WorkerError,
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from wdspipes.io import ShardStream, open_url, shard_url
from wdspipes.io.opener import ShardOpener, url_opener
from wdspipes.pipeline import (
    DataPipeline,
    IterableSource,
    IteratorStage,
    WebDataset,
    WebLoader,
    tarfile_to_samples,
)
from wdspipes.read.grouping import SampleGrouper, group_by_keys
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
from wdspipes.read.tar import TarLoader, tar_file_expander
from wdspipes.read.walk import TarMember, iter_tar
from wdspipes.samples.batch import Batcher, Unbatcher, batched, collate, unbatched
from wdspipes.samples.decoders import (
    Continue,
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
from wdspipes.samples.shuffle import BufferShuffler, detshuffle, shuffle
from wdspipes.write import SampleEncoder, ShardWriter, TarWriter, encode_value
from wdspipes.write.streams import CborWriter, MsgpackWriter

fix_dataloader2()  # if torchdata's DataLoader2 was imported first (see wdspipes.core.compat)
mend_stateful_dataloader()  # states of other worker counts, epochs (see wdspipes.core.compat)

__all__ = [
    "Batcher",
    "BufferShuffler",
    "CborLoader",
    "CborWriter",
    "CollationError",
    "CommandError",
    "Continue",
    "DataAfterEndError",
    "DataPipeline",
    "DataWarning",
    "DecodeError",
    "DuplicateFieldError",
    "EncodeError",
    "EpochLimiter",
    "EpochRepeater",
    "FieldMapper",
    "ImageDecoder",
    "Interleaver",
    "ItemSlicer",
    "IterableSource",
    "IteratorStage",
    "LengthSetter",
    "MissingFieldError",
    "MsgpackLoader",
    "MsgpackWriter",
    "NoEndMarkerWarning",
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
    "SampleMapper",
    "SampleSelector",
    "ShardError",
    "ShardItemError",
    "ShardList",
    "ShardLister",
    "ShardOpenError",
    "ShardOpener",
    "ShardResampler",
    "ShardSplitError",
    "ShardStream",
    "ShardWriteError",
    "ShardWriter",
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
    "WorkerError",
    "batched",
    "cbors_to_samples",
    "collate",
    "decode",
    "detshuffle",
    "encode_value",
    "expand_urls",
    "fix_dataloader2",
    "full_sync",
    "group_by_keys",
    "handle_extension",
    "ignore_and_continue",
    "ignore_and_stop",
    "iter_tar",
    "map",
    "map_dict",
    "map_tuple",
    "merge_states",
    "msgpack_to_samples",
    "open_url",
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
    "with_epoch",
    "with_length",
]
