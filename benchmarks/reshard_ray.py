"""Reshard on Ray against the local engine: ``reshard(..., shuffle=True)`` with
``engine="local"`` and with ``engine="ray"`` on a Ray started on this machine.

Generates a dataset of 100 KB samples in uncompressed tar shards (once; read_speed.py's
generator, shared with reshard_speed.py), then, in this process, for each repeat:

- the local engine: pass 1 into bucket files, pass 2 bucket after bucket;
- the Ray engine on a Ray already running (one task per input shard, then one per run of
  buckets), the output checked byte for byte against the local engine's;

and once, the seconds ``ray.init(num_cpus=CPUS)`` takes (paid once per run by
``wdspipes reshard --ray``; a cluster pays it once). Throughput is input bytes per second
(MB = 10**6 bytes) of the best run; the first run of Ray includes starting its worker
processes (each imports wdspipes, and so torch). On a 2-CPU machine the two engines should
run at about the same speed: the Ray overhead is the start-up and the per-task cost.

Usage::

    python benchmarks/reshard_ray.py                        # 400 MB, --memory 64M, 2 CPUs
    python benchmarks/reshard_ray.py --size 1.5G --memory 256M --markdown
    python benchmarks/reshard_ray.py --quick                # a smoke run on tiny shards
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import format_table, import_libraries, print_header, print_section
from read_speed import big_dataset, prepare

MB = 1e6
SAMPLES_PER_SHARD = 250  # 100 KB samples: 25 MB input shards
OUTPUT_MAXSIZE = 100e6


def parse_size(text: str) -> int:
    from wdspipes.cli.common import parse_size as parse

    return parse(text)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="400M", help="dataset size (default 400M)")
    parser.add_argument("--memory", default="64M", help="the shuffle's budget (default 64M)")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the Ray (default 2)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each engine")
    parser.add_argument("--quick", action="store_true", help="tiny shards, one run")
    parser.add_argument("--markdown", action="store_true", help="tables in Markdown")
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    return parser.parse_args(argv)


def digest(paths: Sequence[str]) -> str:
    """One hash of the shards' names and bytes, in order."""
    h = hashlib.blake2b()
    for path in paths:
        h.update(os.path.basename(path).encode())
        with open(path, "rb") as file:
            while chunk := file.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def run_once(urls: list[str], out: Path, engine: str, memory: int) -> tuple[float, str, Any]:
    from wdspipes.tools.reshard import reshard

    start = time.perf_counter()
    report = reshard(
        urls,
        str(out / "o-%05d.tar"),
        maxsize=OUTPUT_MAXSIZE,
        shuffle=True,
        seed=0,
        memory=memory,
        engine=engine,
    )
    seconds = time.perf_counter() - start
    found = digest(report.shards)
    shutil.rmtree(out)
    return seconds, found, report


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    versions = import_libraries(["wdspipes", "ray"])
    import ray

    print_header(versions, "best of runs, wall time in this process", args.markdown)
    per_shard = 5 if args.quick else SAMPLES_PER_SHARD
    size = 2_000_000 if args.quick else parse_size(args.size)
    memory = 200_000 if args.quick else parse_size(args.memory)
    spec = big_dataset(per_shard)
    count = max(1, round(size / (per_shard * spec.sample_bytes)))
    urls = prepare(spec, args.data, max(2, count))
    input_bytes = sum(os.path.getsize(url) for url in urls)
    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="WARNING")
    startup = time.perf_counter() - start
    times: dict[str, list[float]] = {"local": [], "ray": []}
    digests: dict[str, set[str]] = {"local": set(), "ray": set()}
    reports: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(dir=args.data) as tmp:
            for _ in range(1 if args.quick else args.repeat):
                for engine in ("local", "ray"):
                    seconds, found, reports[engine] = run_once(
                        urls, Path(tmp) / engine, engine, memory
                    )
                    times[engine].append(seconds)
                    digests[engine].add(found)
    finally:
        ray.shutdown()
    if len(digests["local"] | digests["ray"]) != 1:
        raise RuntimeError("the Ray engine wrote other bytes than the local engine")
    report = reports["local"]
    print_section(
        f"{len(urls)} shards, {input_bytes / MB:,.1f} MB, memory {memory / 2**20:.1f} MiB: "
        f"{report.buckets} buckets, {len(report.shards)} output shards; "
        f"Ray with {args.cpus} CPUs, started in {startup:.1f} s",
        args.markdown,
    )
    rows = []
    for engine, runs in times.items():
        best = min(runs)
        rows.append(
            [
                engine,
                f"{runs[0]:.2f}",
                f"{best:.2f}",
                f"{input_bytes / MB / best:.0f}",
                f"{best - min(times['local']):+.2f}",
                "yes",
            ]
        )
    headers = ["engine", "first s", "best s", "MB/s", "vs local s", "same bytes"]
    print(format_table(headers, rows, args.markdown))


if __name__ == "__main__":
    main()
