"""Remote read-speed benchmark: shards behind a network that behaves like an object store's.

A shaping proxy (``shaping.py``) holds the first byte of every response for ``--latency``
seconds and caps each connection at ``--rate`` MB/s (the aggregate is not capped), in front of
a static HTTP server (Range honoured) and of an S3 server (moto, ``moto[server]``). The
dataset is ``--shards`` shards of 40 samples of 100 KB (4.1 MB each, 24 by default: the
issue's figures). Every reader reads every sample, with the defaults, one epoch after another;
the best epoch of ``--repeat`` is reported, the readers interleaved, each network in turn:
with no latency and with ``--latency``, so that each reader is compared with its own
zero-latency figure.

Readers (HTTP; the S3 table has the wdspipes and webdataset ones, and s3torchconnector if
installed):

- urllib / curl: each shard's bytes, one shard after another (``urllib.request.urlopen``;
  ``curl -sf -o /dev/null``), a new connection per shard;
- open_url raw: ``wdspipes.io.open_url(url)`` read in 1 MiB pieces, one shard after another
  on one kept-alive connection (no read-ahead: the raw transfer of one connection);
- wdspipes, read-ahead off: ``WebDataset(urls, readahead=False)``;
- wdspipes: ``WebDataset(urls)``, the defaults (read-ahead on);
- wdspipes + DataLoader2, 2 workers: the same pipeline under ``DataLoader2`` with
  ``MultiProcessingReadingService(num_workers=2)``, the workers kept across epochs;
- webdataset 1.0.2: ``webdataset.WebDataset(urls)``, which reads ``http://`` URLs through
  ``curl`` in a ``pipe:`` (for S3: the same bucket's path-style URL);
- s3torchconnector: ``S3IterableDataset.from_prefix`` with the local endpoint (path-style),
  each object read whole (no tar walk), if the package imports. It needs torch, which the
  project's environment has; installed beside it without its dependencies, e.g.
  ``pip install --target /tmp/s3t --no-deps s3torchconnector s3torchconnectorclient`` and
  ``PYTHONPATH=/tmp/s3t``.

"MB/s" counts the shard files' bytes over an epoch's whole time; "after the first sample" over
the time from the first sample to the end (the first byte's latency is in every epoch and no
read-ahead can hide it: with 96 MB in all, 100 ms alone is 0.1 / (0.1 + 96 / X) of an epoch
read at X MB/s). The memory row runs one epoch of ``WebDataset(urls)`` in a fresh process and
reports its peak RSS growth against the read-ahead's bound (``max_bytes`` plus one part).

Usage::

    python benchmarks/remote_speed.py --markdown --repeat 5
    python benchmarks/remote_speed.py --latency 0.05 --rate 80 --shards 48
    python benchmarks/remote_speed.py --quick      # smoke run on tiny shards
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
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
from read_speed import MB, big_dataset, current_rss, ensure_shards, peak_rss, reset_peak_rss
from shaping import Running, Shaping

from wdspipes.io.http import CHUNK_SIZE

BUCKET = "shards"
TARGETS = {
    "hidden": 0.9,  # one process at --latency against its own zero-latency MB/s
    "one process": 2.0,  # one process against the per-connection cap
    "dataloader2": 4.0,  # DataLoader2 with 2 workers against the cap
    "webdataset": 3.0,  # one process against webdataset 1.0.2
}

Epoch = Callable[[], "Tally"]


@dataclass
class Tally:
    """One epoch: samples, bytes of shard files, seconds in all, seconds to the first sample."""

    samples: int
    file_bytes: int
    seconds: float
    first: float

    @property
    def mb_per_second(self) -> float:
        return self.file_bytes / MB / self.seconds

    @property
    def steady_mb_per_second(self) -> float:
        """After the first sample: the rate once the first byte's latency is paid."""
        return self.file_bytes / MB / max(self.seconds - self.first, 1e-9)


@dataclass
class Row:
    reader: str
    epochs: list[Tally] = field(default_factory=list)

    @property
    def best(self) -> Tally:
        return max(self.epochs, key=lambda tally: tally.mb_per_second)

    @property
    def best_steady(self) -> float:
        return max(tally.steady_mb_per_second for tally in self.epochs)


def timed(samples: Iterable[Any], file_bytes: int) -> Tally:
    """Read every sample of ``samples``, timing the whole and the first sample."""
    start = time.perf_counter()
    first = None
    count = 0
    for _ in samples:
        if first is None:
            first = time.perf_counter() - start
        count += 1
    return Tally(count, file_bytes, time.perf_counter() - start, first or 0.0)


def raw_epoch(urls: list[str], file_bytes: int, read: Callable[[str], int]) -> Tally:
    """Each shard's bytes by ``read(url)``, one shard after another."""
    start = time.perf_counter()
    first = None
    total = 0
    for url in urls:
        total += read(url)
        first = time.perf_counter() - start if first is None else first
    if total not in (0, file_bytes):
        raise RuntimeError(f"read {total} bytes of {file_bytes}")
    return Tally(len(urls), file_bytes, time.perf_counter() - start, first or 0.0)


def read_urllib(url: str) -> int:
    total = 0
    with urllib.request.urlopen(url) as response:
        while data := response.read(1 << 20):
            total += len(data)
    return total


def read_curl(url: str) -> int:
    subprocess.run(["curl", "-sf", "-o", "/dev/null", url], check=True)
    return 0


def read_open_url_slow_acks(url: str) -> int:
    """``read_open_url`` as before the kernel was asked for quick acknowledgements."""
    from wdspipes.io import http

    quick, http._QUICKACK = http._QUICKACK, None
    try:
        return read_open_url(url)
    finally:
        http._QUICKACK = quick


def read_open_url(url: str, storage_options: dict[str, Any] | None = None) -> int:
    from wdspipes.io import open_url

    total = 0
    stream = open_url(url, storage_options=storage_options)
    try:
        while data := stream.read(1 << 20):
            total += len(data)
    finally:
        stream.close()
    return total


def wdspipes_epoch(urls: list[str], file_bytes: int, **options: Any) -> Tally:
    import wdspipes

    return timed(wdspipes.WebDataset(urls, **options), file_bytes)


def webdataset_epoch(urls: list[str], file_bytes: int) -> Tally:
    import webdataset

    return timed(webdataset.WebDataset(urls, shardshuffle=False), file_bytes)


class DataLoader2Epochs:
    """``WebDataset(urls)`` under DataLoader2 with 2 workers, started once: each call is an
    epoch (the workers' start-up is in the first one only)."""

    def __init__(self, urls: list[str], file_bytes: int, **options: Any) -> None:
        with quiet():  # torchdata's deprecation notice
            from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

        import wdspipes

        self.file_bytes = file_bytes
        service = MultiProcessingReadingService(num_workers=2, multiprocessing_context="fork")
        self.loader = DataLoader2(wdspipes.WebDataset(urls, **options), reading_service=service)

    def __call__(self) -> Tally:
        return timed(self.loader, self.file_bytes)

    def shutdown(self) -> None:
        self.loader.shutdown()


def s3torchconnector_epoch(endpoint: str, file_bytes: int) -> Tally:
    from s3torchconnector import S3ClientConfig, S3IterableDataset

    config = S3ClientConfig(force_path_style=True)  # a local endpoint has no bucket names
    dataset = S3IterableDataset.from_prefix(
        f"s3://{BUCKET}/", region="us-east-1", endpoint=endpoint, s3client_config=config
    )
    start = time.perf_counter()
    first = None
    objects = total = 0
    for item in dataset:
        total += len(item.read())
        objects += 1
        first = time.perf_counter() - start if first is None else first
    if total != file_bytes:
        raise RuntimeError(f"s3torchconnector read {total} bytes of {file_bytes}")
    return Tally(objects, total, time.perf_counter() - start, first or 0.0)


# --- the servers ------------------------------------------------------------------------------


FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
"""The environment of the local S3 server's clients: fake keys, no other configuration."""


def start_moto(directory: Path, paths: list[str]) -> tuple[subprocess.Popen[str], int]:
    """An S3 server on 127.0.0.1 (moto, in a process of its own) holding the shards."""
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        del os.environ[name]
    os.environ.update(FAKE_AWS)
    script = (
        "import sys\n"
        "from moto.moto_server.threaded_moto_server import ThreadedMotoServer\n"
        "server = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False)\n"
        "server.start()\n"
        "print(server.get_host_and_port()[1], flush=True)\n"
        "sys.stdin.read()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # its request log
        text=True,
    )
    assert process.stdout is not None
    port = int(process.stdout.readline())
    import boto3

    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}")
    client.create_bucket(Bucket=BUCKET)
    for path in paths:  # readable without keys too, as curl reads them
        client.upload_file(path, BUCKET, Path(path).name, ExtraArgs={"ACL": "public-read"})
    client.close()
    return process, port


def stop_moto(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    process.terminate()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


# --- measuring --------------------------------------------------------------------------------


def measure(
    readers: dict[str, Epoch],
    repeat: int,
    counts: tuple[int, ...],
    only: list[str] | None = None,
) -> dict[str, Row]:
    """Each reader ``repeat`` epochs, interleaved; each must read every sample (or, reading
    bytes, every shard: ``counts``). ``only``: the names of the readers to run."""
    if only:
        readers = {name: readers[name] for name in only if name in readers}
    rows = {name: Row(name) for name in readers}
    for _ in range(repeat):
        for name, epoch in readers.items():
            with quiet():
                tally = epoch()
            if tally.samples not in counts:
                raise RuntimeError(f"{name} read {tally.samples} samples (or shards) of {counts}")
            rows[name].epochs.append(tally)
    return rows


def raw_readers(base: str, paths: list[str], file_bytes: int) -> dict[str, Epoch]:
    """``--raw``: one connection's transfer, without and with quick acknowledgements."""
    urls = [f"{base}/{Path(path).name}" for path in paths]
    return {
        "urllib, one shard after another": functools.partial(
            raw_epoch, urls, file_bytes, read_urllib
        ),
        "open_url raw, one connection": functools.partial(
            raw_epoch, urls, file_bytes, read_open_url
        ),
        "open_url raw, one connection, no TCP_QUICKACK": functools.partial(
            raw_epoch, urls, file_bytes, read_open_url_slow_acks
        ),
    }


def http_readers(
    base: str, paths: list[str], file_bytes: int, readahead: dict[str, Any]
) -> tuple[dict[str, Epoch], list[Callable[[], None]]]:
    urls = [f"{base}/{Path(path).name}" for path in paths]
    dataloader2 = DataLoader2Epochs(urls, file_bytes, **readahead)
    readers: dict[str, Epoch] = {
        "urllib, one shard after another": functools.partial(
            raw_epoch, urls, file_bytes, read_urllib
        ),
        "curl, one shard after another": functools.partial(raw_epoch, urls, file_bytes, read_curl),
        "open_url raw, one connection": functools.partial(
            raw_epoch, urls, file_bytes, read_open_url
        ),
        "wdspipes, read-ahead off": functools.partial(
            wdspipes_epoch, urls, file_bytes, readahead=False
        ),
        "wdspipes": functools.partial(wdspipes_epoch, urls, file_bytes, **readahead),
        "wdspipes + DataLoader2, 2 workers": dataloader2,
        "webdataset 1.0.2 (curl)": functools.partial(webdataset_epoch, urls, file_bytes),
    }
    return readers, [dataloader2.shutdown]


def s3_readers(
    base: str, paths: list[str], file_bytes: int, with_s3torch: bool, readahead: dict[str, Any]
) -> tuple[dict[str, Epoch], list[Callable[[], None]]]:
    urls = [f"s3://{BUCKET}/{Path(path).name}" for path in paths]
    options: dict[str, Any] = {"storage_options": {"endpoint_url": base}, **readahead}
    dataloader2 = DataLoader2Epochs(urls, file_bytes, **options)
    readers: dict[str, Epoch] = {
        "open_url raw (s3fs), one shard after another": functools.partial(
            raw_epoch,
            urls,
            file_bytes,
            functools.partial(read_open_url, storage_options=options["storage_options"]),
        ),
        "wdspipes, read-ahead off": functools.partial(
            wdspipes_epoch, urls, file_bytes, **{**options, "readahead": False}
        ),
        "wdspipes": functools.partial(wdspipes_epoch, urls, file_bytes, **options),
        "wdspipes + DataLoader2, 2 workers": dataloader2,
        "webdataset 1.0.2 (curl, path-style URLs)": functools.partial(
            webdataset_epoch, [f"{base}/{BUCKET}/{Path(p).name}" for p in paths], file_bytes
        ),
    }
    if with_s3torch:
        readers["s3torchconnector (objects whole, no tar walk)"] = functools.partial(
            s3torchconnector_epoch, base, file_bytes
        )
    return readers, [dataloader2.shutdown]


def s3torchconnector_available() -> str | None:
    """Why s3torchconnector cannot run here, or None if it imports."""
    try:
        import s3torchconnector  # noqa: F401
    except ImportError as exn:
        return f"not installed ({exn})"
    return None


def memory_probe(urls: list[str], options: dict[str, Any]) -> dict[str, Any]:
    """The internal ``--memory-probe`` mode: one epoch of ``open_shards(**options)``, the tar
    walk and the grouping in this fresh process; peak RSS growth over the epoch, and the most
    bytes the read-ahead held at once (its own count)."""
    import_libraries(["torch", "wdspipes"])
    import wdspipes

    if "bounds" in options:
        options.update(readahead_options(*options.pop("bounds")))
    opener = wdspipes.ShardList(urls).open_shards(**options)
    pipe = opener.load_tar().group_samples()
    before = current_rss()
    reset_peak_rss()
    with quiet():
        tally = timed(pipe, 0)
    held = 0 if opener.read_stats is None else opener.read_stats.peak_bytes
    return {"samples": tally.samples, "growth": peak_rss() - before, "held": held}


def run_memory_probe(urls: list[str], options: dict[str, Any]) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--memory-probe", json.dumps(options)]
    done = subprocess.run([*command, *urls], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory probe failed:\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


# --- output -------------------------------------------------------------------------------------


def table(rows: dict[str, Row], zero: dict[str, Row] | None, rate: float, markdown: bool) -> str:
    headers = ["reader", "MB/s", "after the first sample", "first sample", "x cap"]
    if zero is not None:
        headers.append("vs no latency")
    lines = []
    for name, row in rows.items():
        best = row.best
        line = [
            name,
            f"{best.mb_per_second:,.1f}",
            f"{row.best_steady:,.1f}",
            f"{best.first:.3f} s",
            f"{best.mb_per_second / rate:.2f}",
        ]
        if zero is not None:
            line.append(f"{best.mb_per_second / zero[name].best.mb_per_second:.2f}")
        lines.append(line)
    return format_table(headers, lines, markdown)


def print_targets(
    http: dict[float, dict[str, Row]], latency: float, rate: float, markdown: bool
) -> None:
    print_section(f"targets ({latency * 1000:g} ms, {rate:g} MB/s per connection, HTTP)", markdown)
    mark = "- " if markdown else "  "
    slow, fast = http[latency], http[0.0]
    if "wdspipes" not in slow or "wdspipes" not in fast:  # left out by --only
        print(f"{mark}(wdspipes in one process was left out by --only: no target to judge)")
        return
    ours, zero = slow["wdspipes"], fast["wdspipes"]
    ratio = ours.best.mb_per_second / zero.best.mb_per_second
    steady = ours.best_steady / zero.best_steady
    print(
        f"{mark}latency hidden: {ours.best.mb_per_second:,.1f} MB/s against "
        f"{zero.best.mb_per_second:,.1f} with no latency: {ratio:.2f} (target "
        f"{TARGETS['hidden']:g}): {verdict(ratio >= TARGETS['hidden'])}; after the first "
        f"sample {ours.best_steady:,.1f} against {zero.best_steady:,.1f}: {steady:.2f}: "
        f"{verdict(steady >= TARGETS['hidden'])}"
    )
    for name, key in (
        ("wdspipes", "one process"),
        ("wdspipes + DataLoader2, 2 workers", "dataloader2"),
    ):
        if name not in slow:  # left out by --only
            continue
        got = slow[name].best.mb_per_second / rate
        print(
            f"{mark}{name}: {got:.2f} x the per-connection cap (target {TARGETS[key]:g}): "
            f"{verdict(got >= TARGETS[key])}"
        )
    if "webdataset 1.0.2 (curl)" not in slow:
        return
    against = ours.best.mb_per_second / slow["webdataset 1.0.2 (curl)"].best.mb_per_second
    print(
        f"{mark}against webdataset 1.0.2: {against:.2f} x (target {TARGETS['webdataset']:g}): "
        f"{verdict(against >= TARGETS['webdataset'])}"
    )


def raw(paths: list[str], directory: Path, args: argparse.Namespace) -> None:
    file_bytes = sum(os.path.getsize(path) for path in paths)
    server = Running.start(Shaping(0.0, args.rate * 1e6, nagle=True), directory=directory)
    try:
        rows = measure(raw_readers(server.base, paths, file_bytes), args.repeat, (len(paths),))
    finally:
        server.stop()
    print_section(f"one connection, {args.rate:g} MB/s, Nagle's algorithm on", args.markdown)
    print(table(rows, None, args.rate, args.markdown))


def readahead_options(connections: int | None, max_mib: int | None) -> dict[str, Any]:
    """The ``readahead=`` of the wdspipes rows: the defaults, or the bounds asked for
    (``--connections``, ``--max-mib``)."""
    from wdspipes.io.readahead import ReadAhead

    if connections is None and max_mib is None:
        return {}
    default = ReadAhead()
    connections = default.connections if connections is None else connections
    max_bytes = default.max_bytes if max_mib is None else max_mib << 20
    return {"readahead": ReadAhead(max_bytes=max_bytes, connections=connections)}


def print_memory(
    probe: dict[str, Any], without: dict[str, Any], readahead: dict[str, Any], markdown: bool
) -> None:
    from wdspipes.io.readahead import ReadAhead

    config = readahead.get("readahead", ReadAhead())
    bound = config.max_bytes + config.part_size
    buffers = bound + config.connections * CHUNK_SIZE  # and a receive buffer per connection
    share = probe["growth"] - without["growth"]
    mib = 2**20
    mark = "- " if markdown else "  "
    print(
        f"{mark}memory held: the read-ahead counted at most {probe['held'] / mib:,.1f} MiB at "
        f"once (bound: max_bytes and a part, {bound / mib:,.0f} MiB): "
        f"{verdict(probe['held'] <= bound)}"
    )
    print(
        f"{mark}memory, RSS: peak growth over an epoch {probe['growth'] / mib:,.1f} MiB with "
        f"read-ahead, {without['growth'] / mib:,.1f} MiB without: {share / mib:,.1f} MiB for "
        f"the read-ahead, against the bound and a receive buffer per connection "
        f"({buffers / mib:,.0f} MiB): {verdict(share <= buffers)}"
    )


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_data = Path(__file__).resolve().parent / "data"
    parser.add_argument("--data", type=Path, default=default_data, help="shard directory")
    parser.add_argument("--shards", type=int, help="shards of 40 samples of 100 KB (24; quick 4)")
    parser.add_argument("--latency", type=float, default=0.1, help="first-byte seconds (0.1)")
    parser.add_argument("--rate", type=float, default=40.0, help="MB/s per connection (40)")
    parser.add_argument("--repeat", type=int, help="epochs per reader, best reported (3; 1)")
    parser.add_argument("--no-s3", action="store_true", help="HTTP only")
    parser.add_argument(
        "--connections", type=int, help="read-ahead connections of the wdspipes rows (32)"
    )
    parser.add_argument("--max-mib", type=int, help="read-ahead MiB of the wdspipes rows (64)")
    parser.add_argument(
        "--only",
        action="append",
        help="this reader alone (its name as in the tables; again for more; wdspipes among them)",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="only one connection's raw transfer, from a proxy with Nagle's algorithm on "
        "(as Python's http.server), with and without quick acknowledgements",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    args.urls = rest
    apply_size_defaults(parser, args, {"shards": (24, 4), "repeat": (3, 1)})
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.memory_probe is not None:
        print(json.dumps(memory_probe(args.urls, json.loads(args.memory_probe))))
        return
    start = time.perf_counter()
    versions = import_libraries(["torch", "urllib3", "s3fs", "moto", "webdataset", "wdspipes"])
    versions["curl"] = subprocess.run(
        ["curl", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    s3torch_problem = s3torchconnector_available()
    if s3torch_problem is None:
        versions.update(import_libraries(["s3torchconnector"]))
    bounds = readahead_options(args.connections, args.max_mib).get("readahead", "the defaults")
    timing = (
        f"best of {args.repeat} epochs per reader (interleaved); read-ahead: {bounds}; "
        "shaping proxy: "
        f"{args.latency * 1000:g} ms before each response's first byte, {args.rate:g} MB/s per "
        "connection, aggregate uncapped; MB = 10^6 bytes of shard files"
    )
    print_header(versions, timing, args.markdown)
    if s3torch_problem is not None:
        print(f"{'- ' if args.markdown else ''}s3torchconnector: {s3torch_problem}")
    spec = big_dataset(40)
    paths, _ = ensure_shards(spec, args.data, args.shards)
    directory = spec.directory(args.data)
    if args.raw:
        raw(paths, directory, args)
        return
    file_bytes = sum(os.path.getsize(path) for path in paths)
    counts = (spec.samples_per_shard * len(paths), len(paths))
    per_shard = spec.samples_per_shard
    print(f"\n{len(paths)} shards x {per_shard} samples of 100 KB: {file_bytes / MB:,.1f} MB")
    rate = args.rate * 1e6
    moto = None if args.no_s3 else start_moto(directory, paths)
    readahead = readahead_options(args.connections, args.max_mib)
    http: dict[float, dict[str, Row]] = {}
    s3: dict[float, dict[str, Row]] = {}
    try:
        for latency in (0.0, args.latency):
            shaping = Shaping(latency, rate)
            server = Running.start(shaping, directory=directory)
            try:
                readers, stops = http_readers(server.base, paths, file_bytes, readahead)
                http[latency] = measure(readers, args.repeat, counts, args.only)
                for stop in stops:
                    stop()
            finally:
                server.stop()
            if moto is not None:
                proxy = Running.start(shaping, port=moto[1])
                try:
                    readers, stops = s3_readers(
                        proxy.base, paths, file_bytes, s3torch_problem is None, readahead
                    )
                    s3[latency] = measure(readers, args.repeat, counts, args.only)
                    for stop in stops:
                        stop()
                finally:
                    proxy.stop()
        for name, results in (("HTTP", http), ("S3 (moto)", s3)):
            for latency, rows in results.items():
                print_section(
                    f"{name}, {latency * 1000:g} ms latency, {args.rate:g} MB/s per connection",
                    args.markdown,
                )
                zero = results[0.0] if latency else None
                print(table(rows, zero, args.rate, args.markdown))
        print_targets(http, args.latency, args.rate, args.markdown)
        server = Running.start(Shaping(args.latency, rate), directory=directory)
        try:
            urls = [f"{server.base}/{Path(path).name}" for path in paths]
            probe = run_memory_probe(urls, {"bounds": [args.connections, args.max_mib]})
            without = run_memory_probe(urls, {"readahead": False})
        finally:
            server.stop()
        print_memory(probe, without, readahead, args.markdown)
    finally:
        if moto is not None:
            stop_moto(moto[0])
    print(f"\ntotal time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
