"""Writers of test shards: in-memory tar bytes, shard files, raw headers for malformed archives;
and :class:`Shards`, the type of the shard fixtures (tests/conftest.py)."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

BLOCK = 512


@dataclass(frozen=True)
class Shards:
    """Shard files written for tests: their ``paths`` in order, and a ``spec`` that names them
    all in one brace pattern, as a user would write it (``.../s-{0..7}.tar``)."""

    paths: list[str]
    spec: str

    @classmethod
    def numbered(cls, directory: Path, stem: str, count: int, suffix: str = ".tar") -> Shards:
        """The shards ``{directory}/{stem}-0{suffix}`` to ``-{count - 1}``."""
        paths = [f"{directory}/{stem}-{index}{suffix}" for index in range(count)]
        return cls(paths, f"{directory}/{stem}-{{0..{count - 1}}}{suffix}")


def make_tar(members: Iterable[tuple[str, bytes]], format: int = tarfile.USTAR_FORMAT) -> bytes:
    """A tar archive holding ``(name, data)`` regular files, in order, written by tarfile."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sample_members(
    keys: Sequence[str], fields: Sequence[str] = ("cls", "txt")
) -> list[tuple[str, bytes]]:
    """Members for one sample per key, with distinct contents per key and field."""
    return [(f"{key}.{field}", f"{key}/{field}".encode()) for key in keys for field in fields]


def write_varied_shards(directory: Path, counts: Sequence[int]) -> list[str]:
    """Shards ``shard-000.tar``, ... in ``directory`` (made), with ``counts[i]`` samples in
    shard i, keyed ``"{shard:03d}-{index:05d}"``, with a ``cls`` and a ``bin`` field of
    ``index`` times the key (sizes that vary): the inputs of the reshard tests."""
    directory.mkdir()
    paths = []
    for shard, count in enumerate(counts):
        members = []
        for index in range(count):
            key = f"{shard:03d}-{index:05d}"
            members += [(f"{key}.cls", b"%d" % index), (f"{key}.bin", key.encode() * index)]
        path = directory / f"shard-{shard:03d}.tar"
        path.write_bytes(make_tar(members))
        paths.append(str(path))
    return paths


def write_shards(
    directory: Path,
    nshards: int,
    samples_per_shard: int,
    fields: Sequence[str] = ("cls", "txt"),
    prefix: str = "shard",
) -> list[str]:
    """Write ``nshards`` tar shards; keys are ``"{shard:03d}-{sample:05d}"`` so every key is unique
    across shards. Returns the paths, in order."""
    paths = []
    for shard in range(nshards):
        keys = [f"{shard:03d}-{sample:05d}" for sample in range(samples_per_shard)]
        path = directory / f"{prefix}-{shard:03d}.tar"
        path.write_bytes(make_tar(sample_members(keys, fields)))
        paths.append(str(path))
    return paths


def raw_header(
    name: bytes | str,
    size: int = 0,
    kind: bytes = b"0",
    prefix: bytes = b"",
    size_field: bytes | None = None,
    signed_checksum: bool = False,
) -> bytes:
    """One ustar header block with full control over the fields (for malformed archives)."""
    if isinstance(name, str):
        name = name.encode()
    header = bytearray(BLOCK)
    header[0 : len(name)] = name
    header[100:108] = b"0000644\0"
    header[108:116] = b"0000000\0"
    header[116:124] = b"0000000\0"
    header[124:136] = size_field if size_field is not None else b"%011o\0" % size
    header[136:148] = b"00000000000\0"
    header[156:157] = kind
    header[257:265] = b"ustar\x0000"
    header[345 : 345 + len(prefix)] = prefix
    header[148:156] = b"        "
    signed = (b - 256 if b > 127 else b for b in header)
    checksum = sum(signed) if signed_checksum else sum(header)
    header[148:156] = b"%06o\0 " % checksum
    return bytes(header)


def raw_member(name: bytes | str, data: bytes, kind: bytes = b"0", **fields: object) -> bytes:
    """A header and its padded data."""
    return raw_header(name, len(data), kind, **fields) + data + bytes(-len(data) % BLOCK)  # type: ignore[arg-type]


def pax_member(records: dict[str, str], kind: bytes = b"x") -> bytes:
    """A PAX extended (``x``) or global (``g``) header with its records."""
    body = b""
    for key, value in records.items():
        line = f" {key}={value}\n".encode()
        length = len(line) + 1
        while len(str(length)) + len(line) != length:
            length = len(str(length)) + len(line)
        body += str(length).encode() + line
    return raw_member("././@PaxHeader", body, kind=kind)


def end_marker() -> bytes:
    return bytes(2 * BLOCK)


def require_tool(name: str) -> str:
    """The path of a command-line tool a test needs. Missing, the test fails (so CI cannot pass
    without it) unless WDSPIPES_SKIP_MISSING_TOOLS=1 makes it skip."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (Debian: see DEBIAN_TOOLS in the Makefile)"
        if os.environ.get("WDSPIPES_SKIP_MISSING_TOOLS") == "1":
            pytest.skip(message)
        pytest.fail(message)
    return path


def kill_when_ready(script: str, *args: str) -> int:
    """Run ``python -c script *args`` until it prints ``ready``, then SIGKILL it (a writer
    killed in the middle of its work). Returns its process id."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return child.pid
