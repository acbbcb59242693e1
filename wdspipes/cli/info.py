"""``wdspipes info``: what the shards hold, and what is wrong with them.

Each shard is read with wdspipes' own tar reader, so a damaged shard is reported with the byte
offset of the damage; the shards after it are still read. With ``--bench``, the shards are read
as a training pipeline reads them instead (through read-ahead, the stages of the read path and,
with ``--decode``, the decoder), and the command tells how fast, whether the reading waited for
the network, and where the time went stage by stage (:func:`bench_shards`).

>>> report = ShardReport("mem.tar")
>>> for name, offset in [("0.jpg", 0), ("0.cls", 1024), ("1.jpg", 2048), ("0.txt", 3072)]:
...     report.add_member(name, b"xy", offset)
>>> report.samples, report.members, [p.kind for p in report.problems.values()]
(3, 4, ['unsorted-keys'])
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from wdspipes.cli.common import (
    NO_COMMANDS,
    Stopwatch,
    counted,
    echo,
    expand_shards,
    format_size,
    progress,
    shown,
    summarize,
)
from wdspipes.core.names import is_meta, split_name
from wdspipes.core.protocol import Resumes
from wdspipes.core.stage import Stage
from wdspipes.core.statistics import PipelineStatistics
from wdspipes.errors import DataAfterEndError, WdsError
from wdspipes.redaction import redact

if TYPE_CHECKING:
    from wdspipes.io.readahead import ReadAhead
    from wdspipes.io.urls import ByteStream

__all__ = [
    "BenchReport",
    "FieldStats",
    "Problem",
    "ShardReport",
    "bench_shards",
    "info",
    "read_shard",
]

_HEAD = 10  # bytes of a shard needed to recognise its compression


@dataclass
class FieldStats:
    """How many samples have a field, and the bytes of all its members."""

    samples: int = 0
    bytes: int = 0


@dataclass
class Problem:
    """A kind of problem in a shard: how often it occurs, and its first occurrence."""

    kind: str
    message: str
    member: str | None = None
    offset: int | None = None
    count: int = 1


@dataclass
class ShardReport:
    """What one shard holds: counts, fields, compression, problems."""

    url: str
    compression: str | None = None
    size: int = 0
    members: int = 0
    samples: int = 0
    data_bytes: int = 0
    fields: dict[str, FieldStats] = field(default_factory=dict)
    problems: dict[str, Problem] = field(default_factory=dict)
    _key: str | None = None
    _sample_fields: set[str] = field(default_factory=set)
    _keys: set[str] = field(default_factory=set)

    def add_member(self, name: str, data: bytes, offset: int) -> None:
        """Count one member, grouped as the reader groups it."""
        self.members += 1
        self.data_bytes += len(data)
        if is_meta(name):
            return
        parts = split_name(name)
        if parts is None:
            self.problem(
                "no-field",
                f"member {name!r} has no field after a dot: readers skip it",
                name,
                offset,
            )
            return
        key, field_name = parts
        if key != self._key:
            self._start_sample(key, name, offset)
        stats = self.fields.setdefault(field_name, FieldStats())
        stats.bytes += len(data)
        if field_name in self._sample_fields:
            self.problem(
                "duplicate-field",
                f"field {field_name!r} occurs twice in sample {key!r}: readers raise "
                "DuplicateFieldError",
                name,
                offset,
            )
            return
        self._sample_fields.add(field_name)
        stats.samples += 1

    def _start_sample(self, key: str, name: str, offset: int) -> None:
        if key in self._keys:
            self.problem(
                "unsorted-keys",
                f"key {key!r} comes again after other keys: readers see its members as "
                "separate samples (write shards sorted by key)",
                name,
                offset,
            )
        if self._key is not None:
            self._keys.add(self._key)
        self._key = key
        self._sample_fields = set()
        self.samples += 1

    def problem(self, kind: str, message: str, member: str | None, offset: int | None) -> None:
        """Record a problem; a kind seen before only counts again."""
        if kind in self.problems:
            self.problems[kind].count += 1
        else:
            self.problems[kind] = Problem(kind, message, member, offset)

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "compression": self.compression,
            "size": self.size,
            "members": self.members,
            "samples": self.samples,
            "data_bytes": self.data_bytes,
            "fields": _fields_json(self.fields),
            "problems": [vars(problem) for problem in self.problems.values()],
        }


def _fields_json(fields: dict[str, FieldStats]) -> dict[str, dict[str, int]]:
    return {name: vars(stats) for name, stats in sorted(fields.items())}


class _Measured:
    """A shard stream that keeps its first bytes and counts all it gives."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.head = b""
        self.size = 0

    def read(self, size: int = -1, /) -> bytes:
        data = self.stream.read(size)
        if len(self.head) < _HEAD:
            self.head += data[: _HEAD - len(self.head)]
        self.size += len(data)
        return data

    def close(self) -> None:
        self.stream.close()


def read_shard(url: str, *, ignore_zeros: bool = False) -> ShardReport:
    """Read the shard at ``url`` to its end and report on it; a shard that cannot be opened
    or read is a ``read-error`` problem, with what was read before the damage counted; bytes
    after the end-of-archive marker a ``data-after-end`` one (read on past zero blocks
    instead with ``ignore_zeros``); a shard ending after a member without the marker a
    ``no-end-marker`` one (``wdspipes cat`` writes it again with one)."""
    from wdspipes.io.urls import close_quietly, open_url, shard_failure
    from wdspipes.read.compression import detect_compression
    from wdspipes.read.walk import iter_tar

    report = ShardReport(url)
    try:
        opened = open_url(url)
        stream = _Measured(opened)
    except WdsError as exn:
        report.problem("read-error", str(exn), exn.member, exn.offset)
        return report
    file_size = _file_size(opened)
    try:

        def unmarked(problem: str) -> None:
            report.problem("no-end-marker", problem, None, stream.size)

        members = iter_tar(stream, url, ignore_zeros=ignore_zeros, unmarked_end=unmarked)
        for name, data, offset, _ in members:
            report.add_member(name, data, offset)
        stream.close()  # a pipe: command reports its exit status here
    except WdsError as exn:
        error = shard_failure(exn, url, stream)  # a pipe: command's status explains it better
        assert isinstance(error, WdsError)  # exn is one, and so is a source's failure
        kind = "data-after-end" if isinstance(error, DataAfterEndError) else "read-error"
        report.problem(kind, str(error), error.member, error.offset)
    finally:
        close_quietly(stream)
        report.compression = detect_compression(stream.head)
        report.size = stream.size if file_size is None else file_size
    return report


@dataclass
class BenchReport:
    """How fast shards were read, and where the time went (see :func:`bench_shards`)."""

    shards: int = 0
    bytes: int = 0  # of the shards, as read (compressed, if they are)
    members: int = 0
    samples: int = 0
    seconds: float = 0.0
    first_sample: float | None = None  # seconds until the first sample was read
    waited: float | None = None  # for the network; None without read-ahead
    stages: PipelineStatistics | None = None  # where the time went, stage by stage

    @property
    def mb_per_second(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def verdict(self) -> str:
        """Whether the reading was I/O bound: it waited for the network more than half the
        time."""
        if self.waited is None:
            return "read-ahead off: waits not measured"
        if self.waited > self.seconds / 2:
            return "I/O bound: the reader waited for the network most of the time"
        return "not I/O bound: the reader waited for the network less than half the time"

    def lines(self) -> list[str]:
        first = "-" if self.first_sample is None else f"{self.first_sample:.2f} s"
        rate = self.samples / self.seconds if self.seconds > 0 else 0.0
        lines = [
            f"read {counted(self.shards, 'shard')}, {self.bytes / 1e6:,.1f} MB, "
            f"{counted(self.samples, 'sample')} in {self.seconds:.2f} s: "
            f"{self.mb_per_second:,.1f} MB/s, {rate:,.0f} samples/s",
            f"first sample after {first}",
        ]
        if self.waited is not None:
            rest = max(0.0, self.seconds - self.waited)
            share = self.waited / self.seconds if self.seconds > 0 else 0.0
            lines[-1] += (
                f"; waited for the network {self.waited:.2f} s ({share:.0%}), the rest {rest:.2f} s"
            )
        lines.append(self.verdict())
        if self.stages is not None:
            lines += self.stages.lines()
        return lines

    def as_json(self) -> dict[str, Any]:
        document = {**vars(self), "mb_per_second": self.mb_per_second, "verdict": self.verdict()}
        document["stages"] = None if self.stages is None else self.stages.as_json()
        return document


def bench_shards(
    urls: Sequence[str],
    readahead: ReadAhead | None,
    decode: str | None = None,
    threads: int = 0,
) -> BenchReport:
    """Read ``urls`` to their ends as a training pipeline does, one reader, through the stages
    (``open_shards``, read ahead with ``readahead``; ``load_tar``; ``group_samples``; with
    ``decode``, ``decode(decode, threads=threads)``), measured stage by stage (see
    :mod:`wdspipes.core.statistics`). No torch.

    Raises:
        WdsError: a shard cannot be opened or read.
    """
    from wdspipes.read.grouping import SampleGrouper
    from wdspipes.read.opener import ShardOpener
    from wdspipes.read.shards import ShardList
    from wdspipes.read.tar import TarLoader
    from wdspipes.samples.decoders.decoder import SampleDecoder

    report = BenchReport()
    opener = ShardOpener(ShardList(list(urls)), readahead=readahead or False)
    measured = MeasuredShards(opener, report)
    pipe: Any = SampleGrouper(TarLoader(measured))
    if decode is not None:
        pipe = SampleDecoder(pipe, decode, threads=threads)
    stats = report.stages = pipe.statistics()
    began = time.perf_counter()
    for sample in pipe:
        if report.first_sample is None:
            report.first_sample = time.perf_counter() - began
        report.samples += 1
        report.members += sum(1 for name in sample if name[:2] != "__")
    report.seconds = time.perf_counter() - began
    if opener.read_stats is not None:
        report.waited = opener.read_stats.waited
    stats.finish()
    return report


class MeasuredShards(Stage[Any]):
    """The opened shards of its source, each stream counting the bytes read of it into the
    report (a stage between ``open_shards`` and ``load_tar``, for ``--bench``)."""

    resumes = Resumes.FROM_START

    def __init__(self, source_datapipe: Any, report: BenchReport) -> None:
        super().__init__(source_datapipe)
        self.report = report

    def open(self, source: Any, context: Any, part: Any = None) -> Iterator[Any]:
        from wdspipes.io.urls import ShardStream

        for shard in source:
            stream = _Measured(shard.stream)
            try:
                yield ShardStream(shard.url, stream)
            finally:
                self.report.shards += 1
                self.report.bytes += stream.size


def _file_size(stream: object) -> int | None:
    """The size of a shard opened from a regular file; None for a pipe or standard input."""
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return None
    try:
        status = os.fstat(fileno())
    except (OSError, ValueError):
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None


@click.command()
@click.argument("shards", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.option(
    "--ignore-zeros",
    is_flag=True,
    help="Read on past zero blocks, as GNU tar -i: counts archives joined with cat whole.",
)
@click.option(
    "--bench",
    is_flag=True,
    help="Time reading the shards as a training pipeline does (with read-ahead): MB/s, the "
    "time spent waiting for the network, and where the time went, stage by stage.",
)
@click.option(
    "--connections",
    type=click.IntRange(min=0),
    default=None,
    help="With --bench: read-ahead connections (default 32); 0 turns read-ahead off.",
)
@click.option(
    "--decode",
    "decode_spec",
    default=None,
    metavar="SPEC",
    help="With --bench: decode the samples too, images as SPEC (rgb8, l8, ...).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=0,
    help="With --bench --decode: decode this many samples at once in threads.",
)
@NO_COMMANDS
def info(
    shards: Sequence[str],
    as_json: bool,
    ignore_zeros: bool,
    bench: bool,
    connections: int | None,
    decode_spec: str | None,
    threads: int,
) -> None:
    """Count the samples, members, fields and bytes of SHARDS and check them for problems.

    Problems: keys that come again after other keys (the samples would be split), fields
    twice in a sample, names without a field, and shards that cannot be read (missing,
    not a tar archive, truncated, bad checksum) with the byte offset, and data after the
    end-of-archive marker (archives joined with cat, or a zeroed header). The exit status is 1
    if any shard has a problem.
    """
    clock = Stopwatch()
    urls = expand_shards(shards)
    if bench:
        _bench(urls, as_json, connections, decode_spec, threads)
        return
    if connections is not None:
        raise click.UsageError("--connections goes with --bench")
    if decode_spec is not None or threads:
        raise click.UsageError("--decode and --threads go with --bench")
    reports = []
    with progress(urls, unit=" shards", desc="info") as bar:
        for url in bar:
            reports.append(read_shard(url, ignore_zeros=ignore_zeros))
    total = _total(reports)
    if as_json:
        document = {"shards": [r.as_json() for r in reports], "total": total}
        click.echo(redact(json.dumps(document, indent=2)))  # JSON escapes control characters
    else:
        for report in reports:
            _print_report(report)
        summarize(
            f"total: {counted(total['shards'], 'shard')}, {counted(total['samples'], 'sample')}, "
            f"{counted(total['members'], 'member')}, {format_size(total['data_bytes'])} of data "
            f"in {format_size(total['size'])}; {total['shards_with_problems']:,} with problems; "
            f"read in {clock.elapsed():.1f} s."
        )
    damaged = [report.url for report in reports if report.problems]
    if damaged:
        raise click.ClickException(
            f"{len(damaged)} of {counted(len(reports), 'shard')} with problems: "
            f"{', '.join(damaged)}"
        )


def _bench(
    urls: list[str], as_json: bool, connections: int | None, decode: str | None, threads: int
) -> None:
    from wdspipes.io.readahead import ReadAhead

    readahead = (
        ReadAhead(local=True)
        if connections is None
        else ReadAhead(connections=connections, local=True)
        if connections
        else None
    )
    report = bench_shards(urls, readahead, decode, threads)
    if as_json:
        click.echo(json.dumps({"bench": report.as_json()}, indent=2))
    else:
        for line in report.lines():
            summarize(line)


def _total(reports: list[ShardReport]) -> dict[str, Any]:
    fields: dict[str, FieldStats] = {}
    for report in reports:
        for name, stats in report.fields.items():
            merged = fields.setdefault(name, FieldStats())
            merged.samples += stats.samples
            merged.bytes += stats.bytes
    return {
        "shards": len(reports),
        "shards_with_problems": sum(1 for report in reports if report.problems),
        "size": sum(report.size for report in reports),
        "members": sum(report.members for report in reports),
        "samples": sum(report.samples for report in reports),
        "data_bytes": sum(report.data_bytes for report in reports),
        "fields": _fields_json(fields),
        "problems": sum(p.count for report in reports for p in report.problems.values()),
    }


def _print_report(report: ShardReport) -> None:
    kind = f"{report.compression}-compressed" if report.compression else "uncompressed"
    echo(
        f"{report.url}: {counted(report.samples, 'sample')}, {counted(report.members, 'member')}, "
        f"{format_size(report.data_bytes)} of data; {format_size(report.size)}, {kind}"
    )
    if report.fields:
        names = {name: shown(name) for name in report.fields}  # as printed: escaped
        width = max(map(len, names.values()))
        echo(f"  {'field':<{width}}  {'samples':>9}  {'bytes':>14}")
        for name, stats in sorted(report.fields.items()):
            echo(f"  {names[name]:<{width}}  {stats.samples:>9,}  {stats.bytes:>14,}")
    for problem in report.problems.values():
        times = f" ({problem.count} times; the first:)" if problem.count > 1 else ""
        where = (
            ""
            if problem.kind == "read-error"
            else f" [member {problem.member!r}, byte {problem.offset}]"
        )
        echo(f"  PROBLEM {problem.kind}{times}: {problem.message}{where}")
