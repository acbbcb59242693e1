"""Opening shards: URL schemes and the ``open_shards`` stage."""

from wdspipes.io.opener import (
    SCHEMES,
    ByteStream,
    ShardOpener,
    ShardStream,
    close_quietly,
    open_url,
    url_opener,
)

__all__ = [
    "SCHEMES",
    "ByteStream",
    "ShardOpener",
    "ShardStream",
    "close_quietly",
    "open_url",
    "url_opener",
]
