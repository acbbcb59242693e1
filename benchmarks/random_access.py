"""Random access: ``wds.ShardListDataset`` against the wids package and a raw positioned read,
and the memory the offsets of 10 million samples take.

    python benchmarks/random_access.py --markdown --repeat 5
    python benchmarks/random_access.py --quick        # smoke run on tiny shards

Three measurements, in one run:

1. **1 KB samples, random order, one process**: 8 local shards of 2,000 samples (a 1,000-byte
   field and a class label), every sample read once in one random order, by
   ``wds.ShardListDataset(index)`` and by ``wids.ShardListDataset(index, transformations=[])``
   (raw samples, as ours: no decoding on either side). Each reader runs in a new process,
   the readers alternating, ``--repeat`` times; the median is kept. *Cold*: a new dataset
   object reading its first epoch (ours walks each shard once and writes its sidecar; wids
   copies each shard into its cache directory and indexes it); *warm*: a second epoch in the
   same process, in another random order. Before the cold runs our sidecars are removed.
   Then, in one process, where the time of a warm read goes: CPU microseconds a sample
   through each layer (the DataPipe, the shards of the index, the open shard), the bare
   ``os.pread`` of the same bytes, the header checks alone, and wids' read.
2. **100 KB samples, random order**: 4 shards of 200 samples of 100,000 bytes, all read in
   random order by ``ShardListDataset`` (warm), against a raw ``os.pread`` of each sample's
   bytes (the same spans, the same order, descriptors opened once): MB/s.
3. **Memory**: 1,000 shards of 10,000 samples each (sparse files, with sidecars written for
   them), every shard's offsets loaded by a ``ShardListDataset``: the growth of the process's
   resident memory and the offsets' own bytes.

Targets: (1) warm, at least 4x the wids package; (2) at least 0.5 of the raw read; (3) under
200 MB for the offsets of 10 million samples.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import io
import json
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    apply_size_defaults,
    format_table,
    import_libraries,
    print_header,
    print_section,
    quiet,
    verdict,
)
from read_speed import current_rss

import wdspipes as wds
from wdspipes.read.offsets import SIDECAR_SUFFIX, ShardOffsets, sidecar_path, write_sidecar

SPEEDUP_TARGET = 4.0
RAW_TARGET = 0.5
MEMORY_TARGET = 200 << 20


def write_dataset(directory: Path, shards: int, per_shard: int, size: int) -> Path:
    """Shards of samples with a ``bin`` field of ``size`` bytes and a ``cls``, and their
    index (``index.json``); made once, reused."""
    index = directory / "index.json"
    if index.exists():
        return index
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    entries = []
    for shard in range(shards):
        path = directory / f"s-{shard:04d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for number in range(per_shard):
                key = f"{shard:04d}{number:06d}"
                sink.write({"__key__": key, "bin": rng.randbytes(size), "cls": number % 10})
        entries.append({"url": path.name, "nsamples": per_shard})
    index.write_text(json.dumps({"wids_version": 1, "shardlist": entries}))
    return index


def remove_sidecars(directory: Path) -> None:
    for sidecar in directory.glob(f"*{SIDECAR_SUFFIX}"):
        sidecar.unlink()


# --- 1. against wids ------------------------------------------------------------------------


def read_wdspipes(index: str, orders: list[list[int]], cache: str) -> list[float]:
    dataset = wds.ShardListDataset(index)
    return [timed_epoch(dataset, order) for order in orders]


def read_wids(index: str, orders: list[list[int]], cache: str) -> list[float]:
    import wids

    with quiet(), contextlib.redirect_stderr(io.StringIO()):  # wids prints what it opens
        dataset = wids.ShardListDataset(index, transformations=[], cache_dir=cache)
    try:
        return [timed_epoch(dataset, order) for order in orders]
    finally:
        dataset.close()


def timed_epoch(dataset: Any, order: list[int]) -> float:
    """Samples per second reading ``order``."""
    started = time.perf_counter()
    for index in order:
        dataset[index]
    return len(order) / (time.perf_counter() - started)


def in_child(function: Callable[..., list[float]], *args: Any) -> list[float]:
    """``function(*args)`` in a new process (forked: nothing of the parent's reads)."""
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        return pool.apply(function, args)


def against_wids(index: Path, repeat: int, markdown: bool) -> float:
    total = len(wds.ShardListDataset(str(index), sidecars=False))
    rng = random.Random(1)
    results: dict[str, list[list[float]]] = {"wdspipes": [], "wids": []}
    readers = {"wdspipes": read_wdspipes, "wids": read_wids}
    with tempfile.TemporaryDirectory() as cache:
        for run in range(repeat):
            orders = [rng.sample(range(total), total) for _ in range(2)]
            for name in ["wdspipes", "wids"] if run % 2 == 0 else ["wids", "wdspipes"]:
                remove_sidecars(index.parent)
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(cache)
                results[name].append(in_child(readers[name], str(index), orders, cache))
    rows = []
    medians = {}
    for name, runs in results.items():
        cold = statistics.median(run[0] for run in runs)
        warm = statistics.median(run[1] for run in runs)
        medians[name] = (cold, warm)
        rows.append([name, f"{cold:,.0f}", f"{warm:,.0f}"])
    cold_ratio = medians["wdspipes"][0] / medians["wids"][0]
    warm_ratio = medians["wdspipes"][1] / medians["wids"][1]
    rows.append(["wdspipes / wids", f"{cold_ratio:.2f}x", f"{warm_ratio:.2f}x"])
    print(format_table(["reader", "cold: samples/s", "warm: samples/s"], rows, markdown))
    return warm_ratio


BREAKDOWN = [
    "wds.ShardListDataset: ds[i]",
    "IndexedShards (ds.shards[i]): without the DataPipe's call",
    "ShardReader.sample: the open shard at hand (not looked up)",
    "os.pread of the sample's bytes alone",
    "the header checks alone (adler32 of 157 bytes and a byte, a member)",
    "wids.ShardListDataset: ds[i]",
]


def breakdown(index: str, repeat: int) -> list[float]:
    """CPU microseconds a sample (:data:`BREAKDOWN`), best of ``repeat`` epochs in one random
    order, warm (every layout kept): a read through each layer, its parts alone, wids'."""
    import wids

    dataset = wds.ShardListDataset(index)
    shards = dataset.shards
    order = random.Random(3).sample(range(len(dataset)), len(dataset))
    places = []
    for number in order:
        dataset[number]  # its layout kept
        shard = bisect.bisect_right(shards.ends, number)
        places.append((shards.shard(shard), number - shards.firsts[shard], number))
    descriptors = {entry.url: os.open(entry.url, os.O_RDONLY) for entry in shards.entries}
    spans = []
    for reader, inner, _ in places:
        start, end = reader.offsets.span(inner)
        spans.append((descriptors[reader.url], end - start, start))
    headers = []  # (sample's bytes, a member's header there, the header's hash)
    for fd, size, start in spans:
        chunk = os.pread(fd, size, start)
        at = 0
        while at < size:
            headers.append((chunk, at, zlib.adler32(chunk[at : at + 157])))
            at += 512 + -(-int(chunk[at + 124 : at + 135], 8) // 512) * 512
    with quiet(), contextlib.redirect_stderr(io.StringIO()):
        cache = tempfile.mkdtemp()
        theirs = wids.ShardListDataset(index, transformations=[], cache_dir=cache)
    for number in order:
        theirs[number]  # each shard in its cache

    def through(indexable: Any) -> Callable[[], None]:
        def read() -> None:
            for number in order:
                indexable[number]

        return read

    def from_shards() -> None:
        for reader, inner, number in places:
            reader.sample(inner, number)

    def preads() -> None:
        pread = os.pread
        for fd, size, start in spans:
            pread(fd, size, start)

    def checks() -> None:
        adler32 = zlib.adler32
        for chunk, at, expected in headers:
            if adler32(chunk[at : at + 157]) != expected or chunk[at + 345]:
                raise AssertionError("a header changed")

    parts = [through(dataset), through(shards), from_shards, preads, checks, through(theirs)]
    best = [float("inf")] * len(parts)
    try:
        for _ in range(repeat):
            for number, part in enumerate(parts):  # the parts in turn, each epoch
                started = time.process_time()
                part()
                best[number] = min(best[number], time.process_time() - started)
    finally:
        theirs.close()
        shutil.rmtree(cache, ignore_errors=True)
        for fd in descriptors.values():
            os.close(fd)
    return [seconds / len(order) * 1e6 for seconds in best]


def print_breakdown(index: Path, repeat: int, markdown: bool) -> None:
    micros = in_child(breakdown, str(index), repeat)
    rows = [[label, f"{value:.2f}"] for label, value in zip(BREAKDOWN, micros, strict=True)]
    rows.append(["4x the wids package would be", f"{micros[-1] / SPEEDUP_TARGET:.2f}"])
    print(format_table(["read, warm", "CPU µs a sample"], rows, markdown))


# --- 2. against a raw positioned read --------------------------------------------------------


def against_raw(index: Path, repeat: int, markdown: bool) -> float:
    dataset = wds.ShardListDataset(str(index))
    total = len(dataset)
    spans = []
    for number, entry in enumerate(dataset.shards.entries):
        offsets = dataset.shards.offsets(number)
        spans += [(entry.url, *offsets.span(i)) for i in range(offsets.samples)]
    sizes = sum(end - start for _, start, end in spans)
    descriptors = {url: os.open(url, os.O_RDONLY) for url in {url for url, _, _ in spans}}
    rng = random.Random(2)
    ours, raw = [], []
    try:
        for _ in range(repeat):
            order = rng.sample(range(total), total)
            started = time.perf_counter()
            for index in order:
                dataset[index]
            ours.append(sizes / (time.perf_counter() - started))
            started = time.perf_counter()
            for index in order:
                url, start, end = spans[index]
                os.pread(descriptors[url], end - start, start)
            raw.append(sizes / (time.perf_counter() - started))
    finally:
        for fd in descriptors.values():
            os.close(fd)
    ours_mb, raw_mb = statistics.median(ours) / 1e6, statistics.median(raw) / 1e6
    rows = [
        ["ShardListDataset, random order", f"{ours_mb:,.0f}"],
        ["os.pread of the same spans", f"{raw_mb:,.0f}"],
        ["ratio", f"{ours_mb / raw_mb:.2f}"],
    ]
    print(format_table(["reader", "MB/s"], rows, markdown))
    return ours_mb / raw_mb


# --- 3. memory ----------------------------------------------------------------------------


def offsets_memory(directory: Path, shards: int, per_shard: int, markdown: bool) -> int:
    """Resident memory grown by loading the offsets of ``shards * per_shard`` samples."""
    from array import array

    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    step = 1024
    entries = []
    starts = array("q", np.arange(0, (per_shard + 1) * step, step, dtype=np.int64).tobytes())
    for shard in range(shards):
        path = directory / f"m-{shard:04d}.tar"
        if not path.exists():
            with open(path, "wb") as file:
                file.truncate(per_shard * step)  # sparse: no data on disk
            info = path.stat()
            write_sidecar(
                sidecar_path(str(path)), ShardOffsets(starts, info.st_size, info.st_mtime_ns)
            )
        entries.append({"url": str(path), "nsamples": per_shard})
    dataset = wds.ShardListDataset(entries)
    before = current_rss()
    kept = [dataset.shards.offsets(number) for number in range(shards)]
    grown = current_rss() - before
    own = sum(offsets.nbytes() for offsets in kept)
    samples = shards * per_shard
    rows = [
        [
            f"{samples:,} samples in {shards:,} shards",
            f"{grown / 2**20:,.1f}",
            f"{own / 2**20:,.1f}",
        ]
    ]
    print(format_table(["offsets of", "resident growth, MiB", "the arrays, MiB"], rows, markdown))
    return grown * (10_000_000 // samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="tables in Markdown")
    parser.add_argument("--shards", type=int, help="shards of the memory measurement")
    args = parser.parse_args(argv)
    apply_size_defaults(parser, args, {"shards": (1000, 10)})
    if args.quick:
        args.repeat = 1
    versions = import_libraries(["wdspipes", "wids", "numpy"])
    print_header(versions, f"median of {args.repeat} runs, readers alternating", args.markdown)
    print(("- " if args.markdown else "") + f"load average at the start: {load_average()}")
    data = Path(__file__).parent / "data" / "random_access"
    small = (8, 2000) if not args.quick else (2, 100)
    large = (4, 200) if not args.quick else (2, 10)
    print_section("1 KB samples, random order, one process: against wids", args.markdown)
    index = write_dataset(data / f"small-{small[0]}x{small[1]}", *small, 1000)
    speedup = against_wids(index, args.repeat, args.markdown)
    print_section("1 KB samples: where the time of a read goes, in one process", args.markdown)
    print_breakdown(index, args.repeat, args.markdown)
    print_section("100 KB samples, random order: against a raw positioned read", args.markdown)
    index = write_dataset(data / f"large-{large[0]}x{large[1]}", *large, 100_000)
    ratio = against_raw(index, args.repeat, args.markdown)
    print_section("Memory of the offsets", args.markdown)
    per_shard = 10_000
    memory = offsets_memory(data / f"memory-{args.shards}", args.shards, per_shard, args.markdown)
    print_section("Targets", args.markdown)
    rows = [
        ["1 KB, random, warm: >= 4x wids", f"{speedup:.2f}x", verdict(speedup >= SPEEDUP_TARGET)],
        ["100 KB, random: >= 0.5 of a raw pread", f"{ratio:.2f}", verdict(ratio >= RAW_TARGET)],
        [
            "offsets of 10 million samples < 200 MB",
            f"{memory / 2**20:,.0f} MiB",
            verdict(memory < MEMORY_TARGET),
        ],
    ]
    print(format_table(["target", "measured", ""], rows, args.markdown))
    print(f"\nload average at the end: {load_average()}")
    return 0


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes (shared machines: read the
    ratios measured in the same run)."""
    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
