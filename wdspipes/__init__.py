"""wdspipes: train PyTorch models on WebDataset shards through registered DataPipes.

Importing the package registers its functional stages on ``IterDataPipe``: ``list_shards``,
``resample_shards``, ``open_shards``, ``load_tar``, ``group_samples`` and ``buffer_shuffle``.
"""

from wdspipes.curried import Stage
from wdspipes.errors import (
    CommandError,
    DataWarning,
    DuplicateFieldError,
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
    "BufferShuffler",
    "CommandError",
    "DataPipeline",
    "DataWarning",
    "DuplicateFieldError",
    "IteratorStage",
    "ResampledShards",
    "SampleError",
    "SampleGrouper",
    "ShardError",
    "ShardList",
    "ShardLister",
    "ShardOpenError",
    "ShardOpener",
    "ShardResampler",
    "ShardStream",
    "SimpleShardList",
    "Stage",
    "TarFormatError",
    "TarLoader",
    "TarMember",
    "TruncatedShardError",
    "WdsError",
    "WebDataset",
    "expand_urls",
    "group_by_keys",
    "ignore_and_continue",
    "ignore_and_stop",
    "iter_tar",
    "open_url",
    "reraise_exception",
    "shuffle",
    "split_by_node",
    "split_by_worker",
    "tar_file_expander",
    "tarfile_to_samples",
    "url_opener",
    "warn_and_continue",
    "warn_and_stop",
]
