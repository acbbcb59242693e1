"""Reshard benchmark: ``wdspipes reshard --shuffle`` on a dataset larger than its memory budget.

Generates a dataset of 100 KB samples in uncompressed tar shards (once; later runs reuse them,
with read_speed.py's generator), then runs, each in a subprocess of its own:

- ``wdspipes reshard SHARDS -o OUT --maxsize 100MB --shuffle --seed 0 --memory BUDGET``: the
  two-pass shuffle through bucket files next to the output;
- ``wdspipes reshard SHARDS -o OUT --maxsize 100MB``: the same copy in order, for reference;
- ``cat SHARDS > OUT``: the bytes copied and nothing else, the bound of the machine.

For each: wall time, throughput (input bytes / wall time; MB = 10**6 bytes), and the peak RSS
of the process (``os.wait4``'s ``ru_maxrss`` for that one child), also less the peak RSS of
``wdspipes --version``, which imports the same modules (torch included) and reads nothing.
Every output is checked: the same samples (keys and field bytes) as the input, and shuffled,
not in input order. The outputs are deleted after each run.

Usage::

    python benchmarks/reshard_speed.py                          # 400 MB, --memory 64M
    python benchmarks/reshard_speed.py --size 1.5G --memory 256M --markdown
    python benchmarks/reshard_speed.py --quick                  # a smoke run on tiny shards

Shards go to ``benchmarks/data/`` (git-ignored) unless ``--data DIR`` says otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common import format_table, import_libraries, print_header, print_section, verdict
from read_speed import big_dataset, prepare

MB = 1e6
MIB = 1 << 20
SAMPLES_PER_SHARD = 250  # 100 KB samples: 25 MB input shards
OUTPUT_MAXSIZE = "100MB"


@dataclass(frozen=True)
class Run:
    """One run of one command."""

    name: str
    seconds: float
    peak_rss: int  # bytes
    buckets: int | None = None
    passes: int | None = None
    largest: str | None = None  # the largest bucket, as the summary gives it


def parse_size(text: str) -> int:
    """``400M``, ``1.5G``: powers of 1024, as the ``wdspipes`` command reads them."""
    from wdspipes.cli.common import parse_size as parse

    return parse(text)


# Runs a command and reports its wall time and its own peak RSS. The benchmark runs commands
# through it because a child's ru_maxrss on Linux includes the RSS of the process it was forked
# from (until its exec), and this process has imported torch; this launcher has not.
LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
process = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(process.pid, 0)
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as report:
    json.dump({"seconds": seconds, "status": os.waitstatus_to_exitcode(status),
               "peak_rss": usage.ru_maxrss * 1024}, report)
"""


def run_child(name: str, argv: Sequence[str], stdout_path: Path) -> Run:
    """Run a command to its end, its output to ``stdout_path``: its wall time, its own peak
    RSS, and the buckets and passes its summary names."""
    report = stdout_path.with_name(stdout_path.name + ".json")
    launcher = [sys.executable, "-c", LAUNCHER, str(report), *argv]
    with open(stdout_path, "wb") as stdout, tempfile.TemporaryFile() as stderr:
        subprocess.run(launcher, stdout=stdout, stderr=stderr, check=True)
        measured = json.loads(report.read_text())
        if measured["status"] != 0:
            stderr.seek(0)
            message = stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{name} failed with status {measured['status']}: {message}")
    report.unlink()
    text = " ".join(stdout_path.read_text(errors="replace").split()) if name != "cat" else ""
    buckets = re.search(r"through ([\d,]+) buckets?", text)
    passes = re.search(r"in (\d+) passes", text)
    largest = re.search(r"the largest ([\d.]+ \w+)", text)
    return Run(
        name,
        measured["seconds"],
        measured["peak_rss"],
        int(buckets.group(1).replace(",", "")) if buckets else None,
        int(passes.group(1)) if passes else None,
        largest.group(1) if largest else None,
    )


def read_back(paths: Sequence[str]) -> tuple[list[str], int]:
    """The keys in order, and a digest of the (key, fields) pairs that ignores their order."""
    import wdspipes

    keys, total = [], 0
    for sample in wdspipes.WebDataset(list(paths)):
        keys.append(sample["__key__"])
        h = hashlib.blake2b(sample["__key__"].encode())
        for field, value in sorted((k, v) for k, v in sample.items() if not k.startswith("__")):
            h.update(b"%s\0%d\0" % (field.encode(), len(value)))
            h.update(value)
        total ^= int.from_bytes(h.digest()[:16], "big")
    return keys, total


def check_output(name: str, paths: list[str], expected: tuple[list[str], int]) -> None:
    """The output holds the input's samples, byte for byte: in order, or shuffled."""
    keys, found = read_back(paths)
    if sorted(keys) != sorted(expected[0]) or found != expected[1]:
        raise RuntimeError(f"{name}: the output samples differ from the input's")
    shuffled = name.endswith("--shuffle")
    if (keys == expected[0]) == shuffled:
        raise RuntimeError(f"{name}: the output order is {'not ' if shuffled else ''}shuffled")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_data = Path(__file__).resolve().parent / "data"
    parser.add_argument("--data", type=Path, default=default_data, help="shard directory")
    parser.add_argument("--size", help="dataset size (400M; quick 8M; K, M, G)")
    parser.add_argument("--memory", help="reshard --memory (64M; quick 2M)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per command, best kept (1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.size = args.size or ("8M" if args.quick else "400M")
    args.memory = args.memory or ("2M" if args.quick else "64M")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    versions = import_libraries(["wdspipes", "msgpack"])
    timing = (
        f"wall time of each command in its own process, best of {args.repeat}; "
        "MB = 10^6 bytes, MiB = 2^20"
    )
    print_header(versions, timing, args.markdown)
    size, memory = parse_size(args.size), parse_size(args.memory)
    spec = big_dataset(SAMPLES_PER_SHARD)
    shard_bytes = SAMPLES_PER_SHARD * (spec.sample_bytes + 4 * 512)
    urls = prepare(spec, args.data, max(2, math.ceil(size / shard_bytes)))
    input_bytes = sum(os.path.getsize(url) for url in urls)
    samples = SAMPLES_PER_SHARD * len(urls)
    print(f"data: {len(urls)} shards in {spec.directory(args.data)}")
    expected = read_back(urls)

    exe = str(Path(sys.executable).parent / "wdspipes")
    out = args.data / "reshard-out"
    commands = {
        "reshard --shuffle": [
            *(exe, "reshard", *urls, "-o", str(out / "shuffled-%04d.tar")),
            *("--maxsize", OUTPUT_MAXSIZE, "--shuffle", "--seed", "0", "--memory", args.memory),
        ],
        "reshard (in order)": [
            *(exe, "reshard", *urls, "-o", str(out / "ordered-%04d.tar")),
            *("--maxsize", OUTPUT_MAXSIZE),
        ],
        "cat": ["cat", *urls],
    }
    out.mkdir(parents=True, exist_ok=True)
    startup = [run_child("imports", [exe, "--version"], out / "version") for _ in range(3)]
    baseline = min(run.peak_rss for run in startup)
    start_seconds = min(run.seconds for run in startup)
    best: dict[str, Run] = {}
    for _ in range(args.repeat):
        for name, command in commands.items():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            run = run_child(name, command, out / ("cat.tar" if name == "cat" else "summary"))
            if name != "cat":
                check_output(name, sorted(str(p) for p in out.glob("*.tar")), expected)
            if name not in best or run.seconds < best[name].seconds:
                best[name] = run
    shutil.rmtree(out)

    print_section(
        f"100 KB samples: {samples:,} in {len(urls)} shards, {input_bytes / MB:,.1f} MB; "
        f"--memory {args.memory} ({memory / MIB:,.0f} MiB)",
        args.markdown,
    )
    headers = [
        "command",
        "wall s",
        "MB/s",
        "MB/s after startup",
        "peak RSS MiB",
        "over imports MiB",
        "buckets",
        "largest bucket",
        "passes",
    ]
    rows = []
    for name, run in best.items():
        work = max(run.seconds - (start_seconds if name != "cat" else 0.0), 1e-3)
        rows.append(
            [
                name,
                f"{run.seconds:.1f}",
                f"{input_bytes / MB / run.seconds:,.0f}",
                f"{input_bytes / MB / work:,.0f}",
                f"{run.peak_rss / MIB:,.0f}",
                f"{(run.peak_rss - baseline) / MIB:,.0f}" if name != "cat" else "-",
                f"{run.buckets:,}" if run.buckets else "-",
                run.largest or "-",
                str(run.passes) if run.passes else "-",
            ]
        )
    print(format_table(headers, rows, args.markdown))
    growth = best["reshard --shuffle"].peak_rss - baseline
    print(
        f"\nMB/s: input bytes / wall time; after startup: less the wall time of "
        f"`wdspipes --version` ({start_seconds:.1f} s, mostly importing torch), whose peak "
        f"RSS ({baseline / MIB:,.0f} MiB) is the imports'. The dataset is "
        f"{input_bytes / memory:.1f}x the memory budget."
    )
    print(
        f"target: shuffled, peak RSS over the imports within --memory ({growth / MIB:,.0f} <= "
        f"{memory / MIB:,.0f} MiB): {verdict(growth <= memory)}"
    )
    if args.quick:
        print("(--quick: too small to judge; start-up and fixed buffers dominate)")


if __name__ == "__main__":
    main()
