"""Shard specs: the URLs a string or a list names. No torch: the ``wdspipes`` command expands
its arguments with it.

A shard spec is a string or a list. A string is split on ``::`` and each part is
brace-expanded (``{000..099}`` keeps its zero padding); a list is taken as is.

>>> expand_urls("data/train-{00..02}.tar::extra.tar")
['data/train-00.tar', 'data/train-01.tar', 'data/train-02.tar', 'extra.tar']
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import braceexpand

__all__ = ["ShardSpec", "expand_urls", "list_item_url"]

ShardSpec = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def expand_urls(spec: ShardSpec) -> list[str]:
    """The URLs of a shard spec: ``::`` parts of a string brace-expanded, a list as is.

    Raises:
        TypeError: the spec, or an item of a list, is not a string or path.
        ValueError: the spec gives no URL, or an empty one.
    """
    if isinstance(spec, str):
        urls = [url for part in spec.split("::") for url in braceexpand.braceexpand(part)]
    elif isinstance(spec, os.PathLike):
        urls = [os.fspath(spec)]
    elif isinstance(spec, Sequence):
        urls = [list_item_url(item, index) for index, item in enumerate(spec)]
    else:
        raise TypeError(
            f"a shard spec must be a string or a list of URLs, got {type(spec).__name__}"
        )
    if not urls:
        raise ValueError(f"the shard spec {spec!r} names no shards")
    if "" in urls:
        raise ValueError(f"the shard spec {spec!r} contains an empty URL")
    return urls


def list_item_url(item: object, index: int) -> str:
    """Item ``index`` of a shard list, as a URL: a string or a path."""
    if isinstance(item, str | os.PathLike):
        return os.fspath(item)
    raise TypeError(f"shard list item {index} must be a string or path, got {type(item).__name__}")
