"""Bombs for the readers' memory bounds (issue 23): data small on disk that would take much
memory to decode, built without holding what it decodes to, and the measure of a read of it in
a new process. ``tests/test_security.py`` asserts the bounds; ``benchmarks/bomb_memory.py``
prints the figures for any tree.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path
from typing import Any

MEASURE = """
import json, resource, sys, warnings
import wdspipes as wds

def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

warm, bomb, spec = sys.argv[1:]
list(wds.WebDataset(warm).decode(spec))  # imports and first allocations done
before = rss_kib()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        outcome = f"{len(list(wds.WebDataset(bomb).decode(spec)))} samples, no error"
    except wds.WdsError as error:
        outcome = f"{type(error).__name__} <- {type(error.__cause__).__name__}: {error}"
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"growth_mib": growth / 1024, "outcome": outcome,
                  "warnings": [str(w.message) for w in caught]}))
"""


def measure(warm: str, bomb: str, spec: str) -> dict[str, Any]:
    """Read shard ``bomb`` decoded with ``spec`` in a new Python process, after shard ``warm``
    (so that imports and first allocations are done): the outcome, the warnings, and how far
    the process's peak memory rose over what it held before (``growth_mib``)."""
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, warm, bomb, spec],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(warm).parent,  # not a source tree: wdspipes comes from the path (PYTHONPATH)
    )
    measured: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return measured


def gzip_of_zeros(size: int) -> bytes:
    """The gzip of ``size`` zero bytes (a multiple of 16 MiB): 1 GiB in about 1 MB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(1 << 24)
    parts = [compressor.compress(chunk) for _ in range(size // len(chunk))]
    return b"".join([*parts, compressor.flush()])


def png_of_zeros(width: int, height: int) -> bytes:
    """A grey PNG of ``width`` x ``height`` black pixels, made without holding them."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    compressor = zlib.compressobj(9)
    row = bytes(width + 1)  # filter type 0, then the pixels
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def large_member_shard(path: Path, size: int) -> str:
    """A shard at ``path`` of one member ``0.bin`` of ``size`` zero bytes (a multiple of
    16 MiB), written without holding it."""
    with open(path, "wb") as out:
        info = tarfile.TarInfo("0.bin")
        info.size = size
        out.write(info.tobuf(tarfile.USTAR_FORMAT))
        for _ in range(size >> 24):
            out.write(bytes(1 << 24))
        out.write(bytes(1024))
    return str(path)
