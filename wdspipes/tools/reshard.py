"""Reshard a dataset: its samples rewritten into new shards, in order or uniformly shuffled.

In order, the samples of the inputs stream into a :class:`~wdspipes.write.ShardWriter`,
which rolls over to a new shard by sample count and size. Shuffled, they go through a
:class:`BucketShuffle`: pass 1 streams each sample's raw bytes into one of B bucket files on
disk, chosen uniformly at random; pass 2 loads one bucket at a time, in random order, and
writes its samples in random order. That is a uniformly random permutation of all the
samples (an external shuffle, what AIStore's dSort does on a cluster), in memory bounded by
one bucket, so a dataset many times larger than RAM reshuffles on one machine.
All or nothing: the output shards are written into a hidden directory beside them and moved
to their names only once the whole run has succeeded. See docs/guide/resharding.md.

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
import os
import random
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from wdspipes.core.arguments import int_at_least
from wdspipes.core.stage import Sample
from wdspipes.io.local import local_path
from wdspipes.io.urls import check_url
from wdspipes.read.specs import ShardSpec, expand_urls
from wdspipes.tools.buckets import (
    LOAD_LIMIT,
    BucketShuffle,
    ReshardInput,
    Run,
    ShardSource,
    ShufflePlan,
    Staged,
    Tally,
    bucket_count,
    bucket_pattern,
    check_positive,
    group_buckets,
    open_file_limit,
    total_size,
    write_samples,
)
from wdspipes.tools.index import index_entry_url, write_index
from wdspipes.tools.progress import byte_bar
from wdspipes.write.shards import check_pattern

__all__ = [
    "ENGINES",
    "BucketShuffle",
    "ReshardReport",
    "bucket_count",
    "manifest_path",
    "reshard",
    "reshard_sources",
    "write_manifest",
]

ENGINES = ("local", "ray")
"""Where :func:`reshard` runs: in this process, or as tasks on a Ray cluster."""
_CONVERSION = re.compile(r"%%|%[-+ #0]*\d*(?:\.\d+)?[diouxX]")
_ = LOAD_LIMIT  # re-exported for the tests' bounds on the largest bucket


@dataclass(frozen=True)
class ReshardReport:
    """What :func:`reshard` did.

    Attributes:
        samples: samples written (as many as were read).
        bytes: bytes of their fields (the payload, without tar headers).
        shards: the paths of the shards written, in order.
        manifest: the path of the shard index written beside them (see :func:`manifest_path`).
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
    manifest: str = ""

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
    engine: str = "local",
    address: str | None = None,
    cpus: int | None = None,
    unsafe_names: bool = False,
) -> ReshardReport:
    """Rewrite the samples of ``inputs`` into new shards named by ``pattern``.

    Samples are copied as raw bytes, never decoded: every input sample is written exactly
    once, with its key and the bytes of each field (``__url__`` and other ``__`` entries
    are dropped). In order (the default), the samples keep the order of the inputs.
    With ``shuffle``, they are written in a uniformly random order, in two passes through
    bucket files in a temporary directory that is removed at the end, also on failure: each
    bucket is written into shards of its own (the last one of a bucket may be short), so
    that the buckets can be written in parallel, as on Ray.

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
        engine: ``"local"``, in this process; ``"ray"``, the shuffle's two passes as Ray
            tasks (one per input shard, then one per bucket; the ``ray`` extra), writing the
            same bytes. The output, ``tmpdir`` and the inputs must then be on storage that
            every node of the cluster reaches. See docs/guide/scaling.md.
        address: with ``engine="ray"``, the cluster to join (``"auto"``, ``"HOST:PORT"``,
            ``"ray://HOST:PORT"``); None starts Ray in this process for the run.
        cpus: with ``engine="ray"`` and no address, the CPUs of that Ray (default: all).
        unsafe_names: write keys whose member names escape the directory a tar tool extracts
            them into (a ``..`` component, a leading ``/``); by default an input sample with
            such a key is an :class:`~wdspipes.errors.EncodeError` and nothing is written.

    Returns:
        A :class:`ReshardReport`.

    Raises:
        ValueError: a bad argument, an output name that could overwrite an input, or a URL
            as output (the output is a local or shared directory).
        ModuleNotFoundError: ``engine="ray"`` without Ray installed (the error names the
            extra).
        ConnectionError: the Ray cluster at ``address`` cannot be reached.
        WdsError: an input cannot be read (the error names the shard), or is a ``pipe:`` URL
            that ``WDSPIPES_COMMANDS=never`` refuses (checked before anything is read).
        EncodeError: an input sample's key escapes, without ``unsafe_names``.
        OSError: the output cannot be written, or an output name is a directory.
        RuntimeError: fewer or more samples were written than read (a bug, never expected).
    """
    limits = {"maxcount": maxcount, "maxsize": maxsize, "memory": memory, "tmpdir": tmpdir}
    _check_options(pattern, limits, shuffle, engine, address, cpus)
    urls = expand_urls(inputs)
    _check_no_clash(pattern, urls)
    for url in urls:  # here, for the tasks of a Ray cluster read where this policy is unknown
        check_url(url)
    sources = [ShardSource.of(url, ignore_zeros) for url in urls]
    return reshard_sources(
        sources,
        pattern,
        maxcount,
        maxsize,
        shuffle,
        seed,
        memory,
        tmpdir,
        compress,
        progress,
        engine,
        address,
        cpus,
        unsafe_names,
    )


def reshard_sources(
    sources: Sequence[ReshardInput],
    pattern: str,
    maxcount: int = 100_000,
    maxsize: float = 3e9,
    shuffle: bool = False,
    seed: int | None = None,
    memory: float = 1e9,
    tmpdir: str | None = None,
    compress: str | None = None,
    progress: bool = False,
    engine: str = "local",
    address: str | None = None,
    cpus: int | None = None,
    unsafe_names: bool = False,
) -> ReshardReport:
    """:func:`reshard` of any inputs, each a :class:`~wdspipes.tools.buckets.ReshardInput` read
    by one task of pass 1 (shards by URL, the class archives of
    :mod:`~wdspipes.tools.classes`); the same arguments, and the same errors."""
    limits = {"maxcount": maxcount, "maxsize": maxsize, "memory": memory, "tmpdir": tmpdir}
    _check_options(pattern, limits, shuffle, engine, address, cpus)
    start = time.perf_counter()
    outdir = os.path.abspath(os.path.dirname(pattern % 0) or ".")
    options = {
        "maxcount": maxcount,
        "maxsize": maxsize,
        "compress": compress,
        "unsafe_names": unsafe_names,
    }
    if shuffle and seed is None:
        seed = random.SystemRandom().randrange(1 << 63)
    buckets = 0
    with _session(engine, address, cpus) as session, _temporary_directory(outdir) as staging:
        if shuffle:
            assert seed is not None  # drawn above
            with _temporary_directory(os.path.abspath(tmpdir or staging)) as directory:
                limit = open_file_limit()
                buckets = bucket_count(total_size(sources), memory, limit)
                plan = ShufflePlan(directory, buckets, seed, memory, limit)
                shuffled = _shuffle_here if session is None else session.shuffle
                run = shuffled(plan, list(sources), staging, options, progress)
        else:
            run = _copy_here(sources, staging, options, progress)
        _check_counts(run.read, run.written)
        shards = _publish(run.staged, pattern)
        manifest = write_manifest(pattern, shards, [count for _, count in run.staged])
    return ReshardReport(
        samples=run.written.samples,
        bytes=run.written.bytes,
        shards=shards,
        output_bytes=sum(os.path.getsize(path) for path in shards),
        input_bytes=total_size(sources),
        seconds=time.perf_counter() - start,
        passes=run.passes,
        buckets=buckets,
        largest_bucket=run.largest,
        seed=seed if shuffle else None,
        manifest=manifest,
    )


def _copy_here(
    sources: Sequence[ReshardInput], staging: str, options: dict[str, Any], progress: bool
) -> Run:
    """The samples in input order, into one series of shards."""
    written = Tally()
    with _Reader(sources, progress, "resharding") as reader:
        pattern = os.path.join(staging.replace("%", "%%"), "%06d")
        staged = write_samples(reader, pattern, options, written)
    return Run(reader.tally, written, staged, passes=1)


def _shuffle_here(
    plan: ShufflePlan,
    sources: list[ReshardInput],
    staging: str,
    options: dict[str, Any],
    progress: bool,
) -> Run:
    """The bucket shuffle in this process: pass 1 into one file per bucket, pass 2 bucket
    after bucket."""
    written, staged = Tally(), []
    with (
        _Reader(sources, progress, "pass 1: buckets") as reader,
        BucketShuffle(plan.directory, plan.memory, plan.seed, total_size(sources)) as shuffler,
    ):
        reader.begin = shuffler.begin
        for sample in reader:
            shuffler.add(sample)
        reader.bar.close()
        runs = group_buckets(shuffler.drain(), options["maxcount"], options["maxsize"])
        with byte_bar(progress, "pass 2: shards", total=shuffler.size) as bar:
            for position, buckets in enumerate(runs):
                samples = (sample for bucket in buckets for sample in shuffler.samples(bucket))
                pattern = bucket_pattern(staging, position)
                staged += write_samples(samples, pattern, options, written, bar)
    return Run(reader.tally, written, staged, shuffler.passes, shuffler.largest)


def _check_options(
    pattern: str,
    limits: dict[str, Any],
    shuffle: bool,
    engine: str,
    address: str | None,
    cpus: int | None,
) -> None:
    """Refuse bad arguments before any work."""
    maxcount, tmpdir = limits["maxcount"], limits["tmpdir"]
    if isinstance(maxcount, bool) or not isinstance(maxcount, int):
        raise ValueError(f"maxcount must be an int, got {maxcount!r}")
    check_positive(maxcount=maxcount, maxsize=limits["maxsize"], memory=limits["memory"])
    check_pattern(pattern)
    _check_engine(engine, shuffle, address, cpus)
    _check_local(pattern, "output pattern")
    if tmpdir is not None:
        _check_local(tmpdir, "tmpdir")


def _check_engine(engine: str, shuffle: bool, address: str | None, cpus: int | None) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "local" and (address is not None or cpus is not None):
        raise ValueError("address and cpus apply only with engine='ray'")
    if engine == "ray" and not shuffle:
        raise ValueError(
            "engine='ray' runs the shuffle (shuffle=True): an in-order reshard is one stream, "
            "run it with engine='local'"
        )
    if cpus is not None:
        int_at_least("cpus", cpus)
    if address is not None and cpus is not None:
        raise ValueError("cpus applies only to a Ray started for the run (no address)")


def _check_local(path: str, what: str) -> None:
    """Refuse a URL where reshard writes: it writes local (or shared) directories only."""
    if local_path(path) != path:
        raise ValueError(
            f"the {what} must be a local or shared path, got the URL {path!r} "
            "(write to a shared directory and copy the shards to the store)"
        )


@contextlib.contextmanager
def _session(engine: str, address: str | None, cpus: int | None) -> Iterator[Any]:
    """Nothing for the local engine; for Ray, a connected session (the cluster is reached,
    or a local Ray started, before any work)."""
    if engine == "local":
        yield None
        return
    from wdspipes.tools.ray_engine import RaySession

    with RaySession(address, cpus) as session:
        yield session


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


def _publish(staged: list[Staged], pattern: str) -> list[str]:
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
    for (source, _), final in zip(staged, finals, strict=True):
        os.replace(source, final)
    return finals


def manifest_path(pattern: str) -> str:
    """Where the shard index of a run with the output ``pattern`` goes: beside the shards
    (above the directories the shard number names, if any), named by what comes before the
    number (``shards`` if nothing does).

    >>> manifest_path("out/train-%06d.tar"), manifest_path("/data/%05d.tar.gz")
    ('out/train.json', '/data/shards.json')
    >>> manifest_path("out/part-%d/x.tar"), manifest_path("out/100%%-%d.tar")
    ('out/part.json', 'out/100%.json')
    """
    number = next(m for m in _CONVERSION.finditer(pattern) if m.group() != "%%")
    head = pattern[: number.start()].replace("%%", "%")
    directory, name = os.path.split(head)
    return os.path.join(directory, (name.rstrip("-_. ") or "shards") + ".json")


def write_manifest(pattern: str, shards: list[str], counts: list[int]) -> str:
    """Write the index of the ``shards`` of a run (each holding ``counts`` samples) at
    :func:`manifest_path`, under a temporary name renamed when complete; its path.

    The index is wids' shard index (``"__kind__": "wids-shard-index-v1"``), which webdataset's
    indexed datasets read: each shard's name relative to the index, its samples and bytes
    (see :mod:`wdspipes.tools.index`)."""
    path = manifest_path(pattern)
    entries = [
        {"url": index_entry_url(shard, path), "nsamples": count, "filesize": os.path.getsize(shard)}
        for shard, count in zip(shards, counts, strict=True)
    ]
    write_index(path, entries, name=os.path.splitext(os.path.basename(path))[0])
    return path


@contextlib.contextmanager
def _temporary_directory(parent: str) -> Iterator[str]:
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".reshard-", dir=parent) as directory:
        yield directory


def _check_counts(read: Tally, written: Tally) -> None:
    if (read.samples, read.bytes) != (written.samples, written.bytes):
        raise RuntimeError(
            f"reshard read {read.samples} samples ({read.bytes} bytes) but wrote "
            f"{written.samples} ({written.bytes} bytes)"
        )


class _Reader:
    """The samples of the sources, counted, with a progress bar in input bytes (payload as
    it comes, set to the sources' sizes at each one's end). ``begin`` is called with each
    source's number before its samples."""

    def __init__(self, sources: Sequence[ReshardInput], progress: bool, desc: str) -> None:
        self.sources = sources
        self.tally = Tally()
        self.bar = byte_bar(progress, desc, total_size(sources))
        self.begin: Callable[[int], None] = lambda index: None

    def __iter__(self) -> Iterator[Sample]:
        done = 0  # the sizes of the sources finished
        for index, source in enumerate(self.sources):
            self.begin(index)
            for sample in source.samples():
                self.tally.add(sample)
                self.bar.update(self.tally.last)
                yield sample
            done += source.size or 0
            if done > self.bar.n:
                self.bar.update(done - self.bar.n)

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.bar.close()
