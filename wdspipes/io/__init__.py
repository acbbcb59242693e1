"""Opening shards, for reading and writing: URL schemes and the ``open_shards`` stage."""

from wdspipes.io.opener import (
    SCHEMES,
    ByteStream,
    ShardOpener,
    ShardStream,
    close_quietly,
    open_url,
    url_opener,
)
from wdspipes.io.sinks import ByteSink, open_sink

__all__ = [
    "SCHEMES",
    "ByteSink",
    "ByteStream",
    "ShardOpener",
    "ShardStream",
    "close_quietly",
    "open_sink",
    "open_url",
    "url_opener",
]
