"""The main job, for now: write a small dataset as shards, read it back through DataLoader2.

Run ``python -m wdspipes.demo`` (``make demo`` sets everything up first). It writes a few tar
shards of labelled samples, then reads every sample of each epoch through
``DataLoader2(WebDataset(...).decode().batched(256), MultiProcessingReadingService(...))``,
checks that each sample arrived exactly once, and prints samples/s.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

from wdspipes.loaders import dataloader2
from wdspipes.pipeline import WebDataset

__all__ = ["main", "write_demo_shards"]

BATCH_SIZE = 256


def write_demo_shards(directory: Path, shards: int, samples: int, size: int = 1000) -> list[str]:
    """Write ``shards`` tar files of ``samples`` samples each (a class label, a caption and
    ``size`` bytes of payload), sorted by key as the format requires. Returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    paths = []
    for shard in range(shards):
        path = directory / f"demo-{shard:04d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as archive:
            for index in range(samples):
                key = f"{shard:04d}{index:06d}"
                label = rng.randrange(10)
                fields = {
                    "cls": str(label).encode(),
                    "txt": f"sample {key} of class {label}".encode(),
                    "bin": rng.randbytes(size),
                }
                for field, data in fields.items():
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(data)
                    archive.addfile(info, io.BytesIO(data))
        paths.append(str(path))
        _say(f"wrote {path.name} ({shard + 1}/{shards}, {path.stat().st_size / 1e6:.1f} MB)")
    return paths


def read_epochs(urls: list[str], workers: int, epochs: int) -> None:
    """Read every epoch through DataLoader2 and report samples/s; fail on a lost or
    duplicated sample."""
    dl2 = dataloader2()
    service = dl2.MultiProcessingReadingService(num_workers=workers)
    # Batch inside the workers: each item crossing to the main process costs a pickle and a
    # queue round trip, far more than reading a sample.
    pipe = WebDataset(urls, shardshuffle=True).decode().batched(BATCH_SIZE)
    loader = dl2.DataLoader2(pipe, reading_service=service)
    try:
        for epoch in range(1, epochs + 1):
            start = time.perf_counter()
            seen = Counter(key for batch in loader for key in batch["__key__"])
            elapsed = time.perf_counter() - start
            repeated = sum(count - 1 for count in seen.values())
            if repeated:
                raise RuntimeError(f"epoch {epoch}: {repeated} samples were read twice")
            _say(
                f"epoch {epoch}: {len(seen)} samples in {elapsed:.2f} s, "
                f"{len(seen) / elapsed:,.0f} samples/s with {workers} workers"
            )
    finally:
        loader.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wdspipes.demo", description=__doc__)
    parser.add_argument("--dir", type=Path, help="where to write shards (default: a temporary dir)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples", type=int, default=5000, help="samples per shard")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wdspipes-demo-") as scratch:
        directory = args.dir or Path(scratch)
        urls = write_demo_shards(directory, args.shards, args.samples)
        total = args.shards * args.samples
        _say(f"reading {total:,} samples from {len(urls)} shards in {directory}")
        read_epochs(urls, args.workers, args.epochs)
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
