"""Opening shards: URL schemes and the ``open_shards`` stage."""

from wdspipes.io.items import ShardItem, shard_fields, shard_url
from wdspipes.io.opener import (
    SCHEMES,
    ByteStream,
    OpenedShard,
    ShardOpener,
    ShardStream,
    close_quietly,
    open_url,
    url_opener,
)

__all__ = [
    "SCHEMES",
    "ByteStream",
    "OpenedShard",
    "ShardItem",
    "ShardOpener",
    "ShardStream",
    "close_quietly",
    "open_url",
    "shard_fields",
    "shard_url",
    "url_opener",
]
