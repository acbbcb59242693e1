"""The shards' index: wids' ``wids-shard-index-v1`` JSON that ``reshard`` and ``create`` write
beside their shards, and ``wdspipes index`` writes for existing shards (as wids'
``widsindex create`` does), with the offsets of each local shard's samples in a sidecar file
beside it (:mod:`wdspipes.read.offsets`). No torch.

The index holds each shard's URL (relative to the index's directory where both are local, so
that the index moves with its shards), its number of samples, its size in bytes and, unless
asked not to, its MD5 sum, as ``widsindex create`` writes them.

>>> import io, json, os, tarfile, tempfile
>>> directory = tempfile.mkdtemp()
>>> with tarfile.open(os.path.join(directory, "a.tar"), "w") as tf:
...     info = tarfile.TarInfo("0.txt"); info.size = 2
...     tf.addfile(info, io.BytesIO(b"hi"))
>>> report = index_shards([os.path.join(directory, "a.tar")], os.path.join(directory, "i.json"))
>>> with open(report.path) as file:
...     entry = json.load(file)["shardlist"][0]
>>> entry["url"], entry["nsamples"], report.sidecars
('a.tar', 1, 1)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from wdspipes.io.local import local_path
from wdspipes.io.sinks import open_sink
from wdspipes.io.urls import ByteStream, close_quietly, open_url, shard_failure
from wdspipes.read.index_file import INDEX_KIND
from wdspipes.read.offsets import ShardOffsets, scan_offsets, sidecar_path, write_sidecar

__all__ = ["IndexReport", "index_entry_url", "index_shards", "write_index"]


@dataclass
class IndexReport:
    """What :func:`index_shards` wrote: the index's path, its shards, samples and bytes, and
    how many sidecars it wrote."""

    path: str
    shards: int = 0
    samples: int = 0
    bytes: int = 0
    sidecars: int = 0


def write_index(path: str, shards: Sequence[dict[str, Any]], **fields: Any) -> None:
    """Write an index of ``shards`` (each a dict with ``url``, ``nsamples`` and more) to
    ``path``, any URL the writers take (a file appears whole or not at all), with the other
    top-level ``fields`` (``name``, ``base``, ``info``)."""
    index = {"__kind__": INDEX_KIND, "wids_version": 1, **fields, "shardlist": list(shards)}
    with open_sink(path) as sink:
        sink.write((json.dumps(index, indent=2) + "\n").encode())


def index_entry_url(url: str, index_path: str) -> str:
    """How the index at ``index_path`` names the shard ``url``: relative to the index's
    directory where both are local, else the URL as it is.

    >>> index_entry_url("data/a.tar", "data/index.json"), index_entry_url("a.tar", "-")
    ('a.tar', 'a.tar')
    >>> index_entry_url("s3://b/a.tar", "data/index.json")
    's3://b/a.tar'
    """
    shard, index = local_path(url), local_path(index_path)
    if shard is None or index is None or index_path == "-":
        return url
    return os.path.relpath(os.path.abspath(shard), os.path.dirname(os.path.abspath(index)))


def index_shards(
    urls: Iterable[str],
    output: str,
    *,
    name: str | None = None,
    base: str | None = None,
    info: str | None = None,
    md5: bool = True,
    sidecars: bool = True,
    ignore_zeros: bool = False,
) -> IndexReport:
    """Read each shard once, count its samples (as the readers group them) and write the
    index at ``output``, with a sidecar of offsets beside each local shard.

    Args:
        urls: the shards, in the order the index lists them.
        output: where the index goes (a path, ``-`` for standard output, any URL the
            writers take).
        name: the dataset's name in the index (default: the index file's name, without
            ``.json``).
        base: a ``base`` for the index's URLs, written as is.
        info: a description written under ``info``.
        md5: write each shard's MD5 sum, as ``widsindex create`` does.
        sidecars: write the offsets' sidecar beside each local shard.
        ignore_zeros: read on past zero blocks (archives joined with ``cat``).

    Raises:
        WdsError: a shard cannot be read, or is damaged (the index would be wrong); the
            error names it and the offset. Nothing is written then.
    """
    report = IndexReport(output)
    entries = []
    for url in urls:
        offsets, size, digest = _read_shard(url, md5, ignore_zeros)
        entry: dict[str, Any] = {
            "url": index_entry_url(url, output),
            "nsamples": offsets.samples,
            "filesize": size,
        }
        if digest is not None:
            entry["md5sum"] = digest
        entries.append(entry)
        path = local_path(url)
        if sidecars and path is not None and write_sidecar(sidecar_path(path), offsets):
            report.sidecars += 1
        report.shards += 1
        report.samples += offsets.samples
        report.bytes += size
    if name is None:
        name = os.path.splitext(os.path.basename(output))[0] if output != "-" else None
    fields = {key: value for key, value in (("name", name), ("base", base), ("info", info))}
    write_index(output, entries, **{k: v for k, v in fields.items() if v is not None})
    return report


def _read_shard(url: str, md5: bool, ignore_zeros: bool) -> tuple[ShardOffsets, int, str | None]:
    """The offsets of a shard, its size and its MD5 sum (if asked)."""
    stream = open_url(url)
    measured = _Measured(stream, md5)
    try:
        mtime_ns = _mtime_ns(url)
        offsets = scan_offsets(measured, url, size=-1, mtime_ns=mtime_ns, ignore_zeros=ignore_zeros)
        stream.close()  # a pipe: command reports its exit status here
    except Exception as exn:
        raise shard_failure(exn, url, stream) from exn
    finally:
        close_quietly(stream)
    if offsets.damage is not None:
        raise offsets.damage
    size = measured.size
    sized = ShardOffsets(offsets.starts, size, mtime_ns, offsets.globals)
    return sized, size, measured.hexdigest()


def _mtime_ns(url: str) -> int | None:
    path = local_path(url)
    return None if path is None else os.stat(path).st_mtime_ns


class _Measured:
    """A stream counting its bytes and, if asked, summing them with MD5."""

    def __init__(self, stream: ByteStream, md5: bool) -> None:
        self.stream = stream
        self.size = 0
        self.md5 = hashlib.md5(usedforsecurity=False) if md5 else None

    def read(self, size: int = -1, /) -> bytes:
        data = self.stream.read(size)
        self.size += len(data)
        if self.md5 is not None:
            self.md5.update(data)
        return data

    def close(self) -> None:
        self.stream.close()

    def hexdigest(self) -> str | None:
        return None if self.md5 is None else self.md5.hexdigest()
