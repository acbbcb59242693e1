"""Raw samples through worker processes: 100 kB samples delivered to the training process.

What a user who trains on raw bytes (audio, tokens, their own decoding in the training step)
sees: tar shards of samples of a ``bin`` field of random bytes and a ``cls``, read from the page
cache by ``WebDataset(urls).to_tuple("bin", "cls")``, batched by 20 (``.batched(20)``, whose
``bin`` column is a list of ``bytes``) or not, and delivered:

- in one process (no loader): the rate the loaders are measured against;
- under torch's ``DataLoader`` with 2 forked workers (``batch_size=None``, persistent workers);
- under DataLoader2 with ``MultiProcessingReadingService(num_workers=2)`` (forked, its default
  prefetch counts).

Each mode runs in a process of its own (this script started again with ``--mode``), the modes
in turn ``--repeat`` times, so that the machine's drift falls on all of them; a process builds
its loader and reads ``--epochs`` epochs (the first one starts the workers), checking that
every epoch delivers every sample once with its bytes' total. Reported: MB/s of payload (the
``bin`` and ``cls`` bytes) arriving in the training process, the best epoch of each run (the
best run and the median run), the first epoch's, and the CPU seconds per GB of the training
process and of the workers.

Target (issue 34): batched, DataLoader2 and DataLoader each >= 0.5 of the one-process rate
(best runs).

Usage::

    python benchmarks/raw_speed.py              # full run: writes 200 MB of shards once
    python benchmarks/raw_speed.py --quick      # smoke run on tiny shards
    python benchmarks/raw_speed.py --markdown   # tables as Markdown
    python benchmarks/raw_speed.py --help       # sizes, repeats, data directory

Shards go to ``benchmarks/data/`` (git-ignored) unless ``--data DIR`` says otherwise.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
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
from pipeline_speed import Loader, in_process, under_dataloader, under_dataloader2

BIN_BYTES = 100_000
BATCH = 20
TARGET = 0.5  # batched, through each loader, over the one-process rate
MODES = {
    "one process": ("in_process", True),
    "DataLoader, 2 workers": ("dataloader", True),
    "DataLoader2, 2 workers": ("dataloader2", True),
    "one process, unbatched": ("in_process", False),
    "DataLoader, 2 workers, unbatched": ("dataloader", False),
    "DataLoader2, 2 workers, unbatched": ("dataloader2", False),
}


# --- the dataset ----------------------------------------------------------------------------


def ensure_shards(root: Path, shards: int, per_shard: int) -> tuple[list[str], int]:
    """The shards' paths, written if missing, and the payload bytes of an epoch."""
    import numpy as np

    import wdspipes as wds

    directory = root / f"raw-{shards}x{per_shard}x{BIN_BYTES}"
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / "manifest.json"
    paths = [directory / f"shard-{shard:04d}.tar" for shard in range(shards)]
    if not (manifest.exists() and all(map(Path.exists, paths))):
        total = 0
        for shard, path in enumerate(paths):
            rng = np.random.default_rng([shard, per_shard])
            with wds.TarWriter(str(path) + ".partial", encoder=False) as writer:
                for index in range(per_shard):
                    number = shard * per_shard + index
                    sample = {
                        "__key__": f"{number:07d}",
                        "bin": rng.integers(0, 256, BIN_BYTES, dtype=np.uint8).tobytes(),
                        "cls": str(number).encode(),
                    }
                    total += len(sample["bin"]) + len(sample["cls"])
                    writer.write(sample)
            os.replace(str(path) + ".partial", path)
        manifest.write_text(json.dumps({"payload": total}))
    for path in paths:  # into the page cache
        with open(path, "rb") as file:
            while file.read(1 << 24):
                pass
    return [str(path) for path in paths], int(json.loads(manifest.read_text())["payload"])


# --- one run, in a process of its own -------------------------------------------------------


def make_loader(loader: str, batched: bool, urls: list[str]) -> Loader:
    import wdspipes as wds

    pipe = wds.WebDataset(urls).to_tuple("bin", "cls")
    if batched:
        pipe = pipe.batched(BATCH)
    if loader == "in_process":
        return in_process(pipe)
    if loader == "dataloader":
        return under_dataloader(pipe, persistent=True)
    return under_dataloader2(pipe)


def epoch(data: Iterable[Any], batched: bool) -> tuple[int, int]:
    """Samples and payload bytes of one epoch."""
    samples = payload = 0
    for bins, labels in data:
        if batched:
            samples += len(bins)
            payload += sum(map(len, bins)) + sum(map(len, labels))
        else:
            samples += 1
            payload += len(bins) + len(labels)
    return samples, payload


def run(args: argparse.Namespace) -> None:
    """Measure one mode (``--mode``), print one JSON line."""
    import_libraries(["wdspipes", "torch", "torchdata"])
    loader, batched = MODES[args.mode]
    urls = json.loads(args.urls)
    rates = []
    with quiet():
        before = os.times()
        data, close = make_loader(loader, batched, urls)
        for _ in range(args.epochs):
            start = time.perf_counter()
            samples, payload = epoch(data, batched)
            rates.append(payload / (time.perf_counter() - start) / 1e6)
            if (samples, payload) != (args.samples, args.payload):
                raise AssertionError(f"an epoch gave {samples} samples and {payload} bytes")
        close()
        del data
        gc.collect()
        time.sleep(0.1)  # persistent DataLoader workers are joined as their loader goes
        after = os.times()
    gigabytes = args.epochs * args.payload / 1e9
    main_cpu = after.user + after.system - before.user - before.system
    children = after.children_user + after.children_system
    workers_cpu = children - before.children_user - before.children_system
    print(
        json.dumps(
            {"rates": rates, "main": main_cpu / gigabytes, "workers": workers_cpu / gigabytes}
        )
    )


def run_in_process(args: argparse.Namespace, mode: str, urls: list[str], payload: int) -> Any:
    command = [
        sys.executable,
        __file__,
        "--mode",
        mode,
        "--urls",
        json.dumps(urls),
        "--payload",
        str(payload),
        "--samples",
        str(args.shards * args.per_shard),
        "--epochs",
        str(args.epochs),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{mode}: exit {done.returncode}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- report ---------------------------------------------------------------------------------


def table(results: dict[str, list[Any]], markdown: bool) -> tuple[str, dict[str, float]]:
    best = {mode: max(max(r["rates"]) for r in runs) for mode, runs in results.items()}
    rows = []
    for mode, runs in results.items():
        bests = [max(r["rates"]) for r in runs]
        base = best["one process" if "unbatched" not in mode else "one process, unbatched"]
        rows.append(
            [
                mode,
                f"{best[mode]:,.0f}",
                f"{statistics.median(bests):,.0f}",
                f"{statistics.median(r['rates'][0] for r in runs):,.0f}",
                f"{best[mode] / base:.2f}",
                f"{statistics.median(r['main'] for r in runs):.2f}",
                f"{statistics.median(r['workers'] for r in runs):.2f}",
            ]
        )
    headers = [
        "mode",
        "best MB/s",
        "median run MB/s",
        "epoch 1 MB/s",
        "vs one process",
        "main CPU s/GB",
        "workers CPU s/GB",
    ]
    return format_table(headers, rows, markdown), best


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--repeat", type=int, help="runs of each mode, in turn (5; 1)")
    parser.add_argument("--epochs", type=int, help="epochs a run reads (4; 2)")
    parser.add_argument("--shards", type=int, help="shards (8; 2)")
    parser.add_argument("--per-shard", type=int, help="samples per shard (250; 20)")
    parser.add_argument("--only", action="append", choices=list(MODES), help="modes to run")
    parser.add_argument("--quick", action="store_true", help="tiny shards, one run: a smoke test")
    parser.add_argument("--markdown", action="store_true", help="tables as Markdown")
    parser.add_argument("--mode", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    parser.add_argument("--payload", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--samples", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    apply_size_defaults(
        parser, args, {"repeat": (5, 1), "epochs": (4, 2), "shards": (8, 2), "per_shard": (250, 20)}
    )
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mode:
        run(args)
        return
    versions = import_libraries(["wdspipes", "torch", "torchdata"])
    print_header(
        versions,
        "payload MB/s delivered to the training process, each mode in a process of its own",
        args.markdown,
    )
    import wdspipes

    mark = "- " if args.markdown else ""
    print(f"{mark}wdspipes from: {Path(wdspipes.__file__).parent.parent}")
    urls, payload = ensure_shards(args.data, args.shards, args.per_shard)
    modes = args.only or list(MODES)
    print(f"{mark}load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[str, list[Any]] = {mode: [] for mode in modes}
    for _ in range(args.repeat):
        for mode in modes:
            results[mode].append(run_in_process(args, mode, urls, payload))
    print(f"{mark}load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_section(
        f"{args.shards * args.per_shard:,} samples of {BIN_BYTES:,} bytes + cls "
        f"({payload / 1e6:,.1f} MB), {args.epochs} epochs a run, best of {args.repeat} runs",
        args.markdown,
    )
    text, best = table(results, args.markdown)
    print(text)
    if "one process" in best:
        for mode in ("DataLoader2, 2 workers", "DataLoader, 2 workers"):
            if mode in best:
                ratio = best[mode] / best["one process"]
                print(
                    f"target: {mode}, batched >= {TARGET:g} of one process: {ratio:.2f}, "
                    f"{verdict(ratio >= TARGET)}"
                )


if __name__ == "__main__":
    main()
