"""Opening URLs, for reading and writing: the transport only, no stage. URL schemes
(:mod:`~wdspipes.io.urls`, and :mod:`~wdspipes.io.sinks` for writing); the ``open_shards``
stage that reads shard items through them is :mod:`wdspipes.read.opener`."""

from wdspipes.io.items import ShardItem, shard_fields, shard_url
from wdspipes.io.sinks import ByteSink, open_sink
from wdspipes.io.urls import SCHEMES, ByteStream, ShardStream, close_quietly, open_url

__all__ = [
    "SCHEMES",
    "ByteSink",
    "ByteStream",
    "ShardItem",
    "ShardStream",
    "close_quietly",
    "open_sink",
    "open_url",
    "shard_fields",
    "shard_url",
]
