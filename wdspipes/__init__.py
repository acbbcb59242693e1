"""wdspipes: train PyTorch models on WebDataset shards through registered DataPipes.

Importing the package registers its functional stages on ``IterDataPipe``: ``list_shards``,
``resample_shards``, ``open_shards``, ``load_tar``, ``group_samples``, ``load_cbor``,
``load_msgpack``, ``decode``, ``buffer_shuffle``, ``to_tuple``, ``map_tuple``, ``map_dict``,
``rename``, ``select``, ``map_samples``, ``islice``, ``batched``, ``unbatched``, ``with_epoch``,
``with_length`` and ``repeat_epochs``.

The folders are the way data moves: ``core`` (the stage base and registration, curried stages,
seeds, ranks and workers, the state protocol and its walker, torchdata's mends), ``read``
(shard lists, the reader base, tar, grouping, stream shards), ``io`` (opening URLs),
``samples`` (decoding, fields, shuffle, batches, epochs), ``write`` (writers and encoders) and
``tools`` (resharding), with ``cli`` and ``demo`` on top. Three modules stay at the top level:
``pipeline`` assembles stages of ``read``, ``io`` and ``samples``, so it stands above them;
``loaders`` is what a training script imports to run a pipeline, and no stage uses it;
``errors`` is the one hierarchy every folder raises and users catch. ``core.distributed`` is
in ``core`` because seeds, shard lists and the opener all need the split among ranks and
workers. docs/guide/layout.md lists every module and where each stage is.
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
    MissingFieldError,
    NoEndMarkerWarning,
    ResumeError,
    SampleError,
    ShardError,
    ShardItemError,
    ShardOpenError,
    StreamFormatError,
    TarFormatError,
    TruncatedShardError,
    WdsError,
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from wdspipes.io import ShardOpener, ShardStream, open_url, shard_url, url_opener
from wdspipes.pipeline import DataPipeline, IteratorStage, WebDataset, tarfile_to_samples
from wdspipes.read.grouping import SampleGrouper, group_by_keys
from wdspipes.read.shards import (
    ResampledShards,
    ShardList,
    ShardLister,
    ShardResampler,
    SimpleShardList,
    expand_urls,
    split_by_node,
    split_by_worker,
)
from wdspipes.read.streams import CborLoader, MsgpackLoader, cbors_to_samples, msgpack_to_samples
from wdspipes.read.tar import TarLoader, TarMember, iter_tar, tar_file_expander
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
from wdspipes.samples.shuffle import BufferShuffler, shuffle
from wdspipes.write import SampleEncoder, ShardWriter, TarWriter, encode_value
from wdspipes.write.streams import CborWriter, MsgpackWriter

__version__ = "0.1.0.dev0"

fix_dataloader2()  # if torchdata's DataLoader2 was imported first (see wdspipes.core.compat)
mend_stateful_dataloader()  # state, refusals and epoch numbers on resume (see wdspipes.core.compat)

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
    "ShardWriter",
    "SimpleShardList",
    "Stage",
    "StreamFormatError",
    "TarFormatError",
    "TarLoader",
    "TarMember",
    "TarWriter",
    "TruncatedShardError",
    "TupleMaker",
    "TupleMapper",
    "Unbatcher",
    "UntrustedDataError",
    "WdsError",
    "WebDataset",
    "batched",
    "cbors_to_samples",
    "collate",
    "decode",
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
