"""The bucket shuffle of :func:`~wdspipes.tools.reshard.reshard`, as two passes that any
engine can run: on one machine in one process, or spread over a Ray cluster
(:mod:`~wdspipes.tools.ray_engine`), with the same bytes out.

Pass 1 (:class:`Scatter`, :func:`scatter_source`) packs each sample of an input shard with
msgpack and appends it to one of B bucket files chosen uniformly at random; the choices of
input shard ``i`` come from a generator seeded by ``(seed, i)`` alone, so each input shard can
be scattered on its own (into its own bucket files) or all in one stream (into shared ones):
the files of one bucket, joined in input order, hold the same records either way. Pass 2
(:class:`BucketReader`, :func:`write_bucket`) takes the buckets in an order drawn from
``(seed)``, and loads each bucket and puts it in an order drawn from ``(seed, bucket)``,
splitting it first if it is too big for the memory budget: each bucket on its own, so the
buckets can be written in parallel, each into its own numbered shards. A :class:`ShufflePlan`
holds everything the tasks of both passes must agree on.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     plan = ShufflePlan(tmp, buckets=3, seed=7, memory=1e6)
...     parts = [scatter_samples(plan, index, [{"__key__": f"{index}-{n}", "txt": b"x"}
...                                            for n in range(4)]) for index in range(2)]
...     buckets = order_buckets(plan, join_parts(plan, [part.parts for part in parts]))
...     keys = [s["__key__"] for b in buckets for s in BucketReader(plan).samples(b)]
>>> sorted(keys) == sorted(f"{i}-{n}" for i in range(2) for n in range(4)), len(buckets)
(True, 3)
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import struct
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import IO, Any, Protocol

import msgpack

from wdspipes.core.stage import Sample
from wdspipes.errors import WdsError
from wdspipes.io.local import local_path
from wdspipes.read.grouping import tar_samples
from wdspipes.write import ShardWriter

__all__ = [
    "BucketReader",
    "BucketShuffle",
    "ReshardInput",
    "Run",
    "Scatter",
    "Scattered",
    "ShardSource",
    "ShufflePlan",
    "Staged",
    "Tally",
    "Written",
    "bucket_count",
    "bucket_pattern",
    "group_buckets",
    "join_parts",
    "order_buckets",
    "scatter_samples",
    "scatter_source",
    "total_size",
    "write_buckets",
]

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
GROUP_SHARDS = 8
"""Pass 2 writes runs of buckets that hold at least this many output shards' worth of
samples, each run into shards of its own: at most about one shard in this many is short."""

_PREFIX = struct.Struct("<Q")  # each record in a bucket file: its length, then its msgpack
_ENCODING = ("utf-8", "surrogateescape")  # keys and names: tar names decode with surrogates


def check_positive(**values: float) -> None:
    """Raise ValueError naming the first value that is not a positive number."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")


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


def open_file_limit() -> int:
    """The most bucket files to keep open: MAX_BUCKETS, or fewer under a low ``ulimit -n``."""
    try:
        import resource
    except ImportError:  # not a Unix
        return MAX_BUCKETS
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_BUCKETS
    return max(2, min(MAX_BUCKETS, soft - 64))


@dataclass(frozen=True)
class ShufflePlan:
    """What every pass of one shuffle must agree on, decided once by whoever starts it (the
    open-file limit included: a worker with another limit must still split alike).

    Attributes:
        directory: where the bucket files go, reached by every task.
        buckets: how many buckets pass 1 deals the samples into.
        seed: the seed every assignment and order derives from.
        memory: the budget in bytes for one bucket loaded in pass 2.
        max_open: the most bucket files one task keeps open.
    """

    directory: str
    buckets: int
    seed: int
    memory: float
    max_open: int = MAX_BUCKETS

    def rng(self, *names: object) -> random.Random:
        """The generator of one part of the shuffle, named by ``names``."""
        return random.Random(":".join(["wdspipes.reshard", str(self.seed), *map(str, names)]))

    def bufsize(self, count: int) -> int:
        """The write buffer of each of ``count`` bucket files open at once."""
        return int(min(MAX_BUFFER, max(MIN_BUFFER, self.memory * BUFFER_SHARE / count)))


@dataclass
class Part:
    """One file of a bucket: its path, records and bytes."""

    path: str
    count: int
    size: int


@dataclass
class Bucket:
    """A bucket of pass 2: its number, and its files, whose records in this order are the
    bucket's."""

    index: int
    parts: list[Part]
    name: str = ""  # the stem of the files it is split into

    def __post_init__(self) -> None:
        self.name = self.name or f"bucket-{self.index:04d}"

    @property
    def count(self) -> int:
        return sum(part.count for part in self.parts)

    @property
    def size(self) -> int:
        return sum(part.size for part in self.parts)

    @property
    def cost(self) -> int:
        """The memory it takes loaded: its bytes and an 8-byte offset per record."""
        return self.size + 8 * self.count


@dataclass
class Tally:
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

    def merge(self, other: Tally) -> None:
        self.samples += other.samples
        self.bytes += other.bytes


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

    def close(self) -> list[Part | None]:
        """Close the files; each bucket's file, None for those that got no record."""
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
            Part(path, count, size) if count else None
            for path, count, size in zip(self.paths, self.counts, self.sizes, strict=True)
        ]


class Scatter:
    """Pass 1: samples packed and dealt out to the plan's bucket files named ``NAME-BBBB``.

    Call :meth:`begin` at the start of each input shard: the bucket of each of its samples
    is drawn from a generator seeded by the plan's seed and the shard's number only.

    Attributes:
        tally: the samples added and their payload bytes.
        created: the files made so far.
    """

    def __init__(self, plan: ShufflePlan, name: str) -> None:
        self.tally = Tally()
        self.created: set[str] = set()
        self._packer = msgpack.Packer(use_bin_type=True)
        self._files: _Distributor | None = _Distributor(
            plan.directory,
            name,
            plan.buckets,
            plan.bufsize(plan.buckets),
            plan.rng("assign", 0),
            self.created,
        )
        self._plan = plan

    def begin(self, source: int) -> None:
        """Draw the buckets of the samples that follow for input shard number ``source``."""
        self._distributor().rng = self._plan.rng("assign", source)

    def add(self, sample: Sample) -> None:
        """Pack a sample into a random bucket; ``__`` entries other than ``__key__`` are
        dropped.

        Raises:
            TypeError: a key that is not a string, or a field that is not bytes.
        """
        key = sample["__key__"]
        if not isinstance(key, str):
            raise TypeError(f"__key__ must be a string, got {type(key).__name__}")
        record = [key.encode(*_ENCODING)]
        size = 0
        for name, value in sample.items():
            if name.startswith("__"):
                continue
            if type(value) is not bytes:
                raise TypeError(
                    f"sample {key!r}: field {name!r} must be bytes, got {type(value).__name__}"
                )
            record += (name.encode(*_ENCODING), value)
            size += len(value)
        self._distributor().add(self._packer.pack(record))
        self.tally.samples += 1
        self.tally.bytes += size
        self.tally.last = size

    def _distributor(self) -> _Distributor:
        if self._files is None:
            raise RuntimeError("Scatter.add after close")
        return self._files

    def close(self) -> list[Part | None]:
        """Close the bucket files: each bucket's, None where it got no record. Closing again
        returns nothing."""
        files, self._files = self._files, None
        return [] if files is None else files.close()


@dataclass
class Scattered:
    """What pass 1 over one input shard did: its bucket files, and what it read."""

    parts: list[Part | None]
    tally: Tally = field(default_factory=Tally)


class ReshardInput(Protocol):
    """One input of a reshard, read by one task of pass 1: its samples, a name for errors,
    and its size in bytes if known (to choose the number of buckets)."""

    @property
    def name(self) -> str: ...

    @property
    def size(self) -> int | None: ...

    def samples(self) -> Iterator[Sample]:
        """The samples, each a dict of ``__key__`` and fields' bytes."""
        ...

    def shared(self) -> ReshardInput:
        """The same input, named so that a process in another directory finds it."""
        ...


@dataclass(frozen=True)
class ShardSource:
    """An input shard by URL: its samples without ``__url__``.

    Raises (on reading):
        WdsError: the shard cannot be read (the error names it).
    """

    name: str
    ignore_zeros: bool = False
    size: int | None = None

    @classmethod
    def of(cls, url: str, ignore_zeros: bool = False) -> ShardSource:
        """The source of ``url``, its size taken if it is a local file."""
        path = local_path(url)
        size = None
        if path is not None:
            with contextlib.suppress(OSError):  # reading it reports the problem
                size = os.path.getsize(path)
        return cls(url, ignore_zeros, size)

    def samples(self) -> Iterator[Sample]:
        for sample in tar_samples([self.name], ignore_zeros=self.ignore_zeros):
            del sample["__url__"]
            yield sample

    def shared(self) -> ShardSource:
        if local_path(self.name) != self.name:
            return self
        return ShardSource(os.path.abspath(self.name), self.ignore_zeros, self.size)


def total_size(sources: Iterable[ReshardInput]) -> int | None:
    """The sizes of all ``sources`` added, None if one is not known."""
    sizes = [source.size for source in sources]
    return None if None in sizes else sum(size or 0 for size in sizes)


def scatter_samples(plan: ShufflePlan, source: int, samples: Iterable[Sample]) -> Scattered:
    """Pass 1 over the samples of input shard number ``source``, into bucket files of its
    own (``shard-SSSSSS-BBBB``); a failure leaves the files made (the caller's directory)."""
    scatter = Scatter(plan, f"shard-{source:06d}")
    scatter.begin(source)
    try:
        for sample in samples:
            scatter.add(sample)
    finally:
        parts = scatter.close()
    return Scattered(parts, scatter.tally)


def scatter_source(plan: ShufflePlan, number: int, source: ReshardInput) -> Scattered:
    """Pass 1 over input number ``number`` (:func:`scatter_samples` of its samples)."""
    return scatter_samples(plan, number, source.samples())


def join_parts(plan: ShufflePlan, scattered: Iterable[list[Part | None]]) -> list[Bucket]:
    """The buckets that got records, from the bucket files of each input shard in input
    order."""
    parts: list[list[Part]] = [[] for _ in range(plan.buckets)]
    for files in scattered:
        for index, part in enumerate(files):
            if part is not None:
                parts[index].append(part)
    return [Bucket(index, files) for index, files in enumerate(parts) if files]


def order_buckets(plan: ShufflePlan, buckets: list[Bucket]) -> list[Bucket]:
    """The order in which pass 2 writes the buckets: uniformly random, from the seed."""
    order = list(buckets)
    plan.rng("order").shuffle(order)
    return order


class BucketReader:
    """Pass 2: each bucket loaded and put in a uniformly random order drawn from the plan's
    seed and the bucket's number; one too big for the budget is first split (as pass 1 dealt
    out the samples) into smaller ones, taken in random order.

    Args:
        plan: the shuffle's plan.
        consume: remove each bucket file of pass 1 once loaded (frees disk space as the
            pass goes; a task that may be retried keeps them).

    Attributes:
        largest: the largest bucket loaded so far, in bytes with its record offsets.
        passes: passes over the data so far: 2, plus one per level of splitting.
        created: the files of split buckets not yet consumed.
    """

    def __init__(self, plan: ShufflePlan, consume: bool = False) -> None:
        self.plan = plan
        self.consume = consume
        self.largest = 0
        self.passes = 2
        self.created: set[str] = set()
        self._buffer = bytearray()  # serves every bucket in turn

    def samples(self, bucket: Bucket) -> Iterator[Sample]:
        """The samples of one bucket, each once, in the bucket's random order."""
        yield from self._drain([bucket], self.plan.rng("bucket", bucket.index), 0)

    def _drain(self, buckets: list[Bucket], rng: random.Random, depth: int) -> Iterator[Sample]:
        rng.shuffle(buckets)
        for bucket in buckets:
            if self._too_big(bucket, depth):
                self.passes = max(self.passes, depth + 3)
                yield from self._drain(self._split(bucket, rng, depth + 1), rng, depth + 1)
            else:
                yield from self._load(bucket, rng, depth)

    def _too_big(self, bucket: Bucket, depth: int) -> bool:
        """Whether to split a bucket rather than load it."""
        return (
            bucket.cost > self.plan.memory * LOAD_LIMIT and bucket.count > 1 and depth < MAX_SPLITS
        )

    def _split(self, bucket: Bucket, rng: random.Random, depth: int) -> list[Bucket]:
        """Deal a bucket's records out to smaller buckets, as pass 1 did."""
        plan = self.plan
        count = min(bucket.count, plan.max_open, max(2, bucket_count(bucket.cost, plan.memory)))
        parts = _Distributor(
            plan.directory, bucket.name, count, plan.bufsize(count), rng, self.created
        )
        try:
            for part in bucket.parts:
                with open(part.path, "rb", buffering=MAX_BUFFER) as file:
                    for record in _read_records(file, part.path):
                        parts.add(record)
        finally:
            split = parts.close()
        self._release(bucket, depth)
        return [
            Bucket(bucket.index, [part], os.path.basename(part.path))
            for part in split
            if part is not None
        ]

    def _load(self, bucket: Bucket, rng: random.Random, depth: int) -> Iterator[Sample]:
        self.largest = max(self.largest, bucket.cost)
        view = self._read(bucket)
        self._release(bucket, depth)
        starts = _record_starts(view, bucket)
        if len(starts) != bucket.count:
            raise WdsError(f"bucket file holds {len(starts)} of {bucket.count} records")
        rng.shuffle(starts)
        for start in starts:
            (length,) = _PREFIX.unpack_from(view, start)
            begin = start + _PREFIX.size
            yield _unpack(view[begin : begin + length])

    def _read(self, bucket: Bucket) -> memoryview:
        """A bucket's bytes, read into one buffer that serves every bucket in turn: a
        new buffer per bucket would let the allocator keep the old ones (glibc raises its
        mmap threshold to the size of a freed block), nearly doubling the peak memory."""
        if len(self._buffer) < bucket.size:
            self._buffer = bytearray()  # free the old one first
            self._buffer = bytearray(bucket.size)
        view = memoryview(self._buffer)[: bucket.size]
        got = 0
        for part in bucket.parts:
            with open(part.path, "rb", buffering=0) as file:
                end = got + part.size
                while got < end and (chunk := file.readinto(view[got:end])):
                    got += chunk
            if got != end:
                raise WdsError(f"bucket file holds {got} of {bucket.size} bytes", url=part.path)
        return view

    def _release(self, bucket: Bucket, depth: int) -> None:
        """Remove a bucket's files once read: always those of a split, those of pass 1 if
        the reader consumes them."""
        if depth or self.consume:
            for part in bucket.parts:
                os.remove(part.path)
                self.created.discard(part.path)

    def close(self) -> None:
        """Remove the files of split buckets not consumed (a failure on the way)."""
        for path in sorted(self.created):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        self.created.clear()


Staged = tuple[str, int]
"""A shard written under its temporary name, and the samples it holds."""


@dataclass
class Written:
    """What pass 2 wrote of one bucket: the shards, in order, and what they hold."""

    shards: list[Staged]
    tally: Tally
    largest: int
    passes: int


@dataclass
class Run:
    """What a whole reshard did, on any engine: samples read and written, the shards written
    (in order, under temporary names), and the passes and largest bucket of a shuffle."""

    read: Tally
    written: Tally
    staged: list[Staged]
    passes: int = 1
    largest: int = 0


def bucket_pattern(staging: str, position: int) -> str:
    """The temporary names of the shards of the run of buckets written at ``position`` in
    pass 2."""
    return os.path.join(staging.replace("%", "%%"), f"{position:06d}-%06d")


def write_samples(
    samples: Iterable[Sample],
    pattern: str,
    options: dict[str, Any],
    tally: Tally,
    bar: Any = None,
) -> list[Staged]:
    """Write samples as raw bytes into shards named by ``pattern`` (``ShardWriter``
    ``options``), counting them in ``tally`` and on the progress ``bar``; the shards, each
    with its number of samples."""
    with ShardWriter(pattern, encoder=False, **options) as writer:
        for sample in samples:
            tally.write(writer, sample)
            if bar is not None:
                bar.update(tally.last)
    return list(zip(writer.shards, writer.counts, strict=True))


def group_buckets(order: list[Bucket], maxcount: int, maxsize: float) -> list[list[Bucket]]:
    """The buckets in ``order`` cut into runs of consecutive ones that pass 2 writes each
    into shards of its own (in parallel on Ray), each run holding at least ``GROUP_SHARDS``
    shards' worth of samples (of ``maxcount`` samples or ``maxsize`` bytes, with the mean
    size of a sample): so at most about one shard in ``GROUP_SHARDS`` is short. It depends
    only on the buckets and the limits, never on the engine.

    >>> def bucket(index, count): return Bucket(index, [Part(f"b{index}", count, 100 * count)])
    >>> order = [bucket(i, 30) for i in range(7)]
    >>> [[b.index for b in run] for run in group_buckets(order, maxcount=10, maxsize=1e9)]
    [[0, 1, 2], [3, 4, 5, 6]]
    >>> [len(run) for run in group_buckets(order, maxcount=1000, maxsize=1e9)]
    [7]
    """
    count = sum(bucket.count for bucket in order)
    size = sum(bucket.size for bucket in order)
    shard = min(maxsize, maxcount * size / max(count, 1))
    runs: list[list[Bucket]] = []
    run: list[Bucket] = []
    for bucket in order:
        run.append(bucket)
        if sum(b.size for b in run) >= GROUP_SHARDS * shard:
            runs.append(run)
            run = []
    if run and runs:
        runs[-1] += run  # a short run at the end joins the one before
    elif run:
        runs.append(run)
    return runs


def write_buckets(
    plan: ShufflePlan,
    buckets: list[Bucket],
    pattern: str,
    options: dict[str, Any],
    reader: BucketReader | None = None,
    bar: Any = None,
) -> Written:
    """Pass 2 over a run of buckets (:func:`group_buckets`): the samples of each in turn, in
    their random order, into shards of their own named by ``pattern`` (``maxcount``,
    ``maxsize`` and ``compress`` in ``options``). Without a ``reader``, one of its own that
    keeps the files of pass 1 (a retried task finds them)."""
    own = reader is None
    reader = reader or BucketReader(plan)
    tally = Tally()
    samples = (sample for bucket in buckets for sample in reader.samples(bucket))
    try:
        shards = write_samples(samples, pattern, options, tally, bar)
    finally:
        if own:
            reader.close()
    return Written(shards, tally, reader.largest, reader.passes)


class BucketShuffle:
    """Shuffle samples uniformly at random in bounded memory, through bucket files on disk.

    :meth:`add` packs each sample (its key and the bytes of its fields) with msgpack and
    appends it to one of :attr:`buckets` files chosen uniformly at random (pass 1).
    Iterating then takes the buckets in random order, loads each into memory, and yields
    its samples in random order, removing each file once loaded (pass 2). A bucket too big
    for the budget is first split the same way into smaller ones (a further pass over its
    bytes). Each bucket gets a uniformly random subset of the samples, and each is put in
    uniformly random order, so the whole order is a uniformly random permutation.
    :meth:`begin` starts the samples of another input shard: their buckets are drawn from
    the seed and its number, as when each input shard is scattered apart (on Ray).

    Args:
        directory: an existing directory for the bucket files.
        memory: the budget in bytes for the samples loaded at once (one bucket).
        seed: fixes the assignments and orders; None: fresh entropy.
        expected_size: about how many bytes the samples take, to choose the number of
            buckets (see :func:`bucket_count`); None: as many as may be open at once.

    Attributes:
        plan: the :class:`ShufflePlan`.
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
        check_positive(memory=memory)
        if seed is None:
            seed = random.SystemRandom().randrange(1 << 63)
        max_open = open_file_limit()
        buckets = bucket_count(expected_size, memory, max_open)
        self.plan = ShufflePlan(directory, buckets, seed, memory, max_open)
        self._scatter: Scatter | None = Scatter(self.plan, "bucket")
        self._tally = self._scatter.tally
        self._files = self._scatter.created  # pass 1's files, removed by close()
        self._reader = BucketReader(self.plan, consume=True)

    @property
    def buckets(self) -> int:
        return self.plan.buckets

    @property
    def passes(self) -> int:
        return self._reader.passes

    @property
    def largest(self) -> int:
        return self._reader.largest

    @property
    def count(self) -> int:
        return self._tally.samples

    @property
    def size(self) -> int:
        return self._tally.bytes

    def begin(self, source: int) -> None:
        """The samples added next are those of input shard number ``source``."""
        self._adding().begin(source)

    def add(self, sample: Sample) -> None:
        """Pack a sample into a random bucket; ``__`` entries other than ``__key__`` are
        dropped."""
        self._adding().add(sample)

    def _adding(self) -> Scatter:
        if self._scatter is None:
            raise RuntimeError("BucketShuffle.add after iteration began")
        return self._scatter

    def drain(self) -> list[Bucket]:
        """End pass 1: the buckets, in the order pass 2 takes them, each to be read with
        :meth:`samples` (which removes its files)."""
        if self._scatter is None:
            raise RuntimeError("a BucketShuffle can be iterated once")
        scatter, self._scatter = self._scatter, None
        return order_buckets(self.plan, join_parts(self.plan, [scatter.close()]))

    def samples(self, bucket: Bucket) -> Iterator[Sample]:
        """The samples of one bucket of :meth:`drain`, in their random order."""
        return self._reader.samples(bucket)

    def __iter__(self) -> Iterator[Sample]:
        for bucket in self.drain():
            yield from self.samples(bucket)

    def close(self) -> None:
        """Close the bucket files and remove those not consumed."""
        try:
            if self._scatter is not None:
                scatter, self._scatter = self._scatter, None
                scatter.close()
        finally:
            for path in sorted(self._files):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
            self._files.clear()
            self._reader.close()

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


def _record_starts(blob: memoryview, bucket: Bucket) -> array[int]:
    """The offsets of the records in a bucket's bytes."""
    starts: array[int] = array("q")
    position, end = 0, len(blob)
    while position < end:
        starts.append(position)
        (length,) = _PREFIX.unpack_from(blob, position)
        position += _PREFIX.size + length
    if position != end:
        raise WdsError("bucket file ends inside a record", url=bucket.parts[-1].path)
    return starts


def _read_records(file: IO[bytes], path: str) -> Iterable[bytes]:
    """The records of a bucket file, one at a time."""
    while header := file.read(_PREFIX.size):
        (length,) = _PREFIX.unpack(header) if len(header) == _PREFIX.size else (-1,)
        record = file.read(length) if length >= 0 else b""
        if len(record) != length:
            raise WdsError("bucket file ends inside a record", url=path)
        yield record
