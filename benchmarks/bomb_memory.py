"""Memory of reading small data that decodes big (issue 23): each case read in a new process,
after a small shard of its kind, with what the process's peak memory rose by and the outcome.

Cases: a 1 MB ``.txt.gz`` field holding 1 GiB of zeros; a 140 kB PNG of 12,000 x 12,000 pixels
decoded as ``"torchrgb"``; a shard of one 256 MiB member (read, not refused: the peak is about
its size when it is read into one buffer, twice that when read in parts then joined).

Usage (``PYTHONPATH=<tree>`` for another tree: the child processes inherit it)::

    .venv/bin/python benchmarks/bomb_memory.py [--markdown]
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
import tarfile
import tempfile
from pathlib import Path

from common import format_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bombs import (  # from tests/, on the path since the line above
    gzip_of_zeros,
    large_member_shard,
    measure,
    png_of_zeros,
)


def shard(path: Path, name: str, data: bytes) -> str:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        cases = [
            (
                "1 GiB of zeros in a .txt.gz field (1 MB)",
                shard(directory / "warm-gz.tar", "0.txt.gz", gzip.compress(b"hi")),
                shard(directory / "gz.tar", "0.txt.gz", gzip_of_zeros(1 << 30)),
                "rgb8",
            ),
            (
                "PNG of 12,000 x 12,000 pixels (140 kB), torchrgb",
                shard(directory / "warm-png.tar", "0.png", png_of_zeros(8, 8)),
                shard(directory / "png.tar", "0.png", png_of_zeros(12_000, 12_000)),
                "torchrgb",
            ),
            (
                "a member of 256 MiB",
                shard(directory / "warm-bin.tar", "0.bin", bytes(1 << 20)),
                large_member_shard(directory / "large.tar", 256 << 20),
                "rgb8",
            ),
        ]
        for name, warm, bomb, spec in cases:
            measured = measure(warm, bomb, spec)
            outcome = measured["outcome"].split(":")[0]
            rows.append([name, f"{max(measured['growth_mib'], 0):.0f} MiB", outcome])
    print(format_table(["case", "peak memory growth", "outcome"], rows, args.markdown))


if __name__ == "__main__":
    main()
