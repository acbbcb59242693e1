"""Where each sample of a tar shard lies, found once, and one sample read by one positioned
read. No torch: ``wdspipes index`` writes these offsets without loading it.

A shard's *offsets* are the byte offsets where its samples begin (the first header of each
sample's first member), as the streaming readers group members into samples (consecutive
members with one key; meta files and names without a field skipped), and where the last
sample ends: sample ``i`` lies in bytes ``starts[i]`` to ``starts[i + 1]``. They are found by
one walk over the shard's headers (:func:`scan_offsets`) and kept as one ``array('q')`` per
shard: 8 bytes a sample, so the offsets of 10 million samples take 80 MB.

Reading sample ``i`` is then one positioned read of those bytes (``os.pread`` of a local file,
one ranged request of a remote one) and, the first time, a parse of the headers in them
(:func:`parse_sample`): plain headers inline, anything else (long names, PAX records) by the
tar walk over the bytes read, so that every archive the streaming readers read gives the same
samples here. The reader of an open shard keeps what the parse found of a plain sample and
reads it again without parsing (:mod:`wdspipes.read.shard_reader`).

**Sidecars.** The offsets are also kept in a small file beside the shard, ``NAME.wdsidx``
(:func:`sidecar_path`), or in the shard cache, so that the next process does not walk the
shard again. A sidecar is data like any other: it records the shard's size and modification
time and is used only if both still match (else the shard is walked again and the sidecar
rewritten), its size is checked before it is read (no more entries than the shard has room
for: one 512-byte header a sample at least), its checksum is verified, and its offsets must
increase by whole blocks within the shard. Reading a sample also checks that its bytes start
with a valid header and hold members of one key only, so offsets that do not belong to the
shard give an error, never another sample.

**Damage.** A shard that is cut short or corrupt is walked up to the damage: the samples
before it are read as usual; the sample the damage falls in, and every one after it, give the
walk's error (:class:`~wdspipes.errors.TruncatedShardError` or
:class:`~wdspipes.errors.TarFormatError`) naming the URL, the sample's index and the byte
offset of the damage. A damaged shard gets no sidecar. A shard compressed as a whole cannot be
read at an offset: it is an error naming it.

>>> import io, tarfile
>>> buf = io.BytesIO()
>>> with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
...     for name in ("a.txt", "a.cls", "b.txt"):
...         info = tarfile.TarInfo(name); info.size = 1
...         tf.addfile(info, io.BytesIO(b"1"))
>>> offsets = scan_offsets(io.BytesIO(buf.getvalue()), "mem.tar", size=len(buf.getvalue()))
>>> list(offsets.starts), offsets.samples
([0, 2048, 3072], 2)
>>> start, end = offsets.span(1)
>>> sample_members(buf.getvalue()[start:end], start, offsets, "mem.tar")
[('b.txt', b'1')]
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tempfile
import warnings
import zlib
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wdspipes.core.names import is_meta, split_name
from wdspipes.errors import (
    DuplicateFieldError,
    NoEndMarkerWarning,
    ShardError,
    TarFormatError,
    TruncatedShardError,
    WdsError,
)
from wdspipes.io.urls import ByteStream
from wdspipes.read.walk import BLOCK, TarWalk, plain_members

__all__ = [
    "SIDECAR_SUFFIX",
    "ShardOffsets",
    "parse_sample",
    "read_sidecar",
    "sample_dict",
    "sample_members",
    "scan_offsets",
    "short_read",
    "sidecar_limit",
    "sidecar_path",
    "write_sidecar",
]

log = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".wdsidx"
"""The name of a local shard's sidecar: the shard's name with this appended."""

_MAGIC = b"wdspipes-offsets 1\n"
_HEADER_LIMIT = 1 << 20  # bytes of a sidecar's JSON line at most
_ENDIAN = "<i8"  # offsets on disk: little-endian 64-bit


@dataclass(frozen=True)
class ShardOffsets:
    """Where the samples of one shard lie (see the module).

    Attributes:
        starts: ``samples + 1`` offsets: sample ``i`` lies in bytes ``starts[i]`` to
            ``starts[i + 1]``.
        size: the shard's size in bytes when it was walked.
        mtime_ns: its modification time then (None for a remote shard).
        globals: ``(first sample, records)`` pairs: the records of PAX global headers in force
            from that sample on (almost always empty).
        damage: the error the walk stopped at, if the shard is damaged: the samples from
            ``samples`` on cannot be read.
    """

    starts: array[int]
    size: int
    mtime_ns: int | None = None
    globals: tuple[tuple[int, dict[str, str]], ...] = ()
    damage: WdsError | None = field(default=None, compare=False)

    @property
    def samples(self) -> int:
        """The number of samples that can be read (those before any damage)."""
        return max(len(self.starts) - 1, 0)

    def span(self, index: int) -> tuple[int, int]:
        """The bytes ``(start, end)`` of sample ``index`` (counted in the shard)."""
        starts = self.starts
        return starts[index], starts[index + 1]

    def globals_at(self, index: int) -> dict[str, str]:
        """The PAX global records in force at the start of sample ``index``."""
        records: dict[str, str] = {}
        for first, found in self.globals:
            if first > index:
                break
            records = found
        return records

    def nbytes(self) -> int:
        """Bytes of memory the offsets take (the array's buffer)."""
        return self.starts.itemsize * len(self.starts)


def scan_offsets(
    stream: ByteStream,
    url: str,
    *,
    size: int,
    mtime_ns: int | None = None,
    ignore_zeros: bool = False,
) -> ShardOffsets:
    """The offsets of the samples in ``stream`` (the shard ``url``, of ``size`` bytes), by one
    walk over it to its end (reading, not seeking: the shard is read whole once).

    A shard that ends after a member without the end-of-archive marker is read whole, with a
    :class:`~wdspipes.errors.NoEndMarkerWarning`, as the streaming readers read it; its last
    sample is left out (as damage) if it has fewer fields than the sample before it.

    Raises:
        ShardError: the shard is compressed as a whole, or the stream itself failed. Damage to
            the archive is not raised: it is kept in the result's ``damage``.
    """
    unmarked: list[str] = []
    walk = TarWalk(stream, url, ignore_zeros=ignore_zeros, unmarked_end=unmarked.append)
    starts = array("q")
    found: list[tuple[int, dict[str, str]]] = []
    in_force: dict[str, str] = {}
    key: str | None = None
    width = before = 0  # members of the sample being read, and of the one before it
    end = 0
    damage: WdsError | None = None
    checked = False
    try:
        for name, _, offset, _ in walk.members():
            if not checked:
                _refuse_compressed(walk, url)
                checked = True
            if name.startswith("__") and is_meta(name):
                continue
            parts = split_name(name)
            if parts is None:
                continue
            if parts[0] != key:
                if walk.global_pax != in_force:
                    in_force = dict(walk.global_pax)
                    found.append((len(starts), in_force))
                starts.append(offset)
                key = parts[0]
                before, width = width, 0
            width += 1
            end = walk.offset
    except (TruncatedShardError, TarFormatError) as exn:
        damage = exn
    if unmarked and damage is None and starts:
        damage = _unmarked_end(unmarked[0], url, end, whole=0 < before <= width)
    if damage is None:
        starts.append(end)
    return ShardOffsets(starts, size, mtime_ns, tuple(found), damage)


def _refuse_compressed(walk: TarWalk, url: str) -> None:
    if walk.inflated is not None:
        raise ShardError(
            "the shard is compressed as a whole, so its samples cannot be read at an offset: "
            "decompress it (e.g. wdspipes cat SHARD -o NAME.tar) to read it by index",
            url=url,
        )


def _unmarked_end(problem: str, url: str, end: int, whole: bool) -> WdsError | None:
    """Warn of a shard without the end-of-archive marker, as the streaming readers do; the
    error that its last sample cannot be read if that sample may lack members."""
    verdict = "its samples were read" if whole else "its last sample was left out"
    warnings.warn(NoEndMarkerWarning(f"{problem}: {verdict}"), stacklevel=3)
    if whole:
        return None
    return TruncatedShardError(
        "the shard ends without the end-of-archive marker, and its last sample has fewer "
        "fields than the sample before it: it may lack members",
        url=url,
        offset=end,
    )


class _Window(io.BytesIO):
    """Bytes of a shard from offset ``base`` on, as a seekable stream with the shard's own
    offsets: a tar walk over it reports offsets in the shard."""

    def __init__(self, data: bytes, base: int) -> None:
        super().__init__(data)
        self.base = base

    def seek(self, offset: int, whence: int = 0, /) -> int:
        if whence == 0:
            offset -= self.base
        return super().seek(offset, whence) + self.base


def sample_members(
    chunk: bytes,
    start: int,
    offsets: ShardOffsets,
    url: str,
    index: int = 0,
    *,
    ignore_zeros: bool = False,
) -> list[tuple[str, bytes]]:
    """The ``(name, data)`` of the members in ``chunk``, the bytes of sample ``index`` read
    from offset ``start`` of shard ``url``: plain headers parsed inline, others by a tar walk.

    Raises:
        TarFormatError, TruncatedShardError: the bytes are not whole tar members (the error
            names the offset in the shard).
    """
    records = offsets.globals_at(index) if offsets.globals else None
    if not records:
        members = plain_members(chunk)
        if members is not None:
            return members
    window = _Window(chunk, start)
    walk = TarWalk(window, url, start, ignore_zeros=ignore_zeros, unmarked_end=_ends_at_chunk)
    if records:
        walk.global_pax = dict(records)
    return [(name, data) for name, data, _, _ in walk.members()]


def parse_sample(
    chunk: bytes,
    start: int,
    offsets: ShardOffsets,
    url: str,
    inner: int,
    index: int,
    *,
    ignore_zeros: bool = False,
) -> dict[str, Any]:
    """Sample ``inner`` of shard ``url`` (sample ``index`` of a dataset) from its bytes
    ``chunk``, read from offset ``start``: its members parsed (:func:`sample_members`) and made
    into the sample the grouper makes (:func:`sample_dict`).

    Raises:
        TarFormatError, TruncatedShardError: the bytes are not whole tar members of one
            sample (the error names the offset in the shard).
        DuplicateFieldError: a field occurs twice.
    """
    members = sample_members(chunk, start, offsets, url, inner, ignore_zeros=ignore_zeros)
    return sample_dict(members, url, start, index, inner)


def short_read(url: str, start: int, got: int, end: int) -> TruncatedShardError:
    """The error for a read of the sample in bytes ``start`` to ``end`` that got ``got``
    bytes: the shard is shorter than its offsets say."""
    return TruncatedShardError(
        f"the shard ends at byte {start + got}, inside the sample that ends at byte {end}: "
        "was it changed since its offsets were found?",
        url=url,
        offset=start + got,
    )


def _ends_at_chunk(problem: str) -> None:
    """The chunk of one sample ends without an end-of-archive marker: as it should."""


def sample_dict(
    members: list[tuple[str, bytes]],
    url: str,
    start: int,
    index: int | None = None,
    inner: int | None = None,
) -> dict[str, Any]:
    """The sample the members of one sample's bytes make, as the grouper makes it:
    ``__key__``, ``__url__``, then (if given) ``__index__`` and ``__shardindex__`` (the
    sample's index in the dataset and in its shard), then one entry per field in tar order.

    Raises:
        TarFormatError: the members are not of one sample (the offsets do not fit the shard).
        DuplicateFieldError: a field occurs twice.
    """
    sample: dict[str, Any] | None = None
    key = None
    for name, data in members:
        # split_name, inlined (once per member); meta files and names without a field skipped
        slash = name.rfind("/")
        dot = name.find(".", slash + 1)
        if dot > slash + 1 and "\n" not in name and not name.startswith("__"):
            member_key = name[:dot]
            field_name = name[dot + 1 :].lower()
        else:
            parts = None if name.startswith("__") and is_meta(name) else split_name(name)
            if parts is None:
                continue
            member_key, field_name = parts
        if sample is None:
            key = member_key
            sample = {"__key__": key, "__url__": url}
            if index is not None:
                sample["__index__"] = index
                sample["__shardindex__"] = inner
        elif member_key != key:
            raise TarFormatError(
                f"the bytes of the sample at byte {start} hold keys {key!r} and "
                f"{member_key!r}: the offsets do not fit the shard (was it changed?)",
                url=url,
                offset=start,
            )
        if field_name in sample:
            raise DuplicateFieldError(
                f"duplicate field {field_name!r}", url=url, member=name, key=key, offset=start
            )
        sample[field_name] = data
    if sample is None:
        raise TarFormatError(
            f"no sample's member at byte {start}: the offsets do not fit the shard",
            url=url,
            offset=start,
        )
    return sample


# --- sidecar files ---------------------------------------------------------------------------


def sidecar_path(path: str) -> str:
    """Where the sidecar of the local shard ``path`` goes: beside it.

    >>> sidecar_path("data/train-000.tar")
    'data/train-000.tar.wdsidx'
    """
    return path + SIDECAR_SUFFIX


def write_sidecar(path: str, offsets: ShardOffsets) -> bool:
    """Write ``offsets`` to the sidecar file ``path``, under a temporary name renamed when
    complete. Whether it was written (a read-only directory is not an error: the offsets
    are then kept in memory only). A damaged shard's offsets are not written."""
    if offsets.damage is not None:
        return False
    data = np.asarray(offsets.starts, dtype=np.int64).astype(_ENDIAN).tobytes()
    header = {
        "size": offsets.size,
        "mtime_ns": offsets.mtime_ns,
        "samples": offsets.samples,
        "globals": [[first, records] for first, records in offsets.globals],
        "crc32": zlib.crc32(data),
    }
    text = _MAGIC + json.dumps(header, separators=(",", ":")).encode() + b"\n"
    directory, name = os.path.split(path)
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory or ".")
    except OSError as exn:
        log.debug("cannot write the sidecar %s: %s", path, exn)
        return False
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text)
            out.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as exn:
        log.debug("cannot write the sidecar %s: %s", path, exn)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return False
    return True


def sidecar_limit(size: int) -> int:
    """The most bytes a valid sidecar of a shard of ``size`` bytes can hold: its header line
    and an offset for each 512-byte block the shard has room for."""
    return len(_MAGIC) + _HEADER_LIMIT + 8 * (size // BLOCK + 2)


def read_sidecar(
    path: str, size: int, mtime_ns: int | None, samples: int | None = None
) -> ShardOffsets | None:
    """The offsets in the sidecar file ``path`` if they are valid for a shard of ``size``
    bytes modified at ``mtime_ns`` (None: not checked, for remote shards) holding ``samples``
    samples (None: not checked); else None, and the shard is walked again.

    Nothing in the file is trusted: see the module.
    """
    try:
        with open(path, "rb") as file:
            length = os.fstat(file.fileno()).st_size
            if length > sidecar_limit(size):
                return _invalid(path, f"{length} bytes, more than a shard of {size} can need")
            data = file.read(length)
    except FileNotFoundError:
        return None
    except OSError as exn:
        log.debug("cannot read the sidecar %s: %s", path, exn)
        return None
    return parse_sidecar(data, path, size, mtime_ns, samples)


def parse_sidecar(
    data: bytes, path: str, size: int, mtime_ns: int | None, samples: int | None = None
) -> ShardOffsets | None:
    """:func:`read_sidecar` on the sidecar's bytes ``data`` (read from ``path``, which only
    names it in log lines)."""
    if not data.startswith(_MAGIC):
        return _invalid(path, "not a wdspipes sidecar")
    newline = data.find(b"\n", len(_MAGIC), len(_MAGIC) + _HEADER_LIMIT)
    if newline < 0:
        return _invalid(path, "no header line")
    try:
        header = json.loads(data[len(_MAGIC) : newline])
    except ValueError:
        return _invalid(path, "a header that is not JSON")
    problem = _header_problem(header, size, mtime_ns, samples)
    if problem is not None:
        return _invalid(path, problem)
    body = data[newline + 1 :]
    count = header["samples"]
    if len(body) != 8 * (count + 1) or zlib.crc32(body) != header["crc32"]:
        return _invalid(path, "its offsets are cut short or damaged (length or checksum)")
    starts = np.frombuffer(body, dtype=_ENDIAN)
    steps = np.diff(starts)
    if starts[0] < 0 or starts[-1] > size or np.any(starts % BLOCK) or np.any(steps < BLOCK):
        return _invalid(path, "offsets that are not increasing whole blocks within the shard")
    globals_ = _globals(header["globals"], count)
    if globals_ is None:
        return _invalid(path, "malformed global records")
    native = array("q", starts.astype(np.int64).tobytes())
    return ShardOffsets(native, size, mtime_ns, globals_)


def _header_problem(
    header: object, size: int, mtime_ns: int | None, samples: int | None
) -> str | None:
    """What is wrong with a sidecar's header for this shard, if anything."""
    if not isinstance(header, dict):
        return "a header that is not a JSON object"
    for name in ("size", "samples", "crc32"):
        value = header.get(name)
        if type(value) is not int or value < 0:
            return f"no valid {name!r} in its header"
    recorded = header.get("mtime_ns")
    if recorded is not None and type(recorded) is not int:
        return "no valid 'mtime_ns' in its header"
    if header["size"] != size:
        return f"it was made for {header['size']} bytes, the shard has {size}"
    if mtime_ns is not None and recorded != mtime_ns:
        return "it was made for another modification time of the shard"
    if samples is not None and header["samples"] != samples:
        return f"it lists {header['samples']} samples, the shards' index {samples}"
    if not isinstance(header.get("globals"), list):
        return "no valid 'globals' in its header"
    return None


def _globals(value: list[Any], count: int) -> tuple[tuple[int, dict[str, str]], ...] | None:
    result = []
    last = -1
    for item in value:
        if not (isinstance(item, list) and len(item) == 2):
            return None
        first, records = item
        if type(first) is not int or not last < first < count or not isinstance(records, dict):
            return None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in records.items()):
            return None
        result.append((first, records))
        last = first
    return tuple(result)


def _invalid(path: str, problem: str) -> ShardOffsets | None:
    """None, the sidecar at ``path`` being invalid; says why in the log."""
    log.info("ignoring the sidecar %s (%s): the shard is walked again", path, problem)
    return None
