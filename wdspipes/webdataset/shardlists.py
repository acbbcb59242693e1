"""webdataset's ``webdataset.shardlists`` (``wdspipes.shardlists``): shard specs, shard lists
and the split of the shards among ranks and workers, over wdspipes' shard list stages
(:mod:`wdspipes.read.shards`, :mod:`wdspipes.read.directory`).

>>> expand_urls("a-{0..2}.tar::b.tar")
['a-0.tar', 'a-1.tar', 'a-2.tar', 'b.tar']
>>> from wdspipes.pipeline import DataPipeline
>>> list(DataPipeline(SimpleShardList("a-{0..2}.tar"), split_by_node, split_by_worker))
['a-0.tar', 'a-1.tar', 'a-2.tar']
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, cast

from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe

from wdspipes.io.items import ShardItem
from wdspipes.pipeline import ShardSplit
from wdspipes.pipes.read import ShardList, ShardResampler
from wdspipes.read.directory import ShardClaimer
from wdspipes.read.specs import ShardSpec, expand_urls
from wdspipes.webdataset.missing import no_counterpart

__all__ = [
    "DirectoryShardList",
    "ResampledShards",
    "SimpleShardList",
    "expand_urls",
    "split_by_node",
    "split_by_worker",
]

SimpleShardList = ShardList
"""webdataset's name for :class:`~wdspipes.read.shards.ShardList` (its DataPipe), for use in
``DataPipeline(...)``. It yields URL strings where webdataset's yields ``{"url": ...}`` dicts
(see :mod:`wdspipes.io.items`)."""


def ResampledShards(
    urls: ShardSpec | Sequence[ShardItem], nshards: int | None = None, seed: int | None = None
) -> IterDataPipe[ShardItem]:
    """Shards of ``urls`` drawn with replacement, split among ranks and workers:
    ``ShardList(urls).resample_shards(nshards, seed).sharding_filter()``.

    Every rank and worker draws the same stream (from ``seed``, or the loader's shared seed)
    and reads its own part of it, so readers never repeat one another's draws, and ``nshards``
    counts the draws of all readers together. This differs from webdataset, whose
    ``ResampledShards`` draws apart in each worker: see docs/recipes/distributed.md. Being split
    already, it needs no ``split_by_node``/``split_by_worker`` (a ``DataPipeline`` skips them).

    >>> sorted(set(ResampledShards("s-{0..1}.tar", nshards=50, seed=0)))
    ['s-0.tar', 's-1.tar']
    """
    return ShardingFilterIterDataPipe(ShardResampler(ShardList(urls), nshards=nshards, seed=seed))


split_by_node = ShardSplit("split_by_node")
"""webdataset's ``split_by_node``: in ``DataPipeline(...)``, the split of the shards among
ranks and workers (see :class:`~wdspipes.pipeline.ShardSplit`)."""
split_by_worker = ShardSplit("split_by_worker")
"""webdataset's ``split_by_worker``: the same split as :data:`split_by_node` (one sharding
filter splits among ranks and workers alike)."""


def DirectoryShardList(
    path: str,
    pattern: str = "*.{tar,tgz,tar.tgz}",
    poll: float | None = 1,
    timeout: float = 1e12,
    mode: str = "resample",
    select: str = "random",
    fate: object = None,
) -> IterDataPipe[dict[str, str]]:
    """webdataset's ``DirectoryShardList(path, ...)``: the shards claimed from directory
    ``path`` (``claim_shards`` on it; see :class:`~wdspipes.read.directory.ShardClaimer` for
    the arguments), yielded as webdataset's are, ``{"url": path}``. Unlike webdataset's, the
    default pattern's ``{tar,tgz,tar.tgz}`` alternatives are expanded (see
    :mod:`wdspipes.read.directory` for the other differences).

    Raises:
        NotADirectoryError: ``path`` is not a directory.
    """
    if not os.path.isdir(path):
        raise NotADirectoryError(f"DirectoryShardList: {path!r} is not a directory")
    claimer = ShardClaimer.DataPipe(
        [path],
        pattern=pattern,
        poll=poll,
        timeout=timeout,
        mode=mode,
        select=select,
        fate=fate,
    )
    return cast(IterDataPipe[dict[str, str]], claimer)


MISSING = {
    "expand_source": "expand_urls(spec) for a string; a list is taken as it is",
    "resampled": "resample_shards(nshards) on the shard list",
    "ResampledShardList": "ResampledShards",
    "non_empty": "nothing: an empty epoch under with_epoch or repeat is a warning, a rank "
    "without shards a ShardSplitError",
    "single_node_only": "nothing: the split among ranks is built in",
    "MultiShardSample": "shard specs joined with '::', or lists; weights with RandomMix",
    "MSSource": "shard specs joined with '::', or lists; weights with RandomMix",
    "shardspec": "shard specs joined with '::', or lists",
    "envsubst": "nothing: shard specs do not substitute ${VAR} from the environment",
    "envlookup": "nothing: shard specs do not substitute ${VAR} from the environment",
    "resampled_": "resample_shards(nshards) on the shard list",
    "expand": "shard specs joined with '::', or lists",
    "default_rng": "the seed= of the random stages",
    "check_pid_is_running": "DirectoryShardList does it itself (wdspipes.read.directory)",
    "get_pid_from_filename": "DirectoryShardList does it itself (wdspipes.read.directory)",
    "without_last_extension": "DirectoryShardList does it itself (wdspipes.read.directory)",
    "is_iterable": "isinstance(obj, collections.abc.Iterable)",
    "obsolete": "nothing",
    "pipelinefilter": "wdspipes.filters.pipelinefilter",
}
"""webdataset's names that wdspipes does not provide here, and what to use instead."""


def __getattr__(name: str) -> Any:
    raise no_counterpart("wdspipes.shardlists", name, MISSING)
