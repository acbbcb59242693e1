"""The top-level names of wdspipes, loaded: importing this module loads torch and registers
every stage's functional name on ``IterDataPipe``. ``import wdspipes`` imports it (but in the
``wdspipes`` command's process: see :mod:`wdspipes`); ``wdspipes.X`` is ``wdspipes.api.X`` for
every name here.

The top level holds what a program needs: the ways to build a pipeline (``DataPipeline``,
``WebDataset``, ``ShardList``, ``IteratorStage``, ``PipelineStage``), webdataset's vocabulary
(every name webdataset programs use), the writers, the decoders' main names, random access,
the loaders' helpers (``as_node``, ``merge_states``, ``fix_dataloader2``, ``full_sync``), the
errors and handlers, and ``Stage``, ``Epoch``, ``Resumes`` and ``register`` for writing a
stage. The rest is in its module: a stage's class in its stage module and its DataPipe front
end in :mod:`wdspipes.pipes` (``wdspipes.pipes.TarLoader``, ...), since a program builds a
stage by its functional name (``.load_tar()``) or its curried name (``wds.tarfile_to_samples``).

webdataset's names come from its layer, :mod:`wdspipes.webdataset`, never from the facades at
webdataset's module paths (``wdspipes.filters``, ...), which import the layer too.
"""

from wdspipes.core.distributed import ShardSplitError, full_sync
from wdspipes.core.protocol import Epoch, Resumes, register
from wdspipes.core.stage import Stage
from wdspipes.errors import (
    CollationError,
    CommandError,
    DataAfterEndError,
    DataWarning,
    DecodeError,
    DuplicateFieldError,
    EncodeError,
    HttpStatusError,
    IndexMismatchError,
    MemberTooLargeError,
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
    TorchdataVersionError,
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
from wdspipes.io import open_url, shard_url
from wdspipes.io.readahead import ReadAhead, ReadStats
from wdspipes.loaders.compat import fix_dataloader2, mend_stateful_dataloader
from wdspipes.loaders.loader_state import merge_states
from wdspipes.nodes import as_node
from wdspipes.pipeline import DataPipeline, IteratorStage, PipelineStage, WebDataset
from wdspipes.pipes import ShardList
from wdspipes.read.random_access import ShardListDataset, wids_sample
from wdspipes.read.samplers import ChunkedSampler, DistributedChunkedSampler, ShardedSampler
from wdspipes.read.specs import expand_urls
from wdspipes.read.walk import iter_tar
from wdspipes.samples.batch import collate
from wdspipes.samples.decoders import (
    Continue,
    DataLimitError,
    Decoder,
    ImageDecoder,
    ImageFormatError,
    ImageTooLargeError,
    RandomResizedCrop,
    UntrustedDataError,
    handle_extension,
)
from wdspipes.webdataset.compat import WebLoader
from wdspipes.webdataset.filters import getfirst, pipelinefilter
from wdspipes.webdataset.gopen import gopen
from wdspipes.webdataset.mix import RandomMix, RoundRobin
from wdspipes.webdataset.shardlists import (
    DirectoryShardList,
    ResampledShards,
    SimpleShardList,
    split_by_node,
    split_by_worker,
)
from wdspipes.webdataset.stages import (
    batched,
    cbors_to_samples,
    decode,
    detshuffle,
    map,
    map_dict,
    map_tuple,
    msgpack_to_samples,
    prefetch_items,
    rename,
    repeat,
    select,
    shuffle,
    slice,
    to_tuple,
    unbatched,
    with_epoch,
    with_length,
)
from wdspipes.webdataset.tariterators import (
    group_by_keys,
    tar_file_expander,
    tarfile_to_samples,
    url_opener,
)
from wdspipes.write import SampleEncoder, ShardWriter, TarWriter, encode_value
from wdspipes.write.stream_shards import CborWriter, MsgpackWriter

fix_dataloader2()  # if torchdata's DataLoader2 was imported first (see wdspipes.loaders.compat)
mend_stateful_dataloader()  # states of other worker counts, epochs (see wdspipes.loaders.compat)

__all__ = [
    "CborWriter",
    "ChunkedSampler",
    "CollationError",
    "CommandError",
    "Continue",
    "DataAfterEndError",
    "DataLimitError",
    "DataPipeline",
    "DataWarning",
    "DecodeError",
    "Decoder",
    "DirectoryShardList",
    "DistributedChunkedSampler",
    "DuplicateFieldError",
    "EncodeError",
    "Epoch",
    "HttpStatusError",
    "ImageDecoder",
    "ImageFormatError",
    "ImageTooLargeError",
    "IndexMismatchError",
    "IteratorStage",
    "MemberTooLargeError",
    "MissingFieldError",
    "MsgpackWriter",
    "NoEndMarkerWarning",
    "PipelineStage",
    "RandomMix",
    "RandomResizedCrop",
    "ReadAhead",
    "ReadStats",
    "ResampledShards",
    "ResumeError",
    "Resumes",
    "RoundRobin",
    "SampleEncoder",
    "SampleError",
    "ShardError",
    "ShardIndexError",
    "ShardItemError",
    "ShardList",
    "ShardListDataset",
    "ShardOpenError",
    "ShardSplitError",
    "ShardWriteError",
    "ShardWriter",
    "ShardedSampler",
    "SimpleShardList",
    "Stage",
    "StreamFormatError",
    "TarFormatError",
    "TarWriter",
    "TorchNameWarning",
    "TorchdataVersionError",
    "TruncatedShardError",
    "UntrustedDataError",
    "WdsError",
    "WebDataset",
    "WebLoader",
    "WorkerError",
    "as_node",
    "batched",
    "cbors_to_samples",
    "collate",
    "decode",
    "detshuffle",
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
    "merge_states",
    "msgpack_to_samples",
    "open_url",
    "pipelinefilter",
    "prefetch_items",
    "register",
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
