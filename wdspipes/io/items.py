"""Shard items: what a shard list yields and the opener takes.

An item is a URL string, as wdspipes' own shard lists (``ShardList``, ``resample_shards``,
``list_shards``) yield them, or a dict with the URL under ``"url"``, as webdataset's shard
lists yield them (``{"url": "a.tar"}``) and as a stage of your own may, with other keys beside
it. Every stage that takes shard items takes both (the opener, the sharding filter, the
resampler, the shard shuffles, the readers, resume and the cache, which see only the URL).

A dict's other keys go with its shard into every sample read from it, each key ``k`` as the
field ``__k__``, the way webdataset turns ``url`` into ``__url__`` and ``local_path`` into
``__local_path__`` (a key already written ``__k__`` stays as it is). Such fields are not
decoded, and writers leave them out, as ``__url__``. ``stream`` is the opened stream that the
opener adds, not a field; ``key`` (``__key__``) and ``__url__`` would replace the sample's own
and are refused.

A dict item is data (shard lists read from files give them): the ``pipe:`` URL of its
``"url"`` runs no command unless the opener's ``commands`` is ``"any"`` (see
:mod:`wdspipes.io.pipe`); a URL string is the program's own.

>>> shard_url("a.tar"), shard_url({"url": "b.tar", "lang": "en"})
('a.tar', 'b.tar')
>>> shard_fields({"url": "b.tar", "lang": "en", "local_path": "/data/b.tar"})
{'__lang__': 'en', '__local_path__': '/data/b.tar'}
>>> shard_url({"path": "c.tar"})
Traceback (most recent call last):
...
wdspipes.errors.ShardItemError: a shard item must be a URL string or a dict with the URL \
under "url" (as webdataset's shard lists yield), got a dict without "url": {'path': 'c.tar'}
"""

from __future__ import annotations

import reprlib
import zlib
from collections.abc import Mapping
from typing import Any

from wdspipes.errors import ShardItemError
from wdspipes.redaction import redact

__all__ = ["ShardItem", "shard_fields", "shard_url", "url_check"]

ShardItem = str | Mapping[str, Any]
"""A shard URL, or a dict with the URL under ``"url"`` and fields for its samples."""

NOT_FIELDS = frozenset({"url", "stream"})
"""Keys of a dict item that its samples do not carry: the URL (their ``__url__``) and the
stream the opener adds."""

_REFUSED = frozenset({"key", "__key__", "__url__"})
"""Keys that would replace what the reader gives every sample."""

_shown = reprlib.Repr()
_shown.maxstring = _shown.maxother = 80


def shard_url(item: object) -> str:
    """The URL of shard item ``item``: the item itself, or a dict's ``"url"``.

    Raises:
        ShardItemError: ``item`` is neither a string nor a dict with a string under ``"url"``.
    """
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping):
        url = item.get("url")
        if isinstance(url, str):
            return url
        kind = type(url).__name__
        problem = 'a dict without "url"' if url is None else f'a dict whose "url" is a {kind}'
    else:
        problem = f"a {type(item).__name__}"
    raise ShardItemError(
        'a shard item must be a URL string or a dict with the URL under "url" (as '
        f"webdataset's shard lists yield), got {problem}: {_shown.repr(item)}"
    )


def url_check(url: str, value: int = 0) -> int:
    """The checksum (CRC-32, going on from ``value``) of a shard URL as errors and ``__url__``
    show it, its secrets hidden (see :func:`~wdspipes.redaction.redact`): what states keep of
    the shards their readers took and entered, and what a restored opener checks the shards it
    finds against. The reader sees the URL shown, the opener the URL itself; both give the
    same checksum, and a URL signed anew for the restarted job (another query value) passes.

    >>> url_check("https://h/a.tar?sig=1") == url_check("https://h/a.tar?sig=***")
    True
    """
    return zlib.crc32(redact(url).encode("utf-8", "surrogatepass"), value)


def shard_fields(item: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that every sample of dict item ``item``'s shard carries: each key but
    ``url`` and ``stream``, as ``__key__`` (see the module).

    Raises:
        ShardItemError: a key is not a string, or would replace the sample's key or URL.
    """
    fields = {}
    for name, value in item.items():
        if name in NOT_FIELDS:
            continue
        if not isinstance(name, str) or name in _REFUSED:
            what = f"the key {name!r}" if isinstance(name, str) else f"a {type(name).__name__} key"
            raise ShardItemError(
                f"the shard item {_shown.repr(dict(item))} has {what}, which its samples "
                "cannot carry: each other key k becomes the field __k__, and keys must be "
                "strings other than 'key' and '__url__'",
                url=item.get("url"),
            )
        wrapped = name.startswith("__") and name.endswith("__") and len(name) > 4
        fields[name if wrapped else f"__{name}__"] = value
    return fields
