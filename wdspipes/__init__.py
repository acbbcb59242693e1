"""wdspipes: train PyTorch models on WebDataset shards through registered DataPipes.

Importing the package registers its functional stages on ``IterDataPipe``: ``list_shards``,
``resample_shards``, ``open_shards``, ``load_tar``, ``group_samples``, ``decode``,
``buffer_shuffle``, ``to_tuple``, ``map_tuple``, ``map_dict``, ``rename``, ``select``,
``map_samples``, ``islice``, ``batched``, ``unbatched``, ``with_epoch``, ``with_length`` and
``repeat_epochs``.
"""

from wdspipes.batch import Batcher, Unbatcher, batched, collate, unbatched
from wdspipes.curried import Stage
from wdspipes.decoders import (
    Continue,
    ImageDecoder,
    SampleDecoder,
    UntrustedDataError,
    decode,
    handle_extension,
)
from wdspipes.distributed import ShardSplitError, full_sync
from wdspipes.epochs import (
    EpochLimiter,
    EpochRepeater,
    LengthSetter,
    repeat,
    with_epoch,
    with_length,
)
from wdspipes.errors import (
    CollationError,
    CommandError,
    DataWarning,
    DecodeError,
    DuplicateFieldError,
    MissingFieldError,
    SampleError,
    ShardError,
    ShardOpenError,
    TarFormatError,
    TruncatedShardError,
    WdsError,
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from wdspipes.fields import (
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
from wdspipes.grouping import SampleGrouper, group_by_keys
from wdspipes.io import ShardOpener, ShardStream, open_url, url_opener
from wdspipes.loaders import fix_dataloader2
from wdspipes.pipeline import DataPipeline, IteratorStage, WebDataset, tarfile_to_samples
from wdspipes.shards import (
    ResampledShards,
    ShardList,
    ShardLister,
    ShardResampler,
    SimpleShardList,
    expand_urls,
    split_by_node,
    split_by_worker,
)
from wdspipes.shuffle import BufferShuffler, shuffle
from wdspipes.tar import TarLoader, TarMember, iter_tar, tar_file_expander

__version__ = "0.1.0.dev0"

fix_dataloader2()  # if torchdata's DataLoader2 was imported first (see wdspipes.loaders)

__all__ = [
    "Batcher",
    "BufferShuffler",
    "CollationError",
    "CommandError",
    "Continue",
    "DataPipeline",
    "DataWarning",
    "DecodeError",
    "DuplicateFieldError",
    "EpochLimiter",
    "EpochRepeater",
    "FieldMapper",
    "ImageDecoder",
    "ItemSlicer",
    "IteratorStage",
    "LengthSetter",
    "MissingFieldError",
    "Renamer",
    "ResampledShards",
    "SampleDecoder",
    "SampleError",
    "SampleGrouper",
    "SampleMapper",
    "SampleSelector",
    "ShardError",
    "ShardList",
    "ShardLister",
    "ShardOpenError",
    "ShardOpener",
    "ShardResampler",
    "ShardSplitError",
    "ShardStream",
    "SimpleShardList",
    "Stage",
    "TarFormatError",
    "TarLoader",
    "TarMember",
    "TruncatedShardError",
    "TupleMaker",
    "TupleMapper",
    "Unbatcher",
    "UntrustedDataError",
    "WdsError",
    "WebDataset",
    "batched",
    "collate",
    "decode",
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
    "open_url",
    "rename",
    "repeat",
    "reraise_exception",
    "select",
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
