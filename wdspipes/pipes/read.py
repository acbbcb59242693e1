"""The DataPipes of the read path: shard lists, the opener and the readers (tar members,
samples, CBOR and msgpack stream shards), and the shards claimed from a directory, each the
front end of its stage class in :mod:`wdspipes.read` (``StageClass.DataPipe``), by its name.

>>> from wdspipes.pipes.read import ShardList
>>> type(ShardList("a.tar").open_shards()).__mro__[1]
<class 'wdspipes.read.opener.ShardOpener'>
"""

from __future__ import annotations

from wdspipes.read import directory, grouping, opener, shards, stream_shards, tar

__all__ = [
    "CborLoader",
    "MsgpackLoader",
    "SampleGrouper",
    "ShardClaimer",
    "ShardList",
    "ShardLister",
    "ShardOpener",
    "ShardResampler",
    "TarLoader",
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
