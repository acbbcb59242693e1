"""State size and restore time of a pipeline saved at several points of an epoch, by one reader
or by several whose states are merged for another number of readers; and what keeping the state
costs DataLoader2 per batch.

    python benchmarks/resume_speed.py --markdown --repeat 5
    python benchmarks/resume_speed.py --quick        # smoke run on tiny shards

Writes shards of 1 KB samples into a temporary directory, then for each cut point k reads k
samples through ``WebDataset(shardshuffle=True).buffer_shuffle(1000).decode()``, takes
``state_dict()`` and measures, best of ``--repeat`` runs:

- the size of the pickled state and the shards a restored pipeline opens;
- the time from ``load_state_dict`` on a new pipeline to its first sample;
- for reference, the time to get there without a state: a new pipeline reading k samples.

Then the same with 4 readers (the split a loader gives 4 workers, in one process), each having
read k / 4 samples, their states merged (``wds.merge_states``) and loaded into reader 0 of 2:
the merged state's size, and the time from loading it to the first sample.

Last, the cost of the state DataLoader2 keeps: its pipeline's state taken as each batch of 64
samples leaves the pipeline (what the worker does, in one process here), against iterating the
same batches alone.

Targets: restore time independent of how far into the epoch the state was taken, i.e. the
slowest restore after the buffer has filled is at most twice the fastest; merged, restoring
costs what the saved places cost (the buffered samples a reader takes, read again from their
shards), below the time to read the samples again at every cut.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import (
    apply_size_defaults,
    format_table,
    import_libraries,
    print_header,
    print_section,
    verdict,
)
from torch.utils.data.graph_settings import apply_sharding

import wdspipes as wds
from wdspipes.loaders.loader_state import StateTags, saver

BUFFER = 1000
READERS, NEW_READERS = 4, 2


def pipeline(urls: str) -> Any:
    return wds.WebDataset(urls, shardshuffle=True, seed=0).buffer_shuffle(BUFFER, seed=1).decode()


def write_shards(directory: Path, shards: int, per_shard: int) -> str:
    for shard in range(shards):
        with wds.TarWriter(str(directory / f"s-{shard:04d}.tar")) as sink:
            for index in range(per_shard):
                sink.write(
                    {"__key__": f"{shard:04d}{index:06d}", "cls": index % 10, "bin": bytes(1000)}
                )
    return f"{directory}/s-{{0000..{shards - 1:04d}}}.tar"


def best_of(repeat: int, run: Any) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def measure(urls: str, cut: int, repeat: int) -> dict[str, float]:
    pipe = pipeline(urls)
    items = iter(pipe)
    for _ in range(cut):
        next(items)
    state = pipe.state_dict()

    opened: list[str] = []
    original = wds.read.opener.open_url

    def counting(url: str, **options: Any) -> Any:
        opened.append(url)
        return original(url, **options)

    def restore() -> None:
        again = pipeline(urls)
        again.load_state_dict(state)
        next(iter(again))

    def skip() -> None:
        fresh = iter(pipeline(urls))
        for _ in range(cut + 1):
            next(fresh)

    wds.read.opener.open_url = counting
    try:
        restore()
    finally:
        wds.read.opener.open_url = original
    return {
        "size": len(pickle.dumps(state)),
        "opened": len(set(opened)),
        "restore": best_of(repeat, restore),
        "skip": best_of(repeat, skip),
    }


def reader(urls: str, readers: int, index: int) -> Any:
    pipe = pipeline(urls)
    apply_sharding(pipe, readers, index)
    return pipe


def measure_merged(urls: str, cut: int, repeat: int) -> dict[str, float]:
    """``READERS`` readers, each stopped after ``cut // READERS`` samples; their states merged
    and loaded into reader 0 of ``NEW_READERS``."""
    states = []
    for index in range(READERS):
        pipe = reader(urls, READERS, index)
        items = iter(pipe)
        for _ in range(cut // READERS):
            next(items)
        states.append(pipe.state_dict())
    merged = wds.merge_states(states)

    def restore() -> None:
        again = reader(urls, NEW_READERS, 0)
        again.load_state_dict(merged)
        next(iter(again))

    held = [
        array("q", part.get("buffer", b""))[::2]  # the shard indexes of the buffered samples
        for key, parts in merged["stages"].items()
        if key.endswith("BufferShuffler")
        for part in parts
    ]
    mine = sum(1 for shards in held for shard in shards if shard % NEW_READERS == 0)
    return {"size": len(pickle.dumps(merged)), "held": mine, "restore": best_of(repeat, restore)}


def measure_tags(urls: str, repeat: int) -> dict[str, float]:
    """Seconds per batch of 64 to read an epoch; and to take the pipeline's state as a batch
    leaves it, as DataLoader2's workers do (its buffer full), 1,000 times."""
    batched = pipeline(urls).batched(64, collation_fn=None)
    batches = len(list(batched))
    tags = iter(StateTags(batched, None, 16))
    for _ in range(2 * BUFFER // 64):
        next(tags)
    save = saver(batched)

    def read() -> None:
        for _ in pipeline(urls).batched(64, collation_fn=None):
            pass

    def states() -> None:
        for _ in range(1000):
            save()

    return {"batch": best_of(repeat, read) / batches, "state": best_of(repeat, states) / 1000}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shards", type=int, help="shards (40; quick 4)")
    parser.add_argument("--per-shard", type=int, help="1 KB samples per shard (1000; quick 500)")
    parser.add_argument("--repeat", type=int, help="runs per measurement, best reported (5; 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    args = parser.parse_args(argv)
    apply_size_defaults(
        parser, args, {"shards": (40, 4), "per_shard": (1000, 500), "repeat": (5, 1)}
    )
    total = args.shards * args.per_shard
    if total < 2 * BUFFER:
        parser.error(f"--shards x --per-shard must be at least {2 * BUFFER} (the buffer twice)")
    versions = import_libraries(["torch", "torchdata"])
    print_header(versions, f"best of {args.repeat} runs per cut point", args.markdown)
    cuts = sorted({1, BUFFER, total // 10, total // 2, total - BUFFER})
    results: dict[int, dict[str, float]] = {}
    merged: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as directory:
        urls = write_shards(Path(directory), args.shards, args.per_shard)
        for cut in cuts:
            results[cut] = measure(urls, cut, args.repeat)
            merged[cut] = measure_merged(urls, cut, args.repeat)
            print(
                f"  read {cut:,}: restored in {results[cut]['restore'] * 1000:.1f} ms, "
                f"merged in {merged[cut]['restore'] * 1000:.1f} ms",
                file=sys.stderr,
            )
        tags = measure_tags(urls, args.repeat)

    print_section(
        f"{args.shards} shards x {args.per_shard:,} samples of 1 KB, "
        f"WebDataset(shardshuffle=True).buffer_shuffle({BUFFER}).decode()",
        args.markdown,
    )
    headers = [
        "samples read before the state",
        "state size (pickled)",
        "shards opened to restore",
        "restore to first sample",
        "without a state: read again",
    ]
    rows = [
        [
            f"{cut:,}",
            f"{r['size'] / 1000:.1f} kB",
            f"{r['opened']:.0f}",
            f"{r['restore'] * 1000:.1f} ms",
            f"{r['skip'] * 1000:,.1f} ms",
        ]
        for cut, r in results.items()
    ]
    print(format_table(headers, rows, args.markdown))

    print_section(
        f"the states of {READERS} readers (k / {READERS} samples each), merged, loaded into "
        f"reader 0 of {NEW_READERS}",
        args.markdown,
    )
    headers = [
        "samples read before the states",
        "merged state (pickled)",
        "buffered samples it takes",
        "restore to first sample",
    ]
    rows = [
        [
            f"{cut:,}",
            f"{r['size'] / 1000:.1f} kB",
            f"{r['held']:,}",
            f"{r['restore'] * 1000:.1f} ms",
        ]
        for cut, r in merged.items()
    ]
    print(format_table(headers, rows, args.markdown))

    print_section("DataLoader2's state of each batch of 64 samples", args.markdown)
    headers = ["a batch of 64 read", "its state taken"]
    rows = [[f"{tags['batch'] * 1e6:,.0f} µs", f"{tags['state'] * 1e6:,.1f} µs"]]
    print(format_table(headers, rows, args.markdown))

    print_section("target", args.markdown)
    mark = "- " if args.markdown else ""
    full = [r["restore"] for cut, r in results.items() if cut >= BUFFER]
    ratio = max(full) / min(full)
    print(
        f"{mark}one reader: restore time independent of the cut point, once the buffer is "
        f"full: slowest {max(full) * 1000:.1f} ms / fastest {min(full) * 1000:.1f} ms = "
        f"{ratio:.2f} (at most 2): {verdict(ratio <= 2)}"
    )
    ratios = {cut: merged[cut]["restore"] / results[cut]["skip"] for cut in cuts if cut >= BUFFER}
    print(
        f"{mark}merged: restoring costs what the saved places cost (the buffered samples taken, "
        f"read again), not the samples read: below reading them again at every cut, "
        f"{', '.join(f'{ratio:.2f}' for ratio in ratios.values())} of it: "
        f"{verdict(max(ratios.values()) < 1)}"
    )
    if args.quick:
        print(f"{mark}(--quick: too few runs to judge)")


if __name__ == "__main__":
    main()
