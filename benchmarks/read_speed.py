"""Read-speed benchmark: wdspipes against webdataset, torchdata and a raw sequential read.

Generates two datasets of uncompressed tar shards (once; later runs reuse them), then reads
each dataset to the end, in this process and on one thread, with every reader:

- wdspipes: ``DataPipeline(SimpleShardList(urls), tarfile_to_samples())``
- webdataset: the same pipeline built from the ``webdataset`` package
- torchdata: ``IterableWrapper(urls).open_files(mode="b").load_from_tar().webdataset()``,
  reading every field stream fully and closing it
- raw read: each shard file read sequentially into a reusable 1 MiB buffer (the upper bound)

A reader's payload is the bytes of the sample fields (not ``__key__``/``__url__``); for the raw
read it is every byte of the files. Each reader runs ``--repeat`` times, interleaved with the
others, and the best (shortest) run is reported. MB means 10**6 bytes.

It then measures the peak memory of wdspipes reading N and 4N shards, each in a fresh
subprocess (peak RSS minus the RSS right after the imports), alone and under DataLoader2 with
two forked workers, and the throughput of wdspipes under DataLoader2 with two workers.

Usage::

    python benchmarks/read_speed.py              # full run: writes about 640 MB of shards once
    python benchmarks/read_speed.py --quick      # smoke run on tiny shards
    python benchmarks/read_speed.py --markdown   # tables as Markdown
    python benchmarks/read_speed.py --help       # sizes, repeats, data directory

Shards go to ``benchmarks/data/`` (git-ignored) unless ``--data DIR`` says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import io
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
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

MANIFEST_VERSION = 1
BUFFER_SIZE = 1 << 20
MB = 1e6
MIB = 1 << 20
DATALOADER2_WORKERS = 2
DATALOADER2_BATCH = 256  # samples per list a worker sends, in the batched DataLoader2 row
SPEED_TARGET = 10.0  # 1 KB samples: wdspipes samples/s over webdataset's
BANDWIDTH_TARGET = 0.5  # 100 KB samples: wdspipes payload MB/s over raw-read file MB/s
MEMORY_SLACK = (1.25, 1.0)  # 4N shards may grow peak RSS by at most 25% + 1 MiB over N

Tally = tuple[int, int]  # samples, payload bytes
Reader = Callable[[list[str]], Tally]
Stage = Callable[[Iterator[dict[str, Any]]], Iterator[dict[str, Any]]]


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: its fields (name and exact size in bytes) and samples per shard."""

    title: str
    slug: str
    fields: tuple[tuple[str, int], ...]
    samples_per_shard: int

    @property
    def sample_bytes(self) -> int:
        return sum(size for _, size in self.fields)

    def directory(self, root: Path) -> Path:
        return root / f"{self.slug}-{self.samples_per_shard}"


def small_dataset(samples_per_shard: int) -> DatasetSpec:
    return DatasetSpec(
        "1 KB samples", "1kb", (("cls", 8), ("txt", 250), ("bin", 742)), samples_per_shard
    )


def big_dataset(samples_per_shard: int) -> DatasetSpec:
    return DatasetSpec(
        "100 KB samples", "100kb", (("cls", 8), ("json", 1000), ("bin", 98992)), samples_per_shard
    )


@dataclass(frozen=True)
class Timing:
    """The runs of one reader over one dataset."""

    reader: str
    samples: int
    payload: int
    seconds: tuple[float, ...]
    file_bytes: int = 0  # of the shards read (every reader reads them whole)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.best

    @property
    def mb_per_second(self) -> float:
        return self.payload / MB / self.best

    @property
    def file_mb_per_second(self) -> float:
        return self.file_bytes / MB / self.best


# --- shard generation -----------------------------------------------------------------------


def field_bytes(field: str, size: int, key: str, rng: random.Random) -> bytes:
    """Deterministic content of exactly ``size`` bytes for one field of one sample."""
    if field == "cls":
        return b"%0*d" % (size, rng.randrange(1000))
    if field == "txt":
        return rng.randbytes(size // 2 + 1).hex()[:size].encode()
    if field == "json":
        record = {"key": key, "label": rng.randrange(1000), "caption": ""}
        free = size - len(json.dumps(record))
        record["caption"] = rng.randbytes(free // 2 + 1).hex()[:free]
        return json.dumps(record).encode()
    return rng.randbytes(size)


def write_shard(path: Path, spec: DatasetSpec, shard: int) -> None:
    """Write one USTAR shard (mtime 0, deterministic content), atomically."""
    rng = random.Random(f"{spec.slug}/{spec.samples_per_shard}/{shard}")
    partial = path.with_name(path.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.USTAR_FORMAT) as archive:
        for index in range(spec.samples_per_shard):
            key = f"{shard:04d}-{index:06d}"
            for field, size in spec.fields:
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = size
                info.mtime = 0
                info.mode = 0o644
                data = field_bytes(field, size, key, rng)
                assert len(data) == size, (field, size, len(data))
                archive.addfile(info, io.BytesIO(data))
    os.replace(partial, path)


def ensure_shards(spec: DatasetSpec, root: Path, count: int) -> tuple[list[str], int]:
    """The first ``count`` shards of a dataset, writing those missing or stale.

    A manifest in the dataset directory records the sample layout and each shard's size;
    shards it lists with the right size on disk are kept. Returns the paths and how many
    shards were written.
    """
    directory = spec.directory(root)
    directory.mkdir(parents=True, exist_ok=True)
    manifest_path = directory / "manifest.json"
    layout = {
        "version": MANIFEST_VERSION,
        "fields": [list(field) for field in spec.fields],
        "samples_per_shard": spec.samples_per_shard,
    }
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    known: dict[str, int] = manifest.get("shards", {}) if manifest.get("layout") == layout else {}
    paths, written = [], 0
    for shard in range(count):
        path = directory / f"shard-{shard:04d}.tar"
        if not (path.is_file() and known.get(path.name) == path.stat().st_size):
            write_shard(path, spec, shard)
            known[path.name] = path.stat().st_size
            written += 1
        paths.append(str(path))
    if written:
        manifest_path.write_text(
            json.dumps({"layout": layout, "shards": dict(sorted(known.items()))}, indent=1) + "\n"
        )
    return paths, written


# --- readers --------------------------------------------------------------------------------


def tally_samples(samples: Iterable[dict[str, Any]]) -> Tally:
    """Count samples and the bytes of their fields (keys not starting with ``__``)."""
    count = payload = 0
    for sample in samples:
        count += 1
        for key, value in sample.items():
            if not key.startswith("__"):
                payload += len(value)
    return count, payload


def read_wdspipes(urls: list[str]) -> Tally:
    import wdspipes

    pipe = wdspipes.DataPipeline(wdspipes.SimpleShardList(urls), wdspipes.tarfile_to_samples())
    return tally_samples(pipe)


def read_webdataset(urls: list[str]) -> Tally:
    import webdataset

    pipe = webdataset.DataPipeline(
        webdataset.SimpleShardList(urls), webdataset.tarfile_to_samples()
    )
    return tally_samples(pipe)


def read_torchdata(urls: list[str]) -> Tally:
    """torchdata's samples hold a ``StreamWrapper`` per field: read each fully, then close it
    (which lets ``load_from_tar`` close the shard file too)."""
    from torchdata.datapipes.iter import IterableWrapper

    pipe = IterableWrapper(urls).open_files(mode="b").load_from_tar().webdataset()
    count = payload = 0
    for sample in pipe:
        count += 1
        for key, value in sample.items():
            if key.startswith("__"):
                continue
            if hasattr(value, "read"):
                payload += len(value.read())
                value.close()
            else:
                payload += len(value)
    return count, payload


def read_raw(urls: list[str], samples_per_shard: int) -> Tally:
    """Read each file sequentially, unbuffered, into one reusable buffer: the upper bound.

    Its "samples" are the samples the files hold; its payload is every byte of the files.
    """
    buffer = memoryview(bytearray(BUFFER_SIZE))
    total = 0
    for url in urls:
        with open(url, "rb", buffering=0) as file:
            while got := file.readinto(buffer):
                total += got
    return samples_per_shard * len(urls), total


def read_dataloader2(
    urls: list[str], worker_stage: Stage | None = None, batch_size: int | None = None
) -> Tally:
    """wdspipes.WebDataset under DataLoader2 with forked workers, counted in this process.

    ``worker_stage`` (an iterator-to-iterator function) is appended to the pipeline, so it
    runs in each worker; with ``batch_size``, the workers send lists of that many samples.
    """
    from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

    import wdspipes

    service = MultiProcessingReadingService(
        num_workers=DATALOADER2_WORKERS, multiprocessing_context="fork"
    )
    pipe = wdspipes.DataPipeline(wdspipes.WebDataset(urls), worker_stage)
    if batch_size is not None:
        pipe = pipe.batch(batch_size)
    loader = DataLoader2(pipe, reading_service=service)
    try:
        if batch_size is None:
            return tally_samples(loader)
        return tally_samples(sample for batch in loader for sample in batch)
    finally:
        loader.shutdown()


# --- measuring ------------------------------------------------------------------------------


def run_once(reader: Reader, urls: list[str]) -> tuple[Tally, float]:
    with quiet():
        gc.collect()
        start = time.perf_counter()
        tally = reader(urls)
        seconds = time.perf_counter() - start
        gc.collect()  # inside quiet(): finalizers of leaked files warn here
    return tally, seconds


def measure(
    readers: dict[str, Reader], urls: list[str], repeat: int, expected: dict[str, Tally]
) -> list[Timing]:
    """Time each reader ``repeat`` times, interleaving the readers to spread out noise.

    Raises:
        RuntimeError: a reader counted other samples or bytes than the dataset holds.
    """
    seconds: dict[str, list[float]] = {name: [] for name in readers}
    tallies: dict[str, Tally] = {}
    for _ in range(repeat):
        for name, reader in readers.items():
            tally, elapsed = run_once(reader, urls)
            if tally != expected[name]:
                raise RuntimeError(f"{name} read {tally}, expected {expected[name]} (samples, B)")
            tallies[name] = tally
            seconds[name].append(elapsed)
    return [Timing(name, *tallies[name], tuple(seconds[name])) for name in readers]


def current_rss() -> int:
    """Resident set size now, in bytes (Linux); elsewhere the peak so far."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss()


def peak_rss() -> int:
    """Peak resident set size of this process, in bytes.

    On Linux, ``VmHWM``: ``ru_maxrss`` of RUSAGE_SELF is the larger of it and the peak of the
    process that exec'd this one, which for a subprocess is its (v)forked parent, so a probe
    started by a large benchmark process would report the parent's peak. Elsewhere
    ``ru_maxrss`` (KiB on Linux, bytes on macOS).
    """
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def reset_peak_rss() -> bool:
    """Restart the peak RSS count at the current RSS (Linux ``clear_refs``), if possible."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def record_worker_memory(
    samples: Iterator[dict[str, Any]], directory: str
) -> Iterator[dict[str, Any]]:
    """A last pipeline stage that runs in each DataLoader2 worker: writes the worker's peak RSS
    growth while reading to ``directory/worker-PID.json``."""
    before = current_rss()
    reset_peak_rss()
    yield from samples
    growth = peak_rss() - before
    Path(directory, f"worker-{os.getpid()}.json").write_text(json.dumps(growth))


def memory_probe(reader_name: str, urls: list[str]) -> dict[str, Any]:
    """The internal ``--memory-probe`` mode: read ``urls`` once, report peak RSS growth.

    For ``dataloader2``, also each worker's own peak RSS growth, measured in the worker from
    the start of its reading.
    """
    import_libraries(["torch", "wdspipes", "torchdata.dataloader2"])
    gc.collect()
    after_imports = current_rss()
    peak_reset = reset_peak_rss()
    workers: list[int] = []
    with quiet(), tempfile.TemporaryDirectory() as directory:
        if reader_name == "dataloader2":
            stage = functools.partial(record_worker_memory, directory=directory)
            samples, payload = read_dataloader2(urls, stage)
            workers = [json.loads(path.read_text()) for path in Path(directory).iterdir()]
        else:
            samples, payload = read_wdspipes(urls)
    return {
        "samples": samples,
        "payload": payload,
        "after_imports": after_imports,
        "growth": peak_rss() - after_imports,
        "workers": workers,
        "peak_reset": peak_reset,
    }


def run_memory_probe(reader_name: str, urls: list[str]) -> dict[str, Any]:
    """Run :func:`memory_probe` in a fresh interpreter and return its report."""
    command = [sys.executable, str(Path(__file__).resolve()), "--memory-probe", reader_name]
    result = subprocess.run(
        [*command, "--probe-urls", *urls], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"memory probe {reader_name} failed:\n{result.stderr}")
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


# --- output ---------------------------------------------------------------------------------


def speed_table(timings: Sequence[Timing], markdown: bool) -> str:
    baseline = {t.reader: t for t in timings}.get("webdataset")
    rows = []
    for t in timings:
        relative = f"{t.samples_per_second / baseline.samples_per_second:.2f}x" if baseline else "-"
        payload = "-" if t.reader == "raw read" else f"{t.mb_per_second:,.1f}"
        rows.append(
            [
                t.reader,
                f"{t.samples_per_second:,.0f}",
                payload,
                f"{t.file_mb_per_second:,.1f}",
                relative,
                *best_median(t),
            ]
        )
    headers = ["reader", "samples/s", "payload MB/s", "file MB/s", "vs webdataset", "best s"]
    headers.append("median s")
    return format_table(headers, rows, markdown)


def mib(size: float) -> str:
    return f"{size / MIB:.1f}"


# --- the run --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_data = Path(__file__).resolve().parent / "data"
    parser.add_argument("--data", type=Path, default=default_data, help="shard directory")
    parser.add_argument("--small-shards", type=int, help="1 KB dataset shards (8; quick 2)")
    parser.add_argument("--small-samples", type=int, help="1 KB samples per shard (5000; 500)")
    parser.add_argument("--big-shards", type=int, help="100 KB dataset shards (4; quick 2)")
    parser.add_argument("--big-samples", type=int, help="100 KB samples per shard (300; 20)")
    parser.add_argument("--repeat", type=int, help="runs per reader, best reported (3; 1)")
    parser.add_argument(
        "--probe-shards", type=int, help="memory probe: N, compared with 4N (4; quick 2)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    parser.add_argument(
        "--no-dataloader2", action="store_true", help="skip the DataLoader2 measurements"
    )
    parser.add_argument(
        "--memory-probe", choices=["wdspipes", "dataloader2"], help=argparse.SUPPRESS
    )
    parser.add_argument("--probe-urls", nargs="+", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = {
        "small_shards": (8, 2),
        "small_samples": (5000, 500),
        "big_shards": (4, 2),
        "big_samples": (300, 20),
        "repeat": (3, 1),
        "probe_shards": (4, 2),
    }
    apply_size_defaults(parser, args, defaults)
    return args


def prepare(spec: DatasetSpec, root: Path, count: int) -> list[str]:
    start = time.perf_counter()
    paths, written = ensure_shards(spec, root, count)
    if written:
        elapsed = time.perf_counter() - start
        print(f"generated {written} shard(s) of {spec.title} in {elapsed:.1f} s")
    return paths


def benchmark_dataset(
    spec: DatasetSpec, urls: list[str], args: argparse.Namespace
) -> dict[str, Timing]:
    samples = spec.samples_per_shard * len(urls)
    file_bytes = sum(os.path.getsize(url) for url in urls)
    readers: dict[str, Reader] = {
        "wdspipes": read_wdspipes,
        "webdataset": read_webdataset,
        "torchdata": read_torchdata,
        "raw read": functools.partial(read_raw, samples_per_shard=spec.samples_per_shard),
    }
    expected = {name: (samples, samples * spec.sample_bytes) for name in readers}
    expected["raw read"] = (samples, file_bytes)
    timings = [
        dataclasses.replace(t, file_bytes=file_bytes)
        for t in measure(readers, urls, args.repeat, expected)
    ]
    print_section(
        f"{spec.title}: {len(urls)} shards x {spec.samples_per_shard} samples", args.markdown
    )
    fields = ", ".join(f"{name} {size} B" for name, size in spec.fields)
    print(
        f"fields: {fields}; payload {samples * spec.sample_bytes / MB:.1f} MB, "
        f"files {file_bytes / MB:.1f} MB\n"
    )
    print(speed_table(timings, args.markdown))
    print(
        "\npayload MB/s: bytes of sample fields per second; file MB/s: bytes of the shards read "
        "per second (headers and padding included), the read bandwidth; raw read's samples/s = "
        "samples in the files / time."
    )
    return {t.reader: t for t in timings}


def best_median(timing: Timing) -> list[str]:
    return [f"{timing.best:.3f}", f"{timing.median:.3f}"]


def benchmark_dataloader2(spec: DatasetSpec, urls: list[str], args: argparse.Namespace) -> None:
    samples = spec.samples_per_shard * len(urls)
    unbatched = f"wdspipes + DataLoader2 ({DATALOADER2_WORKERS} workers), unbatched"
    batched = f"wdspipes + DataLoader2 ({DATALOADER2_WORKERS} workers), .batch({DATALOADER2_BATCH})"
    expected = {name: (samples, samples * spec.sample_bytes) for name in (unbatched, batched)}
    readers: dict[str, Reader] = {
        batched: functools.partial(read_dataloader2, batch_size=DATALOADER2_BATCH),
    }
    timings = measure(readers, urls, args.repeat, expected)
    # unbatched, every sample crosses a process boundary on its own: slow, so measured once
    timings += measure({unbatched: read_dataloader2}, urls, 1, expected)
    print_section(f"{spec.title} through DataLoader2 (informative, no target)", args.markdown)
    rows = [
        [t.reader, f"{t.samples_per_second:,.0f}", f"{t.mb_per_second:,.1f}", *best_median(t)]
        for t in timings
    ]
    headers = ["reader", "samples/s", "MB/s", "best s", "median s"]
    print(format_table(headers, rows, args.markdown))
    print(
        f"\nwdspipes.WebDataset(urls) under MultiProcessingReadingService(num_workers="
        f"{DATALOADER2_WORKERS}, multiprocessing_context='fork'): samples/s delivered to the main "
        "process, including worker start-up and shutdown and pickling across processes "
        f"({os.cpu_count()} CPUs for the main process and the workers). Unbatched, each sample "
        f"crosses on its own (measured once); with .batch({DATALOADER2_BATCH}) in the workers, "
        "lists of samples do (best of --repeat)."
    )


def print_targets(
    small: dict[str, Timing], big: dict[str, Timing], markdown: bool, quick: bool
) -> None:
    print_section("targets", markdown)
    mark = "- " if markdown else "  "
    if quick:
        print(f"{mark}(--quick: shards too small to judge; fixed costs per run dominate)")
    ours, theirs = small["wdspipes"].samples_per_second, small["webdataset"].samples_per_second
    print(
        f"{mark}1 KB samples: wdspipes samples/s >= {SPEED_TARGET:g} x webdataset's: "
        f"{ours:,.0f} vs {SPEED_TARGET:g} x {theirs:,.0f} = {SPEED_TARGET * theirs:,.0f} "
        f"({ours / theirs:.1f}x): {verdict(ours >= SPEED_TARGET * theirs)}"
    )
    ours, raw = big["wdspipes"].file_mb_per_second, big["raw read"].file_mb_per_second
    payload = big["wdspipes"].mb_per_second
    print(
        f"{mark}100 KB samples: wdspipes read bandwidth (file MB/s) >= {BANDWIDTH_TARGET:g} x raw "
        f"read's: {ours:,.1f} vs {BANDWIDTH_TARGET:g} x {raw:,.1f} = {BANDWIDTH_TARGET * raw:,.1f} "
        f"({ours / raw:.2f}x): {verdict(ours >= BANDWIDTH_TARGET * raw)} "
        f"(in payload bytes, the sample fields only: {payload:,.1f} MB/s, {payload / raw:.2f}x)"
    )


def flat_memory(small: int, large: int) -> bool:
    factor, slack = MEMORY_SLACK
    return large <= factor * small + slack * MIB


def _total(value: int | list[int]) -> int:
    return sum(value) if isinstance(value, list) else value


def benchmark_memory(
    spec: DatasetSpec, urls: list[str], args: argparse.Namespace, dataloader2: bool
) -> None:
    counts = (args.probe_shards, 4 * args.probe_shards)
    probes = ["wdspipes", "dataloader2"] if dataloader2 else ["wdspipes"]
    reports = {(p, n): run_memory_probe(p, urls[:n]) for p in probes for n in counts}
    for (probe, n), report in reports.items():
        if report["samples"] != n * spec.samples_per_shard:
            raise RuntimeError(f"{probe} read {report['samples']} samples from {n} shards")
        if probe == "dataloader2" and len(report["workers"]) != DATALOADER2_WORKERS:
            raise RuntimeError(f"{len(report['workers'])} DataLoader2 workers reported memory")
    measures = [("wdspipes, in-process", "wdspipes", "growth")]
    if dataloader2:
        measures += [
            ("wdspipes + DataLoader2: main process", "dataloader2", "growth"),
            (
                f"wdspipes + DataLoader2: {DATALOADER2_WORKERS} workers, summed",
                "dataloader2",
                "workers",
            ),
        ]
    rows, verdicts = [], []
    for label, probe, field in measures:
        growth = [_total(reports[probe, n][field]) for n in counts]
        for n, value in zip(counts, growth, strict=True):
            ratio = f"{growth[1] / growth[0]:.2f}" if n == counts[1] and growth[0] > 0 else ""
            rows.append([label, str(n), f"{n * spec.samples_per_shard:,}", mib(value), ratio])
        verdicts.append((label, flat_memory(*growth)))
    print_section(f"peak memory, {spec.title} (each run in a fresh process)", args.markdown)
    headers = [
        "reader",
        "shards",
        "samples",
        "peak RSS growth (MiB)",
        f"ratio {counts[1]}/{counts[0]}",
    ]
    print(format_table(headers, rows, args.markdown))
    baseline = reports["wdspipes", counts[0]]["after_imports"]
    reset = all(report["peak_reset"] for report in reports.values())
    print(
        "\npeak RSS growth = peak RSS at the end minus the RSS right after importing torch, "
        f"wdspipes and torchdata ({mib(baseline)} MiB)"
        + (
            ", with the peak counter reset after the imports (Linux clear_refs). The peak is "
            "VmHWM from /proc/self/status, not getrusage's ru_maxrss, which on Linux also "
            "carries the peak RSS of the process the probe was started from (this benchmark)."
            if reset
            else " (ru_maxrss)."
        )
    )
    if dataloader2:
        print(
            f"DataLoader2: MultiProcessingReadingService(num_workers={DATALOADER2_WORKERS}, "
            "multiprocessing_context='fork') over wdspipes.WebDataset(urls). The main process "
            "row excludes the workers; each worker measures its own peak RSS growth from the "
            "start of its reading (a last pipeline stage resets its peak counter and reports "
            "its peak RSS at the end), and the workers row sums them."
        )
    factor, slack = MEMORY_SLACK
    print(
        f"\ntarget: peak RSS growth independent of the shard count ({counts[1]} shards <= "
        f"{factor:g} x {counts[0]} shards + {slack:g} MiB):"
    )
    mark = "- " if args.markdown else "  "
    for label, met in verdicts:
        print(f"{mark}{label}: {verdict(met)}")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.memory_probe:
        print(json.dumps(memory_probe(args.memory_probe, args.probe_urls)))
        return
    start = time.perf_counter()
    libraries = ["torch", "torchdata", "webdataset", "wdspipes"]
    versions = import_libraries([*libraries, "torchdata.dataloader2"])
    timing = (
        f"in-process, single-threaded, best of {args.repeat} run(s) per reader (readers "
        "interleaved); MB = 10^6 bytes"
    )
    print_header({name: versions[name] for name in libraries}, timing, args.markdown)
    small, big = small_dataset(args.small_samples), big_dataset(args.big_samples)
    small_urls = prepare(small, args.data, args.small_shards)
    big_urls = prepare(big, args.data, max(args.big_shards, 4 * args.probe_shards))
    print(f"data: {args.data}")
    small_timings = benchmark_dataset(small, small_urls, args)
    big_timings = benchmark_dataset(big, big_urls[: args.big_shards], args)
    print_targets(small_timings, big_timings, args.markdown, args.quick)
    benchmark_memory(big, big_urls, args, dataloader2=not args.no_dataloader2)
    if not args.no_dataloader2:
        benchmark_dataloader2(small, small_urls, args)
    print(f"\ntotal time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
