"""webdataset's ``webdataset.shardlists`` module path: shard specs and shard lists, wdspipes'
own. ``expand_urls`` needs no torch; the shard lists and splits load with it on first use.

>>> expand_urls("a-{0..2}.tar::b.tar")
['a-0.tar', 'a-1.tar', 'a-2.tar', 'b.tar']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wdspipes.core.loading import compat_name
from wdspipes.read.specs import expand_urls

if TYPE_CHECKING:
    from wdspipes.api import (
        DirectoryShardList,
        ResampledShards,
        SimpleShardList,
        split_by_node,
        split_by_worker,
    )

__all__ = [
    "DirectoryShardList",
    "ResampledShards",
    "SimpleShardList",
    "expand_urls",
    "split_by_node",
    "split_by_worker",
]

_LAZY = {
    name: "wdspipes.api"
    for name in (
        "DirectoryShardList",
        "ResampledShards",
        "SimpleShardList",
        "split_by_node",
        "split_by_worker",
    )
}
_MISSING = {
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


def __getattr__(name: str) -> Any:
    return compat_name(__name__, name, _LAZY, _MISSING)
