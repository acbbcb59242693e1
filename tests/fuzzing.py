"""A seeded fuzzer of the shard readers: damaged tar and stream shards, each read the ways a
user reads them, and the properties every read must keep whatever the damage (issue 14).

``tests/test_fuzz.py`` runs a few thousand cases of it; ``benchmarks/fuzz_readers.py`` as many
as asked for. A *case* is a damaged shard together with what its damage allows: how many of the
undamaged shard's samples must still come out, which of them must come out unchanged, whether
the damage must be reported, and where an error about it may say it is. Every case is read
twice, through the public readers, from a file (so that file descriptors are real):

1. alone, with the default handler (errors raised);
2. followed by a good shard, with ``ignore_and_continue``.

The properties checked (:func:`judge`):

- ``error``: an error is a :class:`~wdspipes.errors.WdsError` (a ``ShardError`` unless the case
  forges valid headers) naming the damaged shard's URL and an ``int`` byte offset, within the
  range the damage allows; never any other exception type.
- ``sample``: no partial or altered sample: the samples read from the damaged shard are the
  undamaged shard's, whole and in order, as far as the damage leaves them intact (all of them
  for tar, whose headers are checksummed; those before the damaged item for stream shards).
- ``lost``: the samples that the data before the damage shows whole all come out (a tar
  sample is whole once the header of the next sample's first member has been read).
- ``silent``: damage that can be detected is reported, by an error or a warning; a read
  without either delivers every sample.
- ``continue``: with ``ignore_and_continue``, nothing escapes and the good shard after the
  damaged one is read whole.
- ``fd``: no file descriptor is left open once the read is over and the error dropped, with the
  garbage collector disabled; no file is left to its finaliser (a ``ResourceWarning``).

A case is named by its family, the seed and its index: :func:`family_cases` makes the same
bytes from them again, anywhere.
"""

from __future__ import annotations

import bz2
import gc
import gzip
import lzma
import os
import random
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard
from shardgen import BLOCK, end_marker, pax_member, raw_header, raw_member

import wdspipes as wds
from wdspipes.read.compression import detect_compression

Sample = dict[str, Any]
Reader = Callable[[list[str], Callable[[Exception], object]], Iterable[Sample]]

# Reading


TAR_READERS: dict[str, Reader] = {
    "pipeline": lambda urls, handler: wds.DataPipeline(
        wds.SimpleShardList(urls), wds.tarfile_to_samples(handler=handler)
    ),
    "chain": lambda urls, handler: (
        wds.ShardList(urls)
        .open_shards(handler=handler)
        .load_tar(handler=handler)
        .group_samples(handler=handler)
    ),
}
STREAM_READERS: dict[str, dict[str, Reader]] = {
    "cbor": {
        "pipeline": lambda urls, handler: wds.DataPipeline(
            wds.SimpleShardList(urls), wds.cbors_to_samples(handler=handler)
        ),
        "chain": lambda urls, handler: (
            wds.ShardList(urls).open_shards(handler=handler).load_cbor(handler=handler)
        ),
    },
    "msgpack": {
        "pipeline": lambda urls, handler: wds.DataPipeline(
            wds.SimpleShardList(urls), wds.msgpack_to_samples(handler=handler)
        ),
        "chain": lambda urls, handler: (
            wds.ShardList(urls).open_shards(handler=handler).load_msgpack(handler=handler)
        ),
    },
}


def readers(fmt: str) -> dict[str, Reader]:
    """The two ways to read shards of format ``fmt``: ``DataPipeline`` and functional chaining."""
    return TAR_READERS if fmt == "tar" else STREAM_READERS[fmt]


@dataclass(frozen=True)
class ErrorSeen:
    """What a raised exception said, kept without the exception (whose traceback holds
    frames, and through them the reader's streams)."""

    type: str
    is_wds: bool
    is_shard: bool
    url: object
    offset: object
    message: str
    cause: str

    @classmethod
    def of(cls, exn: BaseException) -> ErrorSeen:
        cause = exn.__cause__
        return cls(
            type=type(exn).__name__,
            is_wds=isinstance(exn, wds.WdsError),
            is_shard=isinstance(exn, wds.ShardError),
            url=getattr(exn, "url", None),
            offset=getattr(exn, "offset", None),
            message=str(exn).split("\n", 1)[0],
            cause="" if cause is None else type(cause).__name__,
        )

    def label(self) -> str:
        """The outcome's name in a summary: the type, and the cause of a generic failure."""
        if self.type == "ShardError" and self.cause:
            return f"ShardError <- {self.cause}"
        return self.type


@dataclass
class Observation:
    """One read: the samples, the error that ended it, warnings, file descriptors left open."""

    samples: list[Sample]
    error: ErrorSeen | None
    warnings: list[str]
    leaked_fds: int
    finalised: list[str]  # ResourceWarnings: files closed by their finaliser, not by the reader


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def observe(reader: Reader, urls: list[str], handler: Callable[[Exception], object]) -> Observation:
    """Read ``urls`` to the end or the first error, with the garbage collector disabled, and
    count the file descriptors open before and after (the error dropped)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        before = open_fds()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            samples, error = _read(reader, urls, handler)
            seen = None if error is None else ErrorSeen.of(error)
            del error
            leaked = open_fds() - before
            if leaked:  # close them now, so that they trouble no later case
                gc.collect()
        finalised = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        said = [
            f"{w.category.__name__}: {w.message}"
            for w in caught
            if not issubclass(w.category, ResourceWarning | DeprecationWarning)
        ]
    finally:
        if enabled:
            gc.enable()
    return Observation(samples, seen, said, leaked, finalised)


def _read(
    reader: Reader, urls: list[str], handler: Callable[[Exception], object]
) -> tuple[list[Sample], BaseException | None]:
    samples: list[Sample] = []
    try:
        for sample in reader(urls, handler):
            samples.append(sample)
    except Exception as exn:
        return samples, exn
    return samples, None


# Reference shards: what an undamaged shard holds, and where


@dataclass(frozen=True)
class Entry:
    """One entry of a tar shard: extension headers, its own header, data and padding."""

    start: int  # its first header block
    headers: tuple[int, ...]  # its checksummed header blocks, the member's own last
    end: int  # the end of its padding: where the next entry starts
    sample: int | None  # the sample it belongs to (None: a directory)
    first: bool  # the first member of its sample


@dataclass(frozen=True)
class Shard:
    """An undamaged shard: its bytes, its samples (without ``__url__``) and its layout.

    For tar, ``entries`` and ``end_of_members`` (where the end-of-archive marker begins); for
    stream shards, ``items``: each item's start and end.
    """

    fmt: str
    data: bytes
    samples: list[Sample]
    entries: tuple[Entry, ...] = ()
    end_of_members: int = 0
    items: tuple[tuple[int, int], ...] = ()

    def completed_by(self, intact: int) -> int:
        """How many samples the first ``intact`` bytes show whole: for tar, a sample is whole
        once the header naming the next sample's first member has been read; for streams,
        once its item has."""
        if self.fmt != "tar":
            return sum(1 for _, end in self.items if end <= intact)
        return sum(
            1 for e in self.entries if e.first and e.sample != 0 and e.headers[-1] + BLOCK <= intact
        )

    def entry_at(self, offset: int) -> tuple[int, int]:
        """The start and end of the tar entry holding byte ``offset`` (the end-of-archive
        marker and whatever follows it count as one)."""
        for entry in self.entries:
            if entry.start <= offset < entry.end:
                return entry.start, entry.end
        return self.end_of_members, max(offset, len(self.data))


def _tar_member(name: str, data: bytes, style: str) -> tuple[bytes, tuple[int, ...]]:
    """A regular-file entry named by a GNU long-name entry, a PAX header, a ustar name prefix
    or its own name; its bytes and the offsets of its header blocks."""
    encoded = name.encode()
    if style in ("gnu", "pax"):
        if style == "gnu":
            extension = raw_member("././@LongLink", encoded + b"\0", kind=b"L")
        else:
            extension = pax_member({"path": name})
        return extension + raw_member(encoded[:100], data), (0, len(extension))
    if style == "prefix":
        prefix, _, base = name.rpartition("/")
        return raw_member(base, data, prefix=prefix.encode()), (0,)
    return raw_member(encoded, data), (0,)


def tar_reference(rng: random.Random, prefix: str = "s") -> Shard:
    """A small tar shard: 3 or 4 samples of 2 or 3 fields, one member over 512 bytes, one
    sample named by GNU long-name and PAX headers, maybe a directory and a ustar name
    prefix: 9 to 18 KB."""
    parts: list[bytes] = []
    entries: list[Entry] = []
    samples: list[Sample] = []
    size = 0

    def add(piece: bytes, headers: tuple[int, ...], sample: int | None) -> None:
        nonlocal size
        first = sample is not None and not any(e.sample == sample for e in entries)
        blocks = tuple(size + header for header in headers)
        entries.append(Entry(size, blocks, size + len(piece), sample, first))
        parts.append(piece)
        size += len(piece)

    for index in range(3 + rng.randrange(2)):
        key = f"{prefix}{index:03d}"
        styles = ["plain"]
        if index == 1:  # a key too long for a ustar name field
            key = "long-directory-name/" * 5 + key
            styles = ["gnu", "pax"]
        elif index == 3:
            key = "p" * 110 + "/" + key
            styles = ["prefix"]
        if rng.random() < 0.3:
            add(raw_header(f"{prefix}{index:03d}-dir/", kind=b"5"), (0,), None)
        fields = rng.sample(
            ["cls", "txt", "bin", "json", "jpg"], 2 if index == 1 else rng.choice([2, 3])
        )
        sample: Sample = {"__key__": key}
        for position, name in enumerate(fields):
            length = rng.choice(
                [0, 1, rng.randrange(2, 60), rng.randrange(2, 60), rng.randrange(513, 900)]
            )
            if index == 0 and position == 0:
                length = rng.randrange(513, 1200)
            data = bytes(rng.randrange(1, 256) for _ in range(length))  # no zero block
            piece, headers = _tar_member(f"{key}.{name}", data, styles[position % len(styles)])
            add(piece, headers, index)
            sample[name] = data
        samples.append(sample)
    return Shard("tar", b"".join(parts) + end_marker(), samples, tuple(entries), size)


def good_tar() -> Shard:
    """A second shard, read after a damaged one."""
    samples = [{"__key__": f"good{i}", "cls": str(i).encode(), "txt": b"fine"} for i in range(2)]
    data = b"".join(
        raw_member(f"{s['__key__']}.{f}", s[f]) for s in samples for f in ("cls", "txt")
    )
    return Shard("tar", data + end_marker(), samples)


def stream_reference(fmt: str, rng: random.Random, prefix: str = "s") -> Shard:
    """A small stream shard of 3 to 5 items, the last without a ``__key__`` (the reader keys
    it by its number)."""
    writer_class = wds.CborWriter if fmt == "cbor" else wds.MsgpackWriter
    count = 3 + rng.randrange(3)
    samples: list[Sample] = []
    items: list[tuple[int, int]] = []
    buffer = _Buffer()
    with writer_class(buffer) as writer:
        for index in range(count):
            sample: Sample = {
                "__key__": f"{prefix}{index:03d}",
                "cls": rng.randrange(-1000, 100_000),
                "txt": "".join(rng.choice("abcé 012") for _ in range(rng.randrange(0, 30))),
                "bin": rng.randbytes(rng.choice([0, 5, rng.randrange(200, 700)])),
            }
            if index == count - 1:
                del sample["__key__"]
            start = len(buffer.data)
            writer.write(sample)
            items.append((start, len(buffer.data)))
            samples.append({**sample, "__key__": sample.get("__key__", f"{index:06d}")})
    return Shard(fmt, bytes(buffer.data), samples, items=tuple(items))


def good_stream(fmt: str) -> Shard:
    return stream_reference(fmt, random.Random(0), prefix="good")


class _Buffer:
    """A binary stream for the writers that keeps what they wrote after they close it."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def reference(fmt: str, seed: int, number: int) -> Shard:
    """Reference shard ``number`` of a run with ``seed``."""
    rng = random.Random(f"{seed}/reference/{fmt}/{number}")
    return tar_reference(rng) if fmt == "tar" else stream_reference(fmt, rng)


def good_shard(fmt: str) -> Shard:
    return good_tar() if fmt == "tar" else good_stream(fmt)


COMPRESSORS: dict[str, tuple[Callable[[bytes], bytes], Callable[[], Any]]] = {
    # name: compress, and a decompressor object that gives what a cut stream holds
    "gzip": (lambda data: gzip.compress(data, mtime=0), lambda: zlib.decompressobj(wbits=31)),
    "bz2": (bz2.compress, bz2.BZ2Decompressor),
    "xz": (lzma.compress, lzma.LZMADecompressor),
    "zstd": (  # with a checksum of the content, as the zstd command writes it
        lambda data: zstandard.ZstdCompressor(write_checksum=True).compress(data),
        lambda: zstandard.ZstdDecompressor().decompressobj(),
    ),
}


def compress(family: str, data: bytes) -> bytes:
    """``data`` as a family reads it: compressed by the compressor the family is named after."""
    name = family.split("-")[0]
    return COMPRESSORS[name][0](data) if name in COMPRESSORS else data


# Cases


@dataclass(frozen=True)
class Case:
    """A damaged shard and what its damage allows (see the module docstring)."""

    family: str
    index: int
    fmt: str
    data: bytes = field(repr=False)
    what: str  # the damage, in words
    reference: Shard = field(repr=False)
    intact: int  # the first samples that must come out unchanged (and none beyond, if exact)
    at_least: int  # samples that must come out before any error
    exact: bool = True  # nothing but reference samples can come out
    report: bool = False  # the damage must be reported: an error or a warning
    whole: int | None = None  # samples a read without an error or warning must deliver
    offsets: tuple[int, int] | None = None  # where an error may be located
    shard_error: bool = True  # an error must be a ShardError (else any WdsError)
    valid: bool = False  # the bytes are a valid shard (a shorter one): an error is wrong

    def name(self) -> str:
        return f"{self.family} case {self.index} ({self.what})"


Damage = tuple[bytes, str, dict[str, Any]]  # the damaged bytes, the damage in words, expectations


def _flip(data: bytes, position: int, rng: random.Random) -> tuple[bytes, str]:
    value = (data[position] + rng.randrange(1, 256)) % 256
    what = f"byte {position} {data[position]:#04x} -> {value:#04x}"
    return data[:position] + bytes([value]) + data[position + 1 :], what


def _tar_flip(shard: Shard, rng: random.Random) -> Damage:
    """One byte of one checksummed header block changed."""
    entry = rng.choice(shard.entries)
    block = rng.choice(entry.headers)
    damaged, what = _flip(shard.data, block + rng.randrange(BLOCK), rng)
    n = len(shard.samples)
    at_least = shard.completed_by(entry.start)
    return (
        damaged,
        what,
        {"intact": n, "at_least": at_least, "whole": n, "offsets": (entry.start, block)},
    )


def _tar_zero(shard: Shard, rng: random.Random) -> Damage:
    """A header block zeroed: a zero block amid the members."""
    entry = rng.choice(shard.entries)
    block = rng.choice(entry.headers)
    damaged = shard.data[:block] + bytes(BLOCK) + shard.data[block + BLOCK :]
    n = len(shard.samples)
    what = f"header block at {block} zeroed"
    at_least = shard.completed_by(entry.start)
    if not any(damaged[block + BLOCK :]):  # a whole, shorter archive: its last sample may be cut
        expected = {"intact": at_least, "at_least": at_least, "exact": False}
        return damaged, f"{what}, zeros after it", expected
    return (
        damaged,
        what,
        {
            "intact": n,
            "at_least": at_least,
            "report": True,
            "whole": n,
            "offsets": (entry.start, len(damaged)),
        },
    )


def _tar_forge(shard: Shard, rng: random.Random) -> Damage:
    """A header with fields changed and its checksum made right again: parsed as it is."""
    entry = rng.choice(shard.entries)
    block = rng.choice(entry.headers)
    header, what = _forge(bytearray(shard.data[block : block + BLOCK]), rng)
    damaged = shard.data[:block] + header + shard.data[block + BLOCK :]
    first = shard.completed_by(entry.start)
    return (
        damaged,
        f"header at {block}: {what}",
        {
            "intact": first,
            "at_least": first,
            "exact": False,
            "offsets": (entry.start, len(damaged)),
            "shard_error": False,  # forged names may make a duplicate field, a SampleError
        },
    )


def _tar_trailing(shard: Shard, rng: random.Random) -> Damage:
    """Garbage after the end-of-archive marker: dropped silently, it could be lost data."""
    garbage = _garbage(rng, rng.randrange(1, 3000))
    n = len(shard.samples)
    return (
        shard.data + garbage,
        f"{len(garbage)} bytes after the end-of-archive marker",
        {
            "intact": n,
            "at_least": n - 1,  # the last sample may wait for a member that never comes
            "report": True,
            "whole": n,
            "offsets": (shard.end_of_members, len(shard.data) + len(garbage)),
        },
    )


def _gzip_trailing(shard: Shard, rng: random.Random) -> Damage:
    """Garbage after a gzip-compressed shard."""
    garbage = _garbage(rng, rng.randrange(1, 3000))
    n = len(shard.samples)
    return (
        compress("gzip", shard.data) + garbage,
        f"{len(garbage)} bytes after",
        {
            "intact": n,
            "at_least": n - 1,
            "report": True,
            "whole": n,
            "offsets": (shard.end_of_members, len(shard.data)),  # in the uncompressed stream
        },
    )


def _garbage_case(shard: Shard, rng: random.Random) -> Damage:
    """A shard of garbage: nothing to expect but a proper error, if any."""
    damaged, what = _garbage_shard(shard.fmt, rng)
    compressed = shard.fmt == "tar" and detect_compression(damaged[:16]) is not None
    return (
        damaged,
        what,
        {
            "intact": 0,
            "at_least": 0,
            "exact": False,
            "offsets": None if compressed else (0, len(damaged)),
            "shard_error": not what.startswith("forged"),
        },
    )


def _stream_flip(shard: Shard, rng: random.Random) -> Damage:
    """One byte of one item changed: that item and those after it may read as anything."""
    position = rng.randrange(len(shard.data))
    damaged, what = _flip(shard.data, position, rng)
    item = next(i for i, (start, end) in enumerate(shard.items) if start <= position < end)
    return (
        damaged,
        what,
        {
            "intact": item,
            "at_least": item,
            "exact": False,
            "offsets": (shard.items[item][0], len(damaged)),
        },
    )


def _stream_trailing(shard: Shard, rng: random.Random) -> Damage:
    """Garbage after the last item: it may read as items, or be an error after them."""
    garbage = _garbage(rng, rng.randrange(1, 3000))
    n = len(shard.samples)
    return (
        shard.data + garbage,
        f"{len(garbage)} bytes after the last item",
        {
            "intact": n,
            "at_least": n,
            "exact": False,
            "offsets": (len(shard.data), len(shard.data) + len(garbage)),
        },
    )


DAMAGES: dict[str, Callable[[Shard, random.Random], Damage]] = {
    "tar-flip": _tar_flip,
    "tar-zero": _tar_zero,
    "tar-forge": _tar_forge,
    "tar-garbage": _garbage_case,
    "tar-trailing": _tar_trailing,
    "gzip-trailing": _gzip_trailing,
    **{f"{fmt}-flip": _stream_flip for fmt in ("cbor", "msgpack")},
    **{f"{fmt}-garbage": _garbage_case for fmt in ("cbor", "msgpack")},
    **{f"{fmt}-trailing": _stream_trailing for fmt in ("cbor", "msgpack")},
}


def _garbage(rng: random.Random, length: int) -> bytes:
    """Random bytes that neither start a gzip member nor are all zero."""
    garbage = bytearray(rng.randbytes(length))
    garbage[0] = rng.choice([b for b in range(1, 256) if b != 0x1F])
    return bytes(garbage)


MAGICS = [b"\x1f\x8b\x08", b"BZh91AY&SY", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"]


def _garbage_shard(fmt: str, rng: random.Random) -> tuple[bytes, str]:
    """A shard of garbage: random bytes, or for tar also random bytes behind a compressor's
    magic, a compressed random payload, or a random archive (see _random_archive)."""
    length = rng.choice([0, 1, rng.randrange(2, 600), rng.randrange(600, 5000)])
    if fmt != "tar":
        return rng.randbytes(length), f"{length} random bytes"
    kind = rng.randrange(4)
    if kind == 0:
        return rng.randbytes(length), f"{length} random bytes"
    if kind == 1:
        magic = rng.choice(MAGICS)
        return magic + rng.randbytes(length), f"{magic!r} and {length} random bytes"
    if kind == 2:
        name = rng.choice(list(COMPRESSORS))
        return compress(name, rng.randbytes(length)), f"{name} of {length} random bytes"
    return _random_archive(rng), "forged: a random archive"


NAMES = ["a.x", "a.y", "a.X", "b.x", "a", ".x", "__meta__", "__d__/a.x", "d/", "a.x/", "d/b.x"]
KINDS = b"0000000257\0LKxgS"


def _random_archive(rng: random.Random) -> bytes:
    """Entries of random names, kinds and sizes, well formed or not (one header forged), maybe
    with an end-of-archive marker: duplicate fields, meta files, links, extension headers."""
    entries = []
    for _ in range(rng.randrange(1, 8)):
        kind = bytes([rng.choice(KINDS)])
        data = rng.randbytes(rng.choice([0, 1, rng.randrange(2, 700)]))
        if kind == b"x" and rng.random() < 0.7:
            entries.append(pax_member({rng.choice(["path", "size"]): rng.choice([*NAMES, "3"])}))
            continue
        if kind == b"L":
            data = rng.choice(NAMES).encode() + b"\0"
        entries.append(raw_member(rng.choice(NAMES), data, kind=kind))
    if rng.random() < 0.5:
        position = rng.randrange(len(entries))
        header, _ = _forge(bytearray(entries[position][:BLOCK]), rng)
        entries[position] = header + entries[position][BLOCK:]
    return b"".join(entries) + (end_marker() if rng.random() < 0.7 else b"")


SIZE_FIELDS = [
    b"%011o\0" % 0o77777777777,  # 8 GiB
    b"\x80" + (1 << 40).to_bytes(11, "big"),  # base-256: 1 TiB
    b"\x80" + (1 << 87).to_bytes(11, "big"),
    b"\xff" * 12,  # base-256: -1
    b"99999999999\0",
    b"           \0",
    b"\0" * 12,
]


def _forge(header: bytearray, rng: random.Random) -> tuple[bytes, str]:
    """A header with random fields changed, its checksum made right: what is left to parse."""
    what = []
    for _ in range(rng.randrange(1, 4)):
        choice = rng.randrange(6)
        if choice == 0:
            header[124:136] = rng.choice(SIZE_FIELDS)
            what.append(f"size {bytes(header[124:136])!r}")
        elif choice == 1:
            header[124:136] = b"%011o\0" % rng.randrange(0, 4000)
            what.append(f"size {bytes(header[124:136])!r}")
        elif choice == 2:
            header[156] = rng.choice(b"0123456789LKxXgSDVM\0 ")
            what.append(f"type {bytes(header[156:157])!r}")
        elif choice == 3:
            header[345:360] = rng.randbytes(15)
            what.append("random name prefix")
        elif choice == 4:
            start = rng.randrange(100)
            header[start : start + 4] = rng.randbytes(4)
            what.append("random bytes in the name")
        else:
            position = rng.randrange(BLOCK)
            header[position] = rng.randrange(256)
            what.append(f"byte {position} random")
    header[148:156] = b"        "
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header), ", ".join(what)


EXHAUSTIVE = ("tar-cut", *(f"{name}-cut" for name in COMPRESSORS), "cbor-cut", "msgpack-cut")
RANDOM = tuple(DAMAGES)
FAMILIES = EXHAUSTIVE + RANDOM


def family_format(family: str) -> str:
    prefix = family.split("-")[0]
    return "tar" if prefix in COMPRESSORS else prefix


def family_cases(
    family: str,
    seed: int,
    references: int = 1,
    count: int = 100,
    select: Callable[[int], bool] | None = None,
    tail: int = 0,
) -> Iterator[Case]:
    """The cases of ``family``: every cut of each reference shard, or ``count`` random ones;
    with ``select``, only those whose index it accepts, and the cuts in the last ``tail`` bytes.

    Case ``i`` of a random family depends only on the seed, ``i`` and ``references`` (it
    damages reference ``i % references``); cut cases are numbered across the references.
    """
    fmt = family_format(family)
    shards = [reference(fmt, seed, number) for number in range(references)]
    if family in EXHAUSTIVE:
        index = 0
        for shard in shards:
            data = compress(family, shard.data)
            for cut in range(len(data)):
                if select is None or select(index) or cut >= len(data) - tail:
                    expected = _cut(family, shard, data, cut)
                    yield Case(
                        family, index, fmt, data[:cut], f"cut at byte {cut}", shard, **expected
                    )
                index += 1
        return
    for index in range(count):
        if select is None or select(index):
            rng = random.Random(f"{seed}/{family}/{index}")
            shard = shards[index % references]
            damaged, what, expected = DAMAGES[family](shard, rng)
            yield Case(family, index, fmt, damaged, what, shard, **expected)


def _cut(family: str, shard: Shard, data: bytes, cut: int) -> dict[str, Any]:
    """What cutting ``data`` (the shard, or it compressed) at ``cut`` allows."""
    if shard.fmt != "tar":
        complete = shard.completed_by(cut)
        if cut in {start for start, _ in shard.items}:  # a shorter shard: nothing to detect
            return {"intact": complete, "at_least": complete, "whole": complete, "valid": cut > 0}
        start = shard.items[complete][0]
        return {"intact": complete, "at_least": complete, "report": True, "offsets": (start, start)}
    if family != "tar-cut":  # compressed: what the cut stream holds
        intact = len(COMPRESSORS[family.split("-")[0]][1]().decompress(data[:cut]))
        report = True
    else:
        intact = cut
        report = cut < shard.end_of_members + BLOCK  # past it, the archive may end anywhere
    return {
        "intact": len(shard.samples),
        "at_least": shard.completed_by(intact),
        "report": report,
        "whole": len(shard.samples),
        "offsets": (shard.entry_at(intact)[0], intact) if report else None,
    }


# Judging


@dataclass(frozen=True)
class Violation:
    """A property a read broke, on which case, and how."""

    prop: str
    case: Case
    read: str  # which read: "raise" or "continue", and the reader
    detail: str

    def __str__(self) -> str:
        return f"[{self.prop}] {self.case.name()}, read {self.read}: {self.detail}"


@dataclass
class Verdict:
    """A case's two reads, the outcome of the first (an error type, or "clean") and the
    properties they broke."""

    outcome: str
    violations: list[Violation]
    alone: Observation
    both: Observation


def run_case(case: Case, directory: Path, good_url: str) -> Verdict:
    """Write the case's shard into ``directory`` and read it both ways."""
    path = directory / f"damaged.{case.fmt}"
    path.unlink(missing_ok=True)  # a new file: truncating one can take milliseconds
    path.write_bytes(case.data)
    url = str(path)
    styles = list(readers(case.fmt))
    choice = zlib.crc32(f"{case.family}/{case.index}".encode()) % 2  # both, whatever the stride
    first, second = styles[choice], styles[1 - choice]
    alone = observe(readers(case.fmt)[first], [url], wds.reraise_exception)
    both = observe(readers(case.fmt)[second], [url, good_url], wds.ignore_and_continue)
    outcome = "clean" if alone.error is None else alone.error.label()
    violations = judge(case, url, alone, f"raise/{first}", both, f"continue/{second}")
    return Verdict(outcome, violations, alone, both)


def judge(
    case: Case, url: str, alone: Observation, how: str, both: Observation, how_both: str
) -> list[Violation]:
    """The properties of the module docstring, for one case read both ways."""
    found: list[Violation] = []

    def fail(prop: str, read: str, detail: str) -> None:
        found.append(Violation(prop, case, read, detail))

    error = alone.error
    if error is not None and case.valid:
        fail("error", how, f"{error.type} on a valid shard: {error.message}")
    elif error is not None:
        expected = wds.ShardError if case.shard_error else wds.WdsError
        if not (error.is_shard if case.shard_error else error.is_wds):
            fail("error", how, f"{error.type} is no {expected.__name__}: {error.message}")
        elif error.url != url:
            fail("error", how, f"{error.type} names URL {error.url!r}: {error.message}")
        elif not isinstance(error.offset, int) or isinstance(error.offset, bool):
            fail("error", how, f"{error.type} has offset {error.offset!r}: {error.message}")
        elif case.offsets and not case.offsets[0] <= error.offset <= case.offsets[1]:
            fail(
                "error", how, f"offset {error.offset} not in {list(case.offsets)}: {error.message}"
            )
    _check_samples(case, url, alone.samples, how, fail)
    if error is None:
        if case.report and not alone.warnings:
            fail("silent", how, f"no error, no warning; {len(alone.samples)} samples")
        elif case.whole is not None and not alone.warnings and len(alone.samples) != case.whole:
            fail("silent", how, f"no error: {len(alone.samples)} samples of {case.whole}")
    if both.error is not None:
        fail("continue", how_both, f"{both.error.type} escaped: {both.error.message}")
    damaged = [s for s in both.samples if s.get("__url__") == url]
    rest = both.samples[len(damaged) :]
    if both.samples[: len(damaged)] != damaged:
        fail("continue", how_both, "samples of the damaged shard after those of the good one")
    _check_samples(case, url, damaged, how_both, fail)
    good = good_shard(case.fmt).samples
    if [_strip(s) for s in rest] != good:
        keys = [s.get("__key__") for s in rest]
        fail("continue", how_both, f"the good shard gave {keys}, not {len(good)} whole samples")
    for observation, read in ((alone, how), (both, how_both)):
        if observation.leaked_fds:
            fail("fd", read, f"{observation.leaked_fds} file descriptors left open")
        for message in observation.finalised:
            fail("fd", read, f"closed by the finaliser: {message}")
    return found


def _check_samples(
    case: Case, url: str, samples: list[Sample], read: str, fail: Callable[[str, str, str], None]
) -> None:
    reference = case.reference.samples
    for index, sample in enumerate(samples[: case.intact]):
        if sample.get("__url__") != url or _strip(sample) != reference[index]:
            fail("sample", read, f"sample {index} differs: {_difference(sample, reference[index])}")
            return
    if case.exact and len(samples) > case.intact:
        extra = samples[case.intact]
        fail("sample", read, f"sample {case.intact} is none of the shard's: {_describe(extra)}")
    if len(samples) < case.at_least:
        fail("lost", read, f"{len(samples)} samples, but the first {case.at_least} were whole")


def _strip(sample: Sample) -> Sample:
    return {k: v for k, v in sample.items() if k not in ("__url__", "__local_path__")}


def _describe(sample: object) -> str:
    if not isinstance(sample, dict):
        return repr(sample)[:80]
    fields = sorted(str(k) for k in sample if not str(k).startswith("__"))
    return f"key {short(sample.get('__key__'))}, fields {fields}"


def short(key: object) -> str:
    """A sample key for a message: long ones by their end."""
    text = repr(key)
    return text if len(text) <= 24 else f"...{text[-20:]}"


def _difference(sample: Sample, expected: Sample) -> str:
    got = _strip(sample)
    if got.get("__key__") != expected["__key__"] or got.keys() != expected.keys():
        return f"{_describe(sample)}, expected {_describe(expected)}"
    changed = [k for k in expected if got[k] != expected[k]]
    return f"key {short(expected['__key__'])}: fields {changed} changed"
