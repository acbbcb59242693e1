"""Shards compressed as a whole: which compression the first bytes show, and the decompressed
bytes as a stream that a cut ends like a cut file.

:func:`inflate` wraps a shard's stream in the decompressor its magic bytes call for (gzip,
bzip2, xz, or zstd with ``zstandard`` installed). Every byte decompressed before the
compressed data ends early is delivered, then the stream ends and :attr:`Inflated.cut` says
so; a reader of tar data reports the cut where that data really ends. Damaged compressed data
raises :class:`CorruptDataError`, never a decompressor's own error type; a failing read of the
shard's stream is raised as it is.

>>> import gzip, io
>>> shard = io.BytesIO(gzip.compress(b"0123456789" * 100)[:-4])  # its checksum cut
>>> inflated = inflate(shard, shard.read(512))
>>> len(io.BufferedReader(inflated).read()), inflated.cut, inflated.produced
(1000, True, 1000)
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from collections.abc import Callable
from typing import Any

from wdspipes.io.urls import ByteStream, RawShard

__all__ = ["CorruptDataError", "Inflated", "detect_compression", "inflate"]

_ZSTD_STEP = 1 << 11
"""Compressed bytes given to the zstd decompressor at a time: a zstd block can expand 32,768
times, so this bounds what one step can allocate (64 MiB) where real data gives a few KiB."""


class CorruptDataError(Exception):
    """The compressed data of a shard is damaged; the decompressor's error is the cause."""


def detect_compression(head: bytes) -> str | None:
    """The whole-shard compression that the first bytes of a shard show, by magic number.

    >>> detect_compression(b"\\x1f\\x8b\\x08\\x00"), detect_compression(b"BZh91AY&SY")
    ('gzip', 'bzip2')
    >>> detect_compression(b"\\xfd7zXZ\\x00"), detect_compression(b"\\x28\\xb5\\x2f\\xfd")
    ('xz', 'zstd')
    >>> detect_compression(b"BZh.jpg\\0\\0\\0") is None  # a tar member named BZh.jpg
    True
    """
    if head.startswith(b"\x1f\x8b\x08"):
        return "gzip"
    if head.startswith(b"BZh") and head[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    return None


def inflate(stream: ByteStream, head: bytes) -> Inflated | None:
    """The decompressed bytes of ``stream``, whose first bytes ``head`` were read already; None
    if ``head`` shows no compression.

    Raises:
        ImportError: the shard is zstd-compressed and ``zstandard`` is not installed (the
            message names the extra to install).
    """
    decompressor = _DECOMPRESSORS.get(detect_compression(head) or "")
    if decompressor is None:
        return None
    source = RawShard(stream, head)
    return Inflated(decompressor(source), source)


class Inflated(io.RawIOBase):
    """A decompressor's output as a raw stream that a cut short input ends like a file.

    The decompressing readers raise EOFError when their input ends inside the compressed
    stream; a buffered read spanning that point would lose what it had decompressed already.
    Reading the decompressor one ``read1`` at a time, every byte decompressed before the cut
    is given, then the stream ends with :attr:`cut` set.

    Attributes:
        source: the compressed stream; ``source.position`` counts its bytes read.
        produced: the decompressed bytes given so far.
        cut: whether the compressed data ended early.
    """

    def __init__(self, decompressor: Any, source: RawShard) -> None:
        super().__init__()
        self._read1: Callable[[int], bytes] = decompressor.read1
        self.source = source
        self.produced = 0
        self.cut = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.cut:
            return 0
        try:
            data = self._read1(len(buffer))
        except EOFError:
            self.cut = True
            return 0
        except Exception as exn:
            if self.source.failure is not None:
                raise  # the source failed, not the data
            raise CorruptDataError(f"{type(exn).__name__}: {exn}") from exn
        buffer[: len(data)] = data
        self.produced += len(data)
        return len(data)


class _ZstdFrames:
    """zstd frames one after another, decompressed in bounded steps, with ``read1`` as the
    other decompressing readers have it: a frame cut short raises EOFError. (zstandard's own
    stream reader ends silently there, even when the frame's checksum is what was cut.)"""

    def __init__(self, source: RawShard) -> None:
        import zstandard

        self._source = source
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._frame = self._new()
        self._pending = b""  # compressed bytes read, not yet given to the decompressor
        self._inside = False  # whether a frame has begun and not ended
        self._output = b""

    def read1(self, size: int) -> bytes:
        while not self._output:
            if not self._pending:
                self._pending = self._source.read(_ZSTD_STEP) or b""
                if not self._pending:
                    if self._inside:
                        raise EOFError("the zstd data ends inside a frame")
                    return b""
            if self._frame.eof:
                self._frame = self._new()
            step, self._pending = self._pending[:_ZSTD_STEP], self._pending[_ZSTD_STEP:]
            self._inside = True
            self._output = self._frame.decompress(step)
            if self._frame.eof:
                self._pending = self._frame.unused_data + self._pending
                self._inside = False
        data, self._output = self._output[:size], self._output[size:]
        return data


def _zstd(source: RawShard) -> _ZstdFrames:
    try:
        return _ZstdFrames(source)
    except ImportError:
        raise ImportError(
            "the shard is zstd-compressed: install 'zstandard' (pip install 'wdspipes[zstd]')"
        ) from None


_DECOMPRESSORS: dict[str, Callable[[Any], Any]] = {
    "gzip": lambda source: gzip.GzipFile(fileobj=source, mode="rb"),
    "bzip2": bz2.BZ2File,
    "xz": lzma.LZMAFile,
    "zstd": _zstd,
}
