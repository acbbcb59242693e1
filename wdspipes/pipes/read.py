"""The DataPipes of the read path: shard lists, their split among ranks and workers, the
opener and the readers (tar members, samples, CBOR and msgpack stream shards), each the front
end of its stage class in :mod:`wdspipes.read` (``StageClass.DataPipe``), by its name.

>>> import wdspipes as wds
>>> type(wds.ShardList("a.tar").open_shards()).__mro__[1]
<class 'wdspipes.read.opener.ShardOpener'>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe

from wdspipes.core.engine import upstream_of
from wdspipes.io.items import ShardItem
from wdspipes.read import directory, grouping, opener, shards, stream_shards, tar
from wdspipes.read.specs import ShardSpec

__all__ = [
    "CborLoader",
    "MsgpackLoader",
    "ResampledShards",
    "SampleGrouper",
    "ShardClaimer",
    "ShardList",
    "ShardLister",
    "ShardOpener",
    "ShardResampler",
    "ShardSplit",
    "SimpleShardList",
    "TarLoader",
    "is_split",
    "split_by_node",
    "split_by_worker",
]


ShardList = shards.ShardList.DataPipe
ShardLister = shards.ShardLister.DataPipe
ShardResampler = shards.ShardResampler.DataPipe
ShardOpener = opener.ShardOpener.DataPipe
TarLoader = tar.TarLoader.DataPipe
SampleGrouper = grouping.SampleGrouper.DataPipe
CborLoader = stream_shards.CborLoader.DataPipe
MsgpackLoader = stream_shards.MsgpackLoader.DataPipe
ShardClaimer = directory.ShardClaimer.DataPipe

SimpleShardList = ShardList
"""webdataset's name for :class:`ShardList`, for use in ``DataPipeline(...)``. It yields URL
strings where webdataset's yields ``{"url": ...}`` dicts (see :mod:`wdspipes.io.items`)."""


def ResampledShards(
    urls: ShardSpec | Sequence[ShardItem], nshards: int | None = None, seed: int | None = None
) -> IterDataPipe[ShardItem]:
    """Shards of ``urls`` drawn with replacement, split among ranks and workers:
    ``ShardList(urls).resample_shards(nshards, seed).sharding_filter()``.

    Every rank and worker draws the same stream (from ``seed``, or the loader's shared seed)
    and reads its own part of it, so readers never repeat one another's draws, and ``nshards``
    counts the draws of all readers together. This differs from webdataset, whose
    ``ResampledShards`` draws apart in each worker: see docs/distributed.md. Being split
    already, it needs no ``split_by_node``/``split_by_worker`` (a ``DataPipeline`` skips them).

    >>> sorted(set(ResampledShards("s-{0..1}.tar", nshards=50, seed=0)))
    ['s-0.tar', 's-1.tar']
    """
    return ShardingFilterIterDataPipe(ShardResampler(ShardList(urls), nshards=nshards, seed=seed))


class ShardSplit:
    """Marks where a pipeline splits its shards among ranks and workers.

    In ``DataPipeline(...)``, ``split_by_node`` and ``split_by_worker`` (one or both) become a
    single core ``sharding_filter`` at the first of them: DataLoader2 and plain DataLoader
    then give each rank and each worker its own shards. Called on a DataPipe, a marker
    returns ``source.sharding_filter()``. Where the source is split already (``ResampledShards``
    ends in a sharding filter), the marker changes nothing: two filters on one branch would
    make the loaders fail with "Sharding twice".
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, source: IterDataPipe[Any]) -> IterDataPipe[Any]:
        if not isinstance(source, IterDataPipe):
            raise TypeError(
                f"{self.name} splits an IterDataPipe of shard URLs; got {type(source).__name__}"
            )
        if is_split(source):
            return source
        return ShardingFilterIterDataPipe(source)

    def __repr__(self) -> str:
        return self.name


def is_split(datapipe: IterDataPipe[Any]) -> bool:
    """Whether ``datapipe`` is, or reads from, a core sharding filter."""
    return any(
        isinstance(stage, ShardingFilterIterDataPipe)
        for stage in (datapipe, *upstream_of(datapipe))
    )


split_by_node = ShardSplit("split_by_node")
"""webdataset's ``split_by_node``: in ``DataPipeline(...)``, the split of the shards among
ranks and workers (see :class:`ShardSplit`)."""
split_by_worker = ShardSplit("split_by_worker")
"""webdataset's ``split_by_worker``: the same split as :data:`split_by_node` (one sharding
filter splits among ranks and workers alike)."""
