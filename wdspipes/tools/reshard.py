"""Reshard a dataset: its samples rewritten into new shards, in order or uniformly shuffled.

In order, the samples of the inputs stream into a :class:`~wdspipes.write.ShardWriter`,
which rolls over to a new shard by sample count and size. Shuffled, they go through a
:class:`BucketShuffle`: pass 1 streams each sample's raw bytes into one of B bucket files on
disk, chosen uniformly at random; pass 2 loads one bucket at a time, in random order, and
writes its samples in random order. That is a uniformly random permutation of all the
samples (an external shuffle, what AIStore's dSort does on a cluster), in memory bounded by
one bucket, so a dataset many times larger than RAM reshuffles on one machine.
All or nothing: the output shards are written into a hidden directory beside them and moved
to their names only once the whole run has succeeded. See docs/resharding.md.

>>> import os, tempfile
>>> from wdspipes.write import TarWriter
>>> with tempfile.TemporaryDirectory() as tmp:
...     with TarWriter(os.path.join(tmp, "in.tar"), encoder=False) as tar:
...         for i in range(10):
...             _ = tar.write({"__key__": f"{i:02d}", "txt": b"x" * i})
...     report = reshard(os.path.join(tmp, "in.tar"), os.path.join(tmp, "out-%02d.tar"),
...                      maxcount=4, shuffle=True, seed=0)
...     names = [os.path.basename(path) for path in report.shards]
>>> report.samples, report.bytes, names
(10, 45, ['out-00.tar', 'out-01.tar', 'out-02.tar'])
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import random
import re
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

import msgpack
from tqdm import tqdm

from wdspipes.core.datapipe import Sample
from wdspipes.errors import WdsError
from wdspipes.io.local import local_path, url_scheme
from wdspipes.pipeline import WebDataset
from wdspipes.read.specs import ShardSpec, expand_urls
from wdspipes.write import ShardWriter
from wdspipes.write.shards import check_pattern

__all__ = ["BucketShuffle", "ReshardReport", "bucket_count", "reshard"]

FILL = 0.5
"""The expected size of one bucket, as a share of the memory budget."""
LOAD_LIMIT = 0.8
"""A bucket that would take more than this share of the budget in memory is split first."""
BUFFER_SHARE = 0.25
"""The share of the budget for the write buffers of the bucket files, all together."""
MIN_BUFFER, MAX_BUFFER = 64 << 10, 1 << 20
"""Bounds of one bucket file's write buffer."""
MAX_BUCKETS = 1024
"""The most bucket files open at once (fewer if the open-file limit is low)."""
MAX_SPLITS = 8
"""How many times a bucket may be split again before it is loaded whatever its size."""

_PREFIX = struct.Struct("<Q")  # each record in a bucket file: its length, then its msgpack
_ENCODING = ("utf-8", "surrogateescape")  # keys and names: tar names decode with surrogates
_CONVERSION = re.compile(r"%%|%[-+ #0]*\d*(?:\.\d+)?[diouxX]")


@dataclass(frozen=True)
class ReshardReport:
    """What :func:`reshard` did.

    Attributes:
        samples: samples written (as many as were read).
        bytes: bytes of their fields (the payload, without tar headers).
        shards: the paths of the shards written, in order.
        output_bytes: the size of those shards on disk.
        input_bytes: the size of the input shards, if all are local files.
        seconds: wall time.
        passes: passes over the data: 1 in order; 2 shuffled, plus one for each level of
            bucket splitting that was needed.
        buckets: the bucket files of pass 1 (0 in order).
        largest_bucket: the most bytes of samples held in memory at once: the largest
            bucket loaded, with its record offsets (0 in order).
        seed: the seed of the shuffle (drawn at random if none was given).
    """

    samples: int
    bytes: int
    shards: list[str]
    output_bytes: int
    input_bytes: int | None
    seconds: float
    passes: int
    buckets: int
    largest_bucket: int
    seed: int | None

    @property
    def mb_per_second(self) -> float:
        """Payload megabytes (10**6 bytes) per second."""
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def reshard(
    inputs: ShardSpec,
    pattern: str,
    maxcount: int = 100_000,
    maxsize: float = 3e9,
    shuffle: bool = False,
    seed: int | None = None,
    memory: float = 1e9,
    tmpdir: str | None = None,
    compress: str | None = None,
    progress: bool = False,
    ignore_zeros: bool = False,
) -> ReshardReport:
    """Rewrite the samples of ``inputs`` into new shards named by ``pattern``.

    Samples are copied as raw bytes, never decoded: every input sample is written exactly
    once, with its key and the bytes of each field (``__url__`` and other ``__`` entries
    are dropped). In order (the default), the samples keep the order of the inputs.
    With ``shuffle``, they are written in a uniformly random order, in two passes through
    bucket files in a temporary directory that is removed at the end, also on failure.

    All or nothing: the shards are written into a hidden directory ``.reshard-*`` beside the
    first output shard and renamed to their final names only after the whole run succeeded.
    A run that fails leaves no new file under a final name, and files already there as they
    were; a process killed outright leaves only hidden ``.reshard-*`` directories (that one,
    and the bucket directory under ``tmpdir``).

    Args:
        inputs: a shard spec (see :func:`~wdspipes.read.shards.expand_urls`).
        pattern: the output names, printf-style: ``"out/train-%06d.tar"``: local paths (the
            shards are renamed into place), no URL.
        maxcount: the most samples per output shard.
        maxsize: the most bytes per output shard.
        shuffle: write the samples in a uniformly random order.
        seed: makes the shuffle reproducible: the same inputs and seed give the same bytes.
        memory: the budget in bytes for the samples held at once while shuffling.
        tmpdir: where the bucket files go (default: the output directory). They take about
            as much space as the samples.
        compress: compress the output shards: ``"gz"``, ``"bz2"``, ``"xz"`` or ``"zst"``.
        progress: show progress bars (tqdm) on standard error.
        ignore_zeros: read on past zero blocks in the inputs, as GNU tar's ``--ignore-zeros``
            (archives joined with ``cat`` are read whole); by default bytes other than zeros
            after an end-of-archive marker are an error.

    Returns:
        A :class:`ReshardReport`.

    Raises:
        ValueError: a bad argument, a pattern that is a URL, or an output name that could
            overwrite an input.
        WdsError: an input cannot be read (the error names the shard).
        OSError: the output cannot be written, or an output name is a directory.
        RuntimeError: fewer or more samples were written than read (a bug, never expected).
    """
    if isinstance(maxcount, bool) or not isinstance(maxcount, int):
        raise ValueError(f"maxcount must be an int, got {maxcount!r}")
    _check_positive(maxcount=maxcount, maxsize=maxsize, memory=memory)
    check_pattern(pattern)
    if url_scheme(pattern) is not None:
        raise ValueError(
            f"reshard writes local shards, renamed into place when all are written; the "
            f"pattern must be a path, got the URL {pattern!r} (write locally and copy, or "
            "use ShardWriter, which writes to URLs)"
        )
    urls = expand_urls(inputs)
    _check_no_clash(pattern, urls)
    start = time.perf_counter()
    outdir = os.path.dirname(pattern % 0) or "."
    sizes = {url: _local_size(url) for url in urls}
    written = _Tally()
    buckets, passes, largest = 0, 1, 0
    if shuffle and seed is None:
        seed = random.SystemRandom().randrange(1 << 63)
    with (
        _temporary_directory(outdir) as staging,
        ShardWriter(
            os.path.join(staging.replace("%", "%%"), "%06d"),
            maxcount=maxcount,
            maxsize=maxsize,
            compress=compress,
            encoder=False,
        ) as writer,
        _Reader(
            urls, sizes, progress, "pass 1: buckets" if shuffle else "resharding", ignore_zeros
        ) as reader,
    ):
        if shuffle:
            with (
                _temporary_directory(tmpdir or staging) as directory,
                BucketShuffle(directory, memory, seed, reader.total) as shuffler,
            ):
                for sample in reader:
                    shuffler.add(sample)
                reader.bar.close()
                with _bar(progress, "pass 2: shards", total=shuffler.size) as bar:
                    for sample in shuffler:
                        written.write(writer, sample)
                        bar.update(written.last)
                buckets, passes, largest = shuffler.buckets, shuffler.passes, shuffler.largest
        else:
            for sample in reader:
                written.write(writer, sample)
        writer.close()
        _check_counts(reader.tally, written)
        shards = _publish(writer.shards, pattern)
    return ReshardReport(
        samples=written.samples,
        bytes=written.bytes,
        shards=shards,
        output_bytes=sum(os.path.getsize(path) for path in shards),
        input_bytes=reader.total,
        seconds=time.perf_counter() - start,
        passes=passes,
        buckets=buckets,
        largest_bucket=largest,
        seed=seed if shuffle else None,
    )


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")


def _check_no_clash(pattern: str, urls: list[str]) -> None:
    """Refuse a pattern that could name one of the local input shards: writing would
    replace an input, possibly before it is read."""
    template = os.path.abspath(pattern)
    literals = [re.escape(part) for part in _CONVERSION.split(template)]
    wildcards = ["%" if c == "%%" else ".+" for c in _CONVERSION.findall(template)]
    regex = re.compile(literals[0] + "".join(map(str.__add__, wildcards, literals[1:])))
    for url in urls:
        path = local_path(url)
        if path is not None and regex.fullmatch(os.path.abspath(path)):
            raise ValueError(f"the output pattern {pattern!r} could overwrite the input {url!r}")


def _local_size(url: str) -> int | None:
    path = local_path(url)
    if path is None:
        return None
    try:
        return os.path.getsize(path)
    except OSError:
        return None  # reading it reports the problem, with the URL


def _publish(staged: list[str], pattern: str) -> list[str]:
    """Move the staged shards to their final names, in order: the last step of a run that
    succeeded. The directories are made and the names checked first, so that no rename is
    expected to fail once one has been made. A file under a final name is replaced."""
    finals = [pattern % number for number in range(len(staged))]
    for final in finals:
        directory = os.path.dirname(final)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if os.path.isdir(final):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), final)
    for source, final in zip(staged, finals, strict=True):
        os.replace(source, final)
    return finals


@contextlib.contextmanager
def _temporary_directory(parent: str) -> Iterator[str]:
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".reshard-", dir=parent) as directory:
        yield directory


def _bar(progress: bool, desc: str, total: int | None) -> Any:
    """A tqdm bar in bytes on standard error; none (a no-op bar) without ``progress``."""
    return tqdm(
        desc=desc,
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        disable=None if progress else True,
        leave=False,
        dynamic_ncols=True,
    )


@dataclass
class _Tally:
    """Samples and payload bytes counted on one side of the copy."""

    samples: int = 0
    bytes: int = 0
    last: int = 0  # the payload of the last sample

    def add(self, sample: Sample) -> None:
        self.last = sum(len(v) for k, v in sample.items() if not k.startswith("__"))
        self.samples += 1
        self.bytes += self.last

    def write(self, writer: ShardWriter, sample: Sample) -> None:
        writer.write(sample)
        self.add(sample)


def _check_counts(read: _Tally, written: _Tally) -> None:
    if (read.samples, read.bytes) != (written.samples, written.bytes):
        raise RuntimeError(
            f"reshard read {read.samples} samples ({read.bytes} bytes) but wrote "
            f"{written.samples} ({written.bytes} bytes)"
        )


class _Reader:
    """The input samples without their ``__url__``, counted, with a progress bar in input
    bytes (payload as it comes, set to the shard sizes at each shard's end)."""

    def __init__(
        self,
        urls: list[str],
        sizes: dict[str, int | None],
        progress: bool,
        desc: str,
        ignore_zeros: bool = False,
    ) -> None:
        self.urls = urls
        self.ignore_zeros = ignore_zeros
        self.sizes = sizes
        known = [sizes[url] for url in urls]
        self.total = None if None in known else sum(size or 0 for size in known)
        self.tally = _Tally()
        self.bar = _bar(progress, desc, self.total)

    def __iter__(self) -> Iterator[Sample]:
        url, done = None, 0  # the current shard, the sizes of those finished
        for sample in WebDataset(self.urls, ignore_zeros=self.ignore_zeros):
            if sample["__url__"] != url:
                if url is not None:
                    done += self.sizes[url] or 0
                url = sample["__url__"]
                self._advance(done)
            del sample["__url__"]
            self.tally.add(sample)
            self.bar.update(self.tally.last)
            yield sample
        self._advance(self.total or 0)

    def _advance(self, position: int) -> None:
        if position > self.bar.n:
            self.bar.update(position - self.bar.n)

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.bar.close()


def bucket_count(size: int | None, memory: float, limit: int = MAX_BUCKETS) -> int:
    """How many buckets a shuffle of ``size`` bytes needs under a ``memory`` budget: enough
    for one bucket's expected size to be ``FILL`` of the budget, at most ``limit``; the
    limit if the size is unknown.

    >>> bucket_count(10**10, 1e9), bucket_count(10**6, 1e9), bucket_count(None, 1e9, 64)
    (20, 1, 64)
    """
    if size is None:
        return limit
    return max(1, min(limit, math.ceil(size / (memory * FILL))))


def _open_file_limit() -> int:
    """The most bucket files to keep open: MAX_BUCKETS, or fewer under a low ``ulimit -n``."""
    try:
        import resource
    except ImportError:  # not a Unix
        return MAX_BUCKETS
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_BUCKETS
    return max(2, min(MAX_BUCKETS, soft - 64))


@dataclass
class _Bucket:
    """A finished bucket file: its path, records and bytes."""

    path: str
    count: int
    size: int

    @property
    def cost(self) -> int:
        """The memory it takes loaded: its bytes and an 8-byte offset per record."""
        return self.size + 8 * self.count


class _Distributor:
    """Records appended to ``count`` bucket files, each chosen uniformly at random. A file
    is created when its first record comes."""

    def __init__(
        self,
        directory: str,
        name: str,
        count: int,
        bufsize: int,
        rng: random.Random,
        created: set[str],
    ) -> None:
        self.created = created  # every file made is added to it
        self.paths = [os.path.join(directory, f"{name}-{i:04d}") for i in range(count)]
        self.files: list[IO[bytes] | None] = [None] * count
        self.counts = [0] * count
        self.sizes = [0] * count
        self.bufsize = bufsize
        self.rng = rng

    def add(self, record: bytes) -> None:
        index = self.rng.randrange(len(self.files))
        file = self.files[index]
        if file is None:
            file = open(self.paths[index], "wb", buffering=self.bufsize)  # noqa: SIM115
            self.created.add(self.paths[index])
            self.files[index] = file  # closed by close()
        file.write(_PREFIX.pack(len(record)))
        file.write(record)
        self.counts[index] += 1
        self.sizes[index] += _PREFIX.size + len(record)

    def close(self) -> list[_Bucket]:
        """Close the files; the buckets that got records, in bucket order."""
        errors = []
        for index, file in enumerate(self.files):
            if file is not None:
                self.files[index] = None
                try:
                    file.close()
                except OSError as exn:  # a full disk shows when the buffer is flushed
                    errors.append(exn)
        if errors:
            raise errors[0]
        return [
            _Bucket(path, count, size)
            for path, count, size in zip(self.paths, self.counts, self.sizes, strict=True)
            if count
        ]


class BucketShuffle:
    """Shuffle samples uniformly at random in bounded memory, through bucket files on disk.

    :meth:`add` packs each sample (its key and the bytes of its fields) with msgpack and
    appends it to one of :attr:`buckets` files chosen uniformly at random (pass 1).
    Iterating then takes the buckets in random order, loads each into memory, and yields
    its samples in random order, removing each file once loaded (pass 2). A bucket too big
    for the budget is first split the same way into smaller ones (a further pass over its
    bytes). Each bucket gets a uniformly random subset of the samples, and each is put in
    uniformly random order, so the whole order is a uniformly random permutation.

    Args:
        directory: an existing directory for the bucket files.
        memory: the budget in bytes for the samples loaded at once (one bucket).
        seed: fixes the assignments and orders; None: fresh entropy.
        expected_size: about how many bytes the samples take, to choose the number of
            buckets (see :func:`bucket_count`); None: as many as may be open at once.

    Attributes:
        buckets: the bucket files of pass 1.
        passes: passes over the data so far: 2, plus one per level of splitting.
        count: samples added.
        size: bytes of their fields.
        largest: the largest bucket loaded so far, in bytes with its record offsets: the
            memory that the samples took at most.

    Yields:
        The samples added, each once: dicts with ``__key__`` and the fields' bytes.

    Raises:
        TypeError: a sample without a string key, or with a field that is not bytes.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp, BucketShuffle(tmp, 300, seed=1) as shuf:
    ...     for i in range(8):
    ...         shuf.add({"__key__": str(i), "__url__": "a.tar", "txt": b"%d" % i})
    ...     keys = [sample["__key__"] for sample in shuf]
    >>> sorted(keys) == [str(i) for i in range(8)], keys != sorted(keys), shuf.buckets > 1
    (True, True, True)
    """

    def __init__(
        self,
        directory: str,
        memory: float,
        seed: int | None = None,
        expected_size: int | None = None,
    ) -> None:
        _check_positive(memory=memory)
        self.directory = directory
        self.memory = memory
        material = f"{seed}" if seed is not None else f"{random.SystemRandom().random()}"
        self.order_rng = random.Random(f"wdspipes.reshard:{material}:order")
        self.max_open = _open_file_limit()
        self.buckets = bucket_count(expected_size, memory, self.max_open)
        self.passes = 2
        self.largest = 0  # the largest bucket cost loaded so far
        self.count = 0
        self.size = 0  # payload bytes
        self._packer = msgpack.Packer(use_bin_type=True)
        self._assign_rng = random.Random(f"wdspipes.reshard:{material}:assign")
        self._files: set[str] = set()  # the bucket files on disk
        self._buffer = bytearray()  # pass 2 reads each bucket into it
        self._pass1: _Distributor | None = self._distributor("bucket", self.buckets)

    def _distributor(self, name: str, count: int) -> _Distributor:
        bufsize = int(min(MAX_BUFFER, max(MIN_BUFFER, self.memory * BUFFER_SHARE / count)))
        return _Distributor(
            self.directory, name, count, bufsize, self._assign_rng, created=self._files
        )

    def add(self, sample: Sample) -> None:
        """Pack a sample into a random bucket; ``__`` entries other than ``__key__`` are
        dropped."""
        if self._pass1 is None:
            raise RuntimeError("BucketShuffle.add after iteration began")
        key = sample["__key__"]
        if not isinstance(key, str):
            raise TypeError(f"__key__ must be a string, got {type(key).__name__}")
        record = [key.encode(*_ENCODING)]
        for name, value in sample.items():
            if name.startswith("__"):
                continue
            if type(value) is not bytes:
                raise TypeError(
                    f"sample {key!r}: field {name!r} must be bytes, got {type(value).__name__}"
                )
            record += (name.encode(*_ENCODING), value)
            self.size += len(value)
        self._pass1.add(self._packer.pack(record))
        self.count += 1

    def __iter__(self) -> Iterator[Sample]:
        if self._pass1 is None:
            raise RuntimeError("a BucketShuffle can be iterated once")
        buckets = self._pass1.close()
        loaded = [bucket.size for bucket in buckets if not self._too_big(bucket, 0)]
        self._buffer = bytearray(max(loaded, default=0))
        self._pass1 = None
        yield from self._drain(buckets, depth=0)

    def _drain(self, buckets: list[_Bucket], depth: int) -> Iterator[Sample]:
        order = list(buckets)
        self.order_rng.shuffle(order)
        for bucket in order:
            if self._too_big(bucket, depth):
                self.passes = max(self.passes, depth + 3)
                yield from self._drain(self._split(bucket, depth + 1), depth + 1)
            else:
                yield from self._load(bucket)

    def _too_big(self, bucket: _Bucket, depth: int) -> bool:
        """Whether to split a bucket rather than load it."""
        return bucket.cost > self.memory * LOAD_LIMIT and bucket.count > 1 and depth < MAX_SPLITS

    def _split(self, bucket: _Bucket, depth: int) -> list[_Bucket]:
        """Deal a bucket's records out to smaller buckets, as pass 1 did."""
        count = min(bucket.count, self.max_open, max(2, bucket_count(bucket.cost, self.memory)))
        name = os.path.basename(bucket.path)
        parts = self._distributor(name, count)
        try:
            with open(bucket.path, "rb", buffering=MAX_BUFFER) as file:
                for record in _read_records(file, bucket.path):
                    parts.add(record)
        finally:
            buckets = parts.close()
        self._remove(bucket.path)
        return buckets

    def _load(self, bucket: _Bucket) -> Iterator[Sample]:
        self.largest = max(self.largest, bucket.cost)
        view = self._read(bucket)
        self._remove(bucket.path)
        starts = _record_starts(view, bucket.path)
        if len(starts) != bucket.count:
            raise WdsError(f"bucket file holds {len(starts)} of {bucket.count} records")
        self.order_rng.shuffle(starts)
        for start in starts:
            (length,) = _PREFIX.unpack_from(view, start)
            begin = start + _PREFIX.size
            yield _unpack(view[begin : begin + length])

    def _read(self, bucket: _Bucket) -> memoryview:
        """A bucket file's bytes, read into one buffer that serves every bucket in turn: a
        new buffer per bucket would let the allocator keep the old ones (glibc raises its
        mmap threshold to the size of a freed block), nearly doubling the peak memory."""
        if len(self._buffer) < bucket.size:
            self._buffer = bytearray()  # free the old one first
            self._buffer = bytearray(bucket.size)
        view = memoryview(self._buffer)[: bucket.size]
        with open(bucket.path, "rb", buffering=0) as file:
            got = 0
            while got < bucket.size and (chunk := file.readinto(view[got:])):
                got += chunk
        if got != bucket.size:
            raise WdsError(f"bucket file holds {got} of {bucket.size} bytes", url=bucket.path)
        return view

    def _remove(self, path: str) -> None:
        os.remove(path)
        self._files.discard(path)

    def close(self) -> None:
        """Close the bucket files and remove those not consumed."""
        try:
            if self._pass1 is not None:
                pass1, self._pass1 = self._pass1, None
                pass1.close()
        finally:
            for path in sorted(self._files):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
            self._files.clear()

    def __enter__(self) -> BucketShuffle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except OSError:
            if exc is None:
                raise


def _unpack(data: memoryview) -> Sample:
    record = msgpack.unpackb(data)
    sample: Sample = {"__key__": record[0].decode(*_ENCODING)}
    for index in range(1, len(record), 2):
        sample[record[index].decode(*_ENCODING)] = record[index + 1]
    return sample


def _record_starts(blob: memoryview, path: str) -> array[int]:
    """The offsets of the records in a bucket file's bytes."""
    starts: array[int] = array("q")
    position, end = 0, len(blob)
    while position < end:
        starts.append(position)
        (length,) = _PREFIX.unpack_from(blob, position)
        position += _PREFIX.size + length
    if position != end:
        raise WdsError("bucket file ends inside a record", url=path)
    return starts


def _read_records(file: IO[bytes], path: str) -> Iterable[bytes]:
    """The records of a bucket file, one at a time."""
    while header := file.read(_PREFIX.size):
        (length,) = _PREFIX.unpack(header) if len(header) == _PREFIX.size else (-1,)
        record = file.read(length) if length >= 0 else b""
        if len(record) != length:
            raise WdsError("bucket file ends inside a record", url=path)
        yield record
