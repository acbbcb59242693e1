"""The shards' index: wids' ``wids-shard-index-v1`` JSON, which ``reshard``, ``create`` and
``wdspipes index`` write, and which wids' ``ShardListDataset`` reads. No torch.

An index lists shards with their number of samples (and, optionally, their size in bytes)::

    {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "train",
     "shardlist": [{"url": "train-000000.tar", "nsamples": 10000, "filesize": 104858624},
                   ...]}

URLs resolve as wids resolves them: a relative URL against the directory of the index's own
URL (or the ``base`` given), joined and normalised as paths are, so ``train-000000.tar`` in
``s3://bucket/data/train.json`` is ``s3://bucket/data/train-000000.tar``; an absolute path or
a URL with a scheme stays as it is. Two differences: a ``"base"`` key in the index (which
``widsindex create --base`` writes) is used, where wids 0.1.11 ignores it at the top level, and
a ``pipe:`` URL of an index (a file, or a list of dicts) is refused unless
``commands="any"``: an index is data, and data does not run commands (see
:mod:`wdspipes.io.pipe`). Sub-datasets (``"datasets": [{"source_url": ...}]`` or
``[{"shardlist": [...]}]``) are followed one level deep, as wids follows them; the URLs of an
inline sub-dataset without a ``"base"`` resolve against the index's base (wids leaves them as
they are, relative to the working directory), and their samples carry the sub-dataset's name
as ``__dataset__``.

>>> entries = load_index([{"url": "a.tar", "nsamples": 3}, {"url": "b.tar", "nsamples": 2}],
...                      base="/data")
>>> [(entry.url, entry.samples) for entry in entries]
[('/data/a.tar', 3), ('/data/b.tar', 2)]
>>> merge_url("http://host/data", "../other/c.tar")
'http://host/other/c.tar'
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse, urlunparse

from wdspipes.errors import ShardIndexError, ShardOpenError
from wdspipes.io.local import reading_path, url_scheme
from wdspipes.io.pipe import Commands, check_command
from wdspipes.io.urls import open_url
from wdspipes.redaction import redact

BLOCK = 512  # bytes of a tar header

__all__ = [
    "INDEX_KIND",
    "INDEX_LIMIT",
    "ShardEntry",
    "load_index",
    "merge_url",
    "url_directory",
]

INDEX_KIND = "wids-shard-index-v1"
"""The ``__kind__`` of an index file."""

INDEX_LIMIT = 256 << 20
"""Bytes an index file may hold at most (a million shards take about 100 MB)."""

Index = str | os.PathLike[str] | Sequence[Mapping[str, Any]]
"""A shards' index: the path or URL of an index file, or a list of ``{"url", "nsamples"}``
dicts."""


@dataclass(frozen=True)
class ShardEntry:
    """One shard of an index: its URL (resolved), samples, size in bytes if the index says
    it, and the name of the sub-dataset it came from, if any (wids' ``__dataset__``)."""

    url: str
    samples: int
    size: int | None = None
    dataset: str | None = None


def url_directory(url: str) -> str:
    """The directory part of a URL or path, as wids takes it for the base of an index's URLs.

    >>> url_directory("s3://bucket/data/train.json"), url_directory("train.json")
    ('s3://bucket/data', '')
    """
    parsed = urlparse(url)
    return parsed._replace(path=posixpath.dirname(parsed.path)).geturl()


def merge_url(base: str, url: str) -> str:
    """``url`` resolved against ``base`` as wids resolves an index's URLs: the scheme and host
    of ``url`` or else of ``base``; its path if absolute, else joined to the base's path and
    normalised; query and fragment from ``url`` only.

    >>> merge_url("/data", "a.tar"), merge_url("", "./a.tar"), merge_url("/data", "/x/a.tar")
    ('/data/a.tar', 'a.tar', '/x/a.tar')
    >>> merge_url("s3://bucket/d", "https://host/e/a.tar")
    'https://host/e/a.tar'
    """
    parsed_base, parsed = urlparse(base), urlparse(url)
    if parsed.path.startswith("/"):
        path = parsed.path
    else:
        path = posixpath.normpath(posixpath.join(parsed_base.path, parsed.path))
    return urlunparse(
        (
            parsed.scheme or parsed_base.scheme,
            parsed.netloc or parsed_base.netloc,
            path,
            parsed.params,
            parsed.query,
            parsed.fragment,
        )
    )


def load_index(
    index: Index,
    *,
    base: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    commands: Commands | None = None,
) -> list[ShardEntry]:
    """The shards of an index, their URLs resolved (see the module).

    Args:
        index: the path or URL of an index file, or a list of ``{"url", "nsamples"}`` dicts
            (optionally with ``"filesize"``), as wids' ``ShardListDataset`` takes.
        base: resolve relative URLs against this instead of the index file's directory (for
            a list: against this if given, else not at all).
        storage_options: for opening an index file in an object store.
        commands: which ``pipe:`` URLs of the index run (see :mod:`wdspipes.io.pipe`): an
            index, file or list of dicts, is data, so by default none does; ``"any"`` lets
            them run, for an index you trust.

    Raises:
        ShardIndexError: the index is not JSON, too large, not a wids index, or an entry is
            malformed; the message names the index and the entry.
        ShardOpenError: the index file cannot be opened.
    """
    if isinstance(index, str | os.PathLike):
        source = os.fspath(index)
        description = _read_json(source, storage_options)
        return _resolve(description, source, base, storage_options, commands)
    if isinstance(index, Sequence) and not isinstance(index, bytes):
        entries = _entries(index, None, base, commands)
        if not entries:
            raise ShardIndexError("the shard list names no shards")
        return entries
    raise TypeError(
        f"index must be the path or URL of an index file or a list of dicts, got "
        f"{type(index).__name__}"
    )


def _read_json(source: str, storage_options: Mapping[str, Any] | None) -> Any:
    """The JSON of an index file, read whole but no more than :data:`INDEX_LIMIT` bytes."""
    stream = open_url(source, storage_options=storage_options)
    try:
        data = stream.read(INDEX_LIMIT + 1)
    finally:
        stream.close()
    if len(data) > INDEX_LIMIT:
        raise ShardIndexError(f"larger than {INDEX_LIMIT} bytes: not a shards' index?", url=source)
    try:
        return json.loads(data)
    except ValueError as exn:
        raise ShardIndexError(f"not JSON: {exn}", url=source) from exn


def _resolve(
    description: Any,
    source: str,
    base: str | None,
    storage_options: Mapping[str, Any] | None,
    commands: Commands | None,
) -> list[ShardEntry]:
    """The entries of a wids dataset description read from ``source``."""
    if not isinstance(description, dict):
        raise ShardIndexError("not a shards' index (a JSON object)", url=source)
    if description.get("wids_version") != 1:
        raise ShardIndexError(
            f"not a wids index: 'wids_version' is {description.get('wids_version')!r}, not 1",
            url=source,
        )
    if base is None:
        base = _base_of(description, url_directory(source), source)
    shards = description.get("shardlist", [])
    entries = _entries(shards, source, base, commands)
    datasets = description.get("datasets", [])
    if not isinstance(datasets, list):
        raise ShardIndexError("'datasets' is not a list", url=source)
    for number, component in enumerate(datasets):
        entries.extend(_component(component, number, source, base, storage_options, commands))
    if not entries:
        raise ShardIndexError("the index names no shards", url=source)
    return entries


def _base_of(description: dict[str, Any], directory: str, source: str) -> str:
    """An index's ``"base"`` (relative to its directory), or its directory."""
    given = description.get("base")
    if given is None:
        return directory
    if not isinstance(given, str):
        raise ShardIndexError(f"'base' is not a string: {given!r}", url=source)
    return merge_url(directory, given) if directory else given


def _component(
    component: Any,
    number: int,
    source: str,
    base: str,
    storage_options: Mapping[str, Any] | None,
    commands: Commands | None,
) -> list[ShardEntry]:
    """The entries of sub-dataset ``number``: inline, or read from its ``source_url``."""
    if not isinstance(component, dict):
        raise ShardIndexError(f"dataset {number} is not a JSON object", url=source)
    name = component.get("name")
    if "source_url" in component:
        url = component["source_url"]
        if not isinstance(url, str):
            raise ShardIndexError(f"dataset {number}: 'source_url' is not a string", url=source)
        url = _checked_url(merge_url(base, url), source, f"dataset {number}", commands)
        component = _read_json(url, storage_options)
        if not isinstance(component, dict) or "source_url" in component:
            raise ShardIndexError("a sub-dataset that is not an index of shards", url=url)
        sub_base = _base_of(component, url_directory(url), url)
        name = component.get("name", name)
        source = url
    else:
        sub_base = _base_of(component, base, source)
    if "shardlist" not in component:
        raise ShardIndexError(f"dataset {number} has no 'shardlist'", url=source)
    entries = _entries(component["shardlist"], source, sub_base, commands)
    dataset = name if isinstance(name, str) else None
    return [ShardEntry(e.url, e.samples, e.size, e.dataset or dataset) for e in entries]


def _entries(
    shards: Any, source: str | None, base: str | None, commands: Commands | None
) -> list[ShardEntry]:
    """The entries of a ``shardlist`` read from ``source`` (None: given by the program): each
    a dict with a string ``url`` and an integer ``nsamples`` >= 0 (and optionally
    ``filesize`` and ``dataset``)."""
    if not isinstance(shards, Sequence) or isinstance(shards, str | bytes):
        raise ShardIndexError("'shardlist' is not a list", url=source)
    entries = []
    for number, shard in enumerate(shards):
        what = f"shard {number}"
        if not isinstance(shard, Mapping):
            raise ShardIndexError(f"{what} is not a dict with 'url' and 'nsamples'", url=source)
        url = shard.get("url")
        if not isinstance(url, str) or not url:
            raise ShardIndexError(f"{what} has no URL string under 'url'", url=source)
        samples = _count(shard.get("nsamples"), f"{what} ({url}): 'nsamples'", source)
        size = shard.get("filesize")
        if size is not None:
            size = _count(size, f"{what} ({url}): 'filesize'", source)
            if samples > size // BLOCK:  # a sample takes one 512-byte header at least
                raise ShardIndexError(
                    f"{what} ({url}): {samples} samples cannot fit in {size} bytes", url=source
                )
        dataset = shard.get("dataset")
        if base and url_scheme(url) != "pipe":  # a command is not a path
            url = merge_url(base, url)
        url = _checked_url(url, source, what, commands)
        entries.append(
            ShardEntry(url, samples, size, dataset if isinstance(dataset, str) else None)
        )
    return entries


def _count(value: Any, what: str, source: str | None) -> int:
    if type(value) is not int or value < 0:
        raise ShardIndexError(f"{what} must be an integer >= 0, got {value!r}", url=source)
    return value


def _checked_url(url: str, source: str | None, what: str, commands: Commands | None) -> str:
    """Refuse a ``pipe:`` URL read from an index (data), unless the policy runs commands
    from the data (see :func:`~wdspipes.io.pipe.check_command`)."""
    if url_scheme(url) == "pipe" and reading_path(url) is None:
        try:
            check_command(url, commands, from_data=True)
        except ShardOpenError as refusal:
            raise ShardIndexError(
                f"{what}: the index names the command URL {redact(url)!r}, and an index is "
                f"data: {str(refusal).partition(': refused: ')[2]}",
                url=source,
            ) from None
    return url
