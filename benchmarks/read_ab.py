"""The read path in one process, for A/B checks of a change: run it with ``PYTHONPATH=<tree>``
for each tree in turn (A B A B ...), since this machine's speed drifts between runs.

Four readings, each the best of ``--repeat`` passes over the same shards (written once into
``--data`` by the first run, the same bytes for every tree):

- ``tar 1 KB``: ``WebDataset(urls)`` over 40,000 samples of a 1 KB ``bin`` and a ``cls``: the
  per-member path (the walk's hot loop, the grouper);
- ``tar 100 KB``: ``WebDataset(urls)`` over 1,200 samples of a 100 KB ``bin``: members read
  each into a buffer of their own (the walk's large-member branch);
- ``decode``: ``WebDataset(urls).decode().to_tuple("cls", "txt.gz").batched(64)`` over the
  1 KB shards' ``cls`` and a small ``txt.gz``: the per-field path of the decoders;
- ``jpeg`` and ``png``: ``decode("rgb8")`` of 2,000 256 x 256 images of each format;
- with ``--loaders``, end to end through DataLoader2 with 2 worker processes (batches arriving
  in this process, wall-clock seconds, the best epoch of ``--repeat`` after the one that starts
  the workers): ``dl2 decode``, the ``decode`` reading's pipeline, and ``dl2 jpeg``,
  ``decode("rgb8").to_tuple("jpg", "__key__").batched(64)`` of the JPEGs.

Usage::

    PYTHONPATH=/path/to/tree .venv/bin/python benchmarks/read_ab.py --data /tmp/ab-shards

It prints one JSON line: samples per second for each reading (``--cpu``: per CPU second of the
process, for a machine loaded by others; the readings run on one thread).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from PIL import Image

import wdspipes as wds


def write(path: Path, samples: Iterable[dict[str, bytes]]) -> str:
    if not path.exists():
        with wds.TarWriter(str(path) + ".tmp", encoder=False) as writer:
            for sample in samples:
                writer.write(sample)
        os.replace(str(path) + ".tmp", path)
    return str(path)


def image(fmt: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:256, 0:256]
    pixels = np.stack([x, y, (x + y) // 2], axis=-1) + rng.integers(0, 16, (256, 256, 3))
    buffer = io.BytesIO()
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buffer, format=fmt)
    return buffer.getvalue()


def datasets(data: Path) -> dict[str, list[str]]:
    data.mkdir(parents=True, exist_ok=True)
    text = gzip.compress(b"a caption of a few words", mtime=0)
    small = [
        write(
            data / f"small-{shard}.tar",
            (
                {
                    "__key__": f"{shard}-{i:05d}",
                    "bin": bytes(1000),
                    "cls": b"%d" % i,
                    "txt.gz": text,
                }
                for i in range(5000)
            ),
        )
        for shard in range(8)
    ]
    big = [
        write(
            data / f"big-{shard}.tar",
            ({"__key__": f"{shard}-{i:05d}", "bin": bytes(100_000)} for i in range(300)),
        )
        for shard in range(4)
    ]
    pictures = {
        fmt: [
            write(
                data / f"{fmt.lower()}-{shard}.tar",
                (
                    {"__key__": f"{shard}-{i:05d}", fmt.lower().replace("jpeg", "jpg"): picture}
                    for i, picture in enumerate([image(fmt, shard)] * 500)
                ),
            )
            for shard in range(4)
        ]
        for fmt in ("JPEG", "PNG")
    }
    return {"small": small, "big": big, "jpeg": pictures["JPEG"], "png": pictures["PNG"]}


CLOCK = time.perf_counter
"""The clock of the passes: wall-clock seconds, or with ``--cpu`` the process's CPU seconds,
which a machine loaded by other processes moves much less."""


def rate(
    make: Callable[[], Iterable[object]], samples: int, repeat: int, per_item: int = 1
) -> float:
    """Samples a second, the best of ``repeat`` passes over ``make()``, each of which must give
    ``samples`` samples (``per_item`` to an item: batches), or the tree under test lost some."""
    best = float("inf")
    for _ in range(repeat):
        start = CLOCK()
        items = 0
        for _ in make():
            items += 1
        best = min(best, CLOCK() - start)
        if items * per_item != samples:
            raise RuntimeError(f"read {items * per_item} samples, not {samples}")
    return samples / best


def loader_rate(pipe: object, samples: int, repeat: int) -> float:
    """Samples a second arriving in this process from ``pipe`` under DataLoader2 with 2 worker
    processes: the best of ``repeat`` epochs after the first (which starts the workers), each
    of which must give ``samples`` samples in batches."""
    from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

    loader = DataLoader2(pipe, reading_service=MultiProcessingReadingService(num_workers=2))
    best = float("inf")
    try:
        for epoch in range(repeat + 1):
            start = time.perf_counter()
            items = sum(len(batch[0]) for batch in loader)
            if epoch:
                best = min(best, time.perf_counter() - start)
            if items != samples:
                raise RuntimeError(f"read {items} samples, not {samples}")
    finally:
        loader.shutdown()
    return samples / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="shard directory (made once)")
    parser.add_argument("--repeat", type=int, default=5, help="passes, best reported (5)")
    parser.add_argument(
        "--cpu", action="store_true", help="samples per CPU second of the process, not per second"
    )
    parser.add_argument(
        "--loaders", action="store_true", help="also end to end through DataLoader2, 2 workers"
    )
    args = parser.parse_args()
    if args.cpu:
        global CLOCK
        CLOCK = time.process_time
    urls = datasets(args.data)
    n = args.repeat
    result = {
        "tar 1 KB": rate(lambda: wds.WebDataset(urls["small"]), 40_000, n),
        "tar 100 KB": rate(lambda: wds.WebDataset(urls["big"]), 1_200, n),
        "decode": rate(
            lambda: wds.WebDataset(urls["small"]).decode().to_tuple("cls", "txt.gz").batched(64),
            40_000,
            n,
            per_item=64,
        ),
        "jpeg": rate(lambda: wds.WebDataset(urls["jpeg"]).decode("rgb8"), 2_000, n),
        "png": rate(lambda: wds.WebDataset(urls["png"]).decode("rgb8"), 2_000, n),
    }
    if args.loaders:
        result["dl2 decode"] = loader_rate(
            wds.WebDataset(urls["small"]).decode().to_tuple("cls", "txt.gz").batched(64), 40_000, n
        )
        result["dl2 jpeg"] = loader_rate(
            wds.WebDataset(urls["jpeg"]).decode("rgb8").to_tuple("jpg", "__key__").batched(64),
            2_000,
            n,
        )
    print(json.dumps({name: round(value) for name, value in result.items()}))


if __name__ == "__main__":
    main()
