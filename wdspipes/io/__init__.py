"""Opening shards, for reading and writing: URL schemes (:mod:`~wdspipes.io.urls`, and
:mod:`~wdspipes.io.sinks` for writing) and the ``open_shards`` stage
(:mod:`~wdspipes.io.opener`, loaded with torch on first use, so that the ``wdspipes`` command
opens and writes URLs without torch)."""

import importlib
from typing import TYPE_CHECKING, Any

from wdspipes.io.items import ShardItem, shard_fields, shard_url
from wdspipes.io.sinks import ByteSink, open_sink
from wdspipes.io.urls import SCHEMES, ByteStream, ShardStream, close_quietly, open_url

if TYPE_CHECKING:
    from wdspipes.io.opener import OpenedShard, ShardOpener, url_opener

__all__ = [
    "SCHEMES",
    "ByteSink",
    "ByteStream",
    "OpenedShard",
    "ShardItem",
    "ShardOpener",
    "ShardStream",
    "close_quietly",
    "open_sink",
    "open_url",
    "shard_fields",
    "shard_url",
    "url_opener",
]


def __getattr__(name: str) -> Any:
    """``ShardOpener``, ``url_opener`` and ``OpenedShard``, the stage's, loaded with torch on
    first use."""
    if name in ("OpenedShard", "ShardOpener", "url_opener"):
        return getattr(importlib.import_module("wdspipes.io.opener"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
