"""The shard writer: samples in, a numbered series of tar shards out, each complete or absent.

Shards go to the URLs the pattern gives, through ``open_url(url, "wb")``: local paths,
``file:`` URLs, ``pipe:COMMAND`` and fsspec stores (``s3://...``). A local shard is written
under a temporary name in its final directory (``.NAME.partial-XXXXXXXX``, hidden, never a
name of the pattern, created exclusively), synced to disk, and renamed to its final name only
once complete (:class:`~wdspipes.io.atomic.AtomicFile`): a crash or an exception never leaves
a truncated shard under a final name. In an object store the object appears only when its
upload completes; a ``pipe:`` command gets the bytes as they come (see
:mod:`wdspipes.io.sinks`).

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> with ShardWriter(os.path.join(directory, "train-%03d.tar"), maxcount=2) as writer:
...     for index in range(5):
...         writer.write({"__key__": f"{index:04d}", "cls": index})
>>> [os.path.basename(path) for path in writer.shards], writer.count
(['train-000.tar', 'train-001.tar', 'train-002.tar'], 5)
>>> sorted(os.listdir(directory))
['train-000.tar', 'train-001.tar', 'train-002.tar']
>>> __import__("shutil").rmtree(directory)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from wdspipes.io.local import local_path
from wdspipes.io.sinks import ByteSink, ClosesOrAborts, open_sink
from wdspipes.write.encoders import SampleEncoder
from wdspipes.write.tar import (
    TarWriter,
    check_compress,
    check_mtime,
    member_encoder,
    sample_blocks,
)

__all__ = ["ShardWriter", "check_pattern"]

# A printf conversion: optional mapping key, flags, width, precision, length, then the type.
_CONVERSION = re.compile(r"%(\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.?)", re.DOTALL)
_INTEGER_TYPES = frozenset("diouxX")


class ShardWriter(ClosesOrAborts):
    """Write samples to numbered tar shards, rolling over by sample count and by size.

    Args:
        pattern: the shards' URLs, with one printf-style integer placeholder for the shard
            number: ``"out/train-%06d.tar"``, ``"s3://bucket/train-%06d.tar"``,
            ``"pipe:gzip > train-%06d.tar.gz"``. Missing local directories are created.
        maxcount: at most this many samples per shard.
        maxsize: at most this many bytes per shard, unless a single sample is larger (it then
            gets a shard of its own). Exact for plain tar (end marker and padding included);
            when compressing, the compressed bytes emitted so far plus the next sample's
            uncompressed size, so a shard may exceed it by what the compressor holds back.
        post: called with each finished shard's URL, in order, once it is complete there.
        start_shard: the number of the first shard.
        compress, encoder, mtime, trusted, storage_options, unsafe_names: as for
            :class:`~wdspipes.write.TarWriter`.

    Attributes:
        shards: the URLs of the finished shards, in order, as the pattern gives them.
        counts: the samples in each of ``shards``.
        count: samples written in all.

    Raises:
        ValueError: a pattern without exactly one integer placeholder, a bad limit, an unknown
            compression or an mtime out of range.
        ShardOpenError: a shard's URL cannot be opened for writing (raised by ``write``).

    A sample that fails to encode raises :class:`~wdspipes.errors.EncodeError` before any of
    it is written. An exception inside ``with ShardWriter(...)`` deletes the unfinished shard
    (finished shards stay) and propagates. No sample, no shard: closing a writer that wrote
    nothing creates no file.
    """

    def __init__(
        self,
        pattern: str,
        maxcount: int = 100_000,
        maxsize: float = 3e9,
        post: Callable[[str], object] | None = None,
        start_shard: int = 0,
        compress: str | None = None,
        encoder: bool | SampleEncoder | Callable[[dict[str, Any]], dict[str, Any]] = True,
        mtime: float = 0,
        trusted: bool = False,
        *,
        storage_options: Mapping[str, Any] | None = None,
        unsafe_names: bool = False,
    ) -> None:
        check_pattern(pattern)
        if maxcount < 1:
            raise ValueError(f"maxcount must be >= 1, got {maxcount}")
        if not maxsize > 0:
            raise ValueError(f"maxsize must be > 0, got {maxsize}")
        if start_shard < 0:
            raise ValueError(f"start_shard must be >= 0, got {start_shard}")
        check_compress(compress)
        self.pattern = pattern
        self.maxcount = maxcount
        self.maxsize = maxsize
        self.post = post
        self.compress = compress
        self.mtime = check_mtime(mtime)
        self.storage_options = storage_options
        self._encode = member_encoder(encoder, trusted, unsafe_names)
        self._next_shard = start_shard
        self._writer: TarWriter | None = None
        self._file: ByteSink | None = None
        self._closed = False
        self.shards: list[str] = []
        self.counts: list[int] = []
        self.count = 0

    def write(self, sample: Mapping[str, Any]) -> None:
        """Write one sample, first finishing the current shard if the sample would take it
        over ``maxcount`` or ``maxsize``.

        Raises:
            EncodeError: the sample cannot be written; nothing of it was written.
        """
        if self._closed:
            raise ValueError("write to a closed ShardWriter")
        blocks = sample_blocks(self._encode(sample), self.mtime)
        writer = self._writer
        if writer is not None and (
            writer.count >= self.maxcount
            or writer.closed_size(sum(map(len, blocks))) > self.maxsize
        ):
            self._finish()
            writer = None
        if writer is None:
            writer = self._open()
        writer._write_blocks(blocks)
        self.count += 1

    def _open(self) -> TarWriter:
        """Start the next shard (under its temporary name, where it has one)."""
        final = self.pattern % self._next_shard
        directory = os.path.dirname(local_path(final) or "")
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._file = open_sink(final, self.storage_options)  # closed by _finish or _abort
        self._writer = TarWriter(self._file, compress=self.compress, mtime=self.mtime)
        self._next_shard += 1
        return self._writer

    def _finish(self) -> None:
        """Complete the current shard (synced and renamed to its final name, uploaded, ...),
        call ``post``."""
        assert self._writer is not None and self._file is not None  # by the callers
        final, count = self._file.url, self._writer.count
        try:
            self._writer.close()
            self._file.close()
        except BaseException:
            self._abort()
            raise
        self._writer = self._file = None
        self.shards.append(final)
        self.counts.append(count)
        if self.post is not None:
            self.post(final)

    def _abort(self) -> None:
        """Close and delete the unfinished shard, if any."""
        if self._file is not None:
            self._file.abort()
        self._writer = self._file = None

    def close(self) -> None:
        """Finish the current shard, if it holds any sample. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._finish()

    def abort(self) -> None:
        """Stop writing: the unfinished shard is deleted (finished shards stay). Once closed
        or aborted, nothing happens."""
        if self._closed:
            return
        self._closed = True
        self._abort()

    def __repr__(self) -> str:
        return f"ShardWriter({self.pattern!r}, shards={len(self.shards)}, count={self.count})"


def check_pattern(pattern: str) -> None:
    """Raise ValueError unless ``pattern`` has exactly one printf integer placeholder."""
    conversions = [m for m in _CONVERSION.finditer(pattern) if m.group(4) != "%"]
    valid = (
        len(conversions) == 1
        and conversions[0].group(4) in _INTEGER_TYPES
        and not conversions[0].group(1)
        and "*" not in conversions[0].group(0)
    )
    if not valid:
        raise ValueError(
            "pattern must hold exactly one integer placeholder such as %06d "
            f"(and %% for a literal %), got {pattern!r}"
        )
