"""One shard open for reading samples by their number in it: the reader behind
:class:`~wdspipes.read.indexed.IndexedShards`. No torch.

Reading sample ``i`` is one positioned read of its bytes (their offsets:
:mod:`wdspipes.read.offsets`). The first time, the headers in them are parsed; if they are
*plain* (each member a ustar header with its whole name in the name field and its data after
it, the members filling the sample's bytes, each name a key and a field as the grouper splits
it, no field twice), the sample's *layout* is kept, and later reads make the sample from the
bytes read without parsing them: the key and the fields are slices of them. Other samples
(long names, PAX records, meta files among the members) are parsed at every read.

**Layouts** are kept in compact arrays, no Python object per sample, while the shard is open
(:class:`~wdspipes.read.indexed.IndexedShards` keeps ``lru_size`` shards open, and drops a
shard's layouts with it):

- per sample, 8 bytes: its first member, the length in bytes of its key (the start of its
  first member's name) and its number of members (0 until it is read; :data:`UNPLAIN` for a
  sample parsed at every read). They are kept in blocks of 1,024 samples, each made when one
  of its samples is first read, so that opening a shard costs the same at any size;
- per member, 14 bytes: where its data starts in the sample's bytes, its size, its field (a
  number in a table of the shard's field names, at most 4,096 of them), and the adler32 of
  the first 157 bytes of its header (its name, mode, owner, size, modification time,
  checksum and type fields).

So an open shard's layouts take at most 8 bytes a sample (in whole blocks of the samples
read) and 14 bytes a member of the samples read: 36 bytes a sample of two fields.

**Checks.** A read by a layout checks each member's header against the adler32 kept for it,
and that the header has no name prefix. If one differs (the shard changed under the reader,
even rewritten with its size and modification time restored), the sample is parsed instead,
as the first time, and served as its bytes now are or reported as damage; it is parsed at
every read from then on. Data changed under unchanged headers is served as it now is, as a
parse would serve it. The sample's bytes themselves are where the shard's offsets say: those
are checked when the shard is opened (its size and modification time, see
:mod:`wdspipes.read.offsets`).

>>> import io, tarfile
>>> from wdspipes.read.index_file import ShardEntry
>>> from wdspipes.read.offsets import scan_offsets
>>> buf = io.BytesIO()
>>> with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
...     for name in ("a.txt", "a.cls", "b.txt"):
...         info = tarfile.TarInfo(name); info.size = 1
...         tf.addfile(info, io.BytesIO(b"1"))
>>> data = buf.getvalue()
>>> class InMemory:
...     def read_range(self, start, size):
...         return data[start : start + size]
>>> offsets = scan_offsets(io.BytesIO(data), "mem.tar", size=len(data))
>>> reader = ShardReader(ShardEntry("mem.tar", 2), offsets, InMemory())
>>> reader.sample(0, 10)  # parsed, its layout kept
{'__key__': 'a', '__url__': 'mem.tar', '__index__': 10, '__shardindex__': 0, 'txt': b'1', \
'cls': b'1'}
>>> reader.members(0), reader.sample(0, 10)["cls"]  # two members; read again by its layout
(2, b'1')
"""

from __future__ import annotations

import copy
import threading
import zlib
from array import array
from typing import Any, Protocol

from wdspipes.errors import ShardError, WdsError
from wdspipes.read.index_file import ShardEntry
from wdspipes.read.offsets import ShardOffsets, parse_sample, short_read
from wdspipes.read.walk import BLOCK, plain_header

__all__ = ["UNPLAIN", "ShardBytes", "ShardReader", "problem"]

UNPLAIN = 255
"""The number of members of a sample that has no layout: it is parsed at every read."""

_MADE = 157  # a header's bytes that make its member: name to type, checksum included
_PREFIX = 345  # the first byte of the name prefix: 0 (none) in a plain header
_MAX_MEMBERS = UNPLAIN - 1
_MAX_FIELDS = 1 << 12  # field names in one shard's layouts, at most
_MAX_OFFSET = (1 << 32) - 1  # the members' arrays hold 32-bit numbers
_MAX_MEMBER = (1 << 48) - 1  # a sample's code holds its first member in 48 bits
_BLOCK_BITS = 10  # samples' codes are kept in blocks of 1,024, made when one is set
_BLOCK = 1 << _BLOCK_BITS
_NEW = array("Q", bytes(8 * _BLOCK))  # the block of samples not read yet: never written
_UNPLAINS = array("Q", [UNPLAIN]) * _BLOCK  # the block of samples never laid out: never written

Sample = dict[str, Any]
Member = tuple[int, int, str, int]  # data start, size, field, header hash


class ShardBytes(Protocol):
    """Where a shard's bytes are read: a :class:`~wdspipes.io.ranges.RangeReader`."""

    def read_range(self, start: int, size: int) -> bytes: ...


class ShardReader:
    """The samples of one open shard by their number in it (see the module).

    Args:
        entry: the shard's entry in the index.
        offsets: where its samples lie.
        source: where its bytes are read; None for a shard refused as a whole.
        ignore_zeros: read on past zero blocks, as the walk that found the offsets did.
        refusal: the error that refuses every sample of the shard, if it is refused.
    """

    def __init__(
        self,
        entry: ShardEntry,
        offsets: ShardOffsets,
        source: ShardBytes | None,
        ignore_zeros: bool = False,
        refusal: WdsError | None = None,
    ) -> None:
        if source is None and refusal is None:
            raise ValueError("a shard without a source of bytes must be refused")
        self.entry = entry
        self.url = entry.url
        self.dataset = entry.dataset
        self.offsets = offsets
        self.starts = offsets.starts
        self.source = source
        self.read = _unread if source is None else source.read_range
        self.ignore_zeros = ignore_zeros
        self._refusal = refusal
        # the samples that can be read: those before any damage, none of a refused shard
        samples = self.readable = 0 if refusal is not None else offsets.samples
        # layouts: per sample, then per member, and the field names (see the module)
        plain = not offsets.globals  # PAX global records change how plain headers read
        empty = _NEW if plain else _UNPLAINS
        self.codes = [empty] * (samples + _BLOCK - 1 >> _BLOCK_BITS)
        self.begins = array("I")
        self.sizes = array("I")
        self.fields = array("H")
        self.hashes = array("I")
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def refusal(self) -> WdsError:
        """A new copy of the error that refuses this shard's samples."""
        error = self._refusal
        assert error is not None
        fresh = copy.copy(error)  # its class, message and location, and a traceback of its own
        fresh.__cause__ = error.__cause__
        return fresh

    def members(self, inner: int) -> int:
        """The number of members in the layout of sample ``inner``: 0 if it was not read
        yet, :data:`UNPLAIN` if it is parsed at every read."""
        return self.codes[inner >> _BLOCK_BITS][inner & _BLOCK - 1] & 0xFF

    def layout_bytes(self) -> int:
        """Bytes of memory the layouts take (the table of field names aside)."""
        blocks = {id(b): b for b in self.codes if b is not _NEW and b is not _UNPLAINS}
        arrays = (*blocks.values(), self.begins, self.sizes, self.fields, self.hashes)
        return 8 * len(self.codes) + sum(len(a) * a.itemsize for a in arrays)

    def sample(self, inner: int, index: int) -> Sample:
        """Sample ``inner`` of the shard, sample ``index`` of the dataset: one positioned read
        of its bytes, made into the sample by its layout, or parsed.

        Raises:
            WdsError: the sample cannot be read (the error names the URL, the index and the
                byte offset).
        """
        if inner >= self.readable:
            raise self._unreadable(inner, index)
        starts = self.starts
        start = starts[inner]
        size = starts[inner + 1] - start
        try:
            chunk = self.read(start, size)
        except WdsError as exn:
            self._located(exn, inner, index)
            raise
        code = self.codes[inner >> _BLOCK_BITS][inner & _BLOCK - 1]
        count = code & 0xFF
        if count and count != UNPLAIN and len(chunk) == size:
            # By the layout: each member's header checked, its data sliced out.
            length = code >> 8 & 0xFF
            try:
                key = chunk[:length].decode()
            except UnicodeDecodeError:
                key = chunk[:length].decode("utf-8", "surrogateescape")
            sample = {
                "__key__": key,
                "__url__": self.url,
                "__index__": index,
                "__shardindex__": inner,
            }
            begins, sizes, hashes = self.begins, self.sizes, self.hashes
            names, fields, adler32 = self.names, self.fields, zlib.adler32
            first = code >> 16
            for member in range(first, first + count):
                begin = begins[member]
                header = begin - BLOCK
                changed = adler32(chunk[header : header + _MADE]) != hashes[member]
                if changed or chunk[header + _PREFIX]:
                    with self._lock:  # changed under the reader: parsed from now on
                        self._set(inner, UNPLAIN)
                    break
                sample[names[fields[member]]] = chunk[begin : begin + sizes[member]]
            else:
                if self.dataset is not None:
                    sample["__dataset__"] = self.dataset
                return sample
        return self._parsed(chunk, start, size, inner, index)

    def _parsed(self, chunk: bytes, start: int, size: int, inner: int, index: int) -> Sample:
        """The sample in ``chunk`` by a parse of its headers, its layout kept if it is
        plain."""
        url = self.url
        try:
            if len(chunk) != size:
                raise short_read(url, start, len(chunk), start + size)
            learn = not self.codes[inner >> _BLOCK_BITS][inner & _BLOCK - 1]
            sample = self._learned(chunk, inner, index) if learn else None
            if sample is None:
                offsets = self.offsets
                options = {"ignore_zeros": self.ignore_zeros}
                sample = parse_sample(chunk, start, offsets, url, inner, index, **options)
        except WdsError as exn:
            self._located(exn, inner, index)
            raise
        if self.dataset is not None:
            sample["__dataset__"] = self.dataset
        return sample

    def _learned(self, chunk: bytes, inner: int, index: int) -> Sample | None:
        """The sample in ``chunk`` if it is plain, its layout kept; else None, and it is
        parsed at every read."""
        parsed = None if len(chunk) > _MAX_OFFSET else _plain_sample(chunk, inner, self.url, index)
        if parsed is None:
            with self._lock:
                self._set(inner, UNPLAIN)
            return None
        sample, members, key_length = parsed
        with self._lock:  # other threads may learn other samples of the shard meanwhile
            if not self.codes[inner >> _BLOCK_BITS][inner & _BLOCK - 1]:
                first = len(self.begins)
                if self._keep(members):
                    self._set(inner, first << 16 | key_length << 8 | len(members))
                else:
                    self._set(inner, UNPLAIN)
        return sample

    def _set(self, inner: int, code: int) -> None:
        """Set the code of sample ``inner`` (its first member, key length and number of
        members), under the lock."""
        block = self.codes[inner >> _BLOCK_BITS]
        if block is _NEW or block is _UNPLAINS:  # shared: a block of its own first
            block = self.codes[inner >> _BLOCK_BITS] = array("Q", block)
        block[inner & _BLOCK - 1] = code

    def _keep(self, members: list[Member]) -> bool:
        """Append the members' layouts to the arrays, if they fit."""
        ids = self._ids
        new = sorted({field for _, _, field, _ in members if field not in ids})
        if len(ids) + len(new) > _MAX_FIELDS or len(self.begins) + len(members) > _MAX_MEMBER:
            return False
        for field in new:
            ids[field] = len(self.names)
            self.names.append(field)
        for begin, size, field, header_hash in members:
            self.begins.append(begin)
            self.sizes.append(size)
            self.fields.append(ids[field])
            self.hashes.append(header_hash)
        return True

    def _located(self, error: WdsError, inner: int, index: int) -> WdsError:
        error.add_detail(f"reading sample {index} (sample {inner} of the shard)")
        return error

    def _unreadable(self, inner: int, index: int) -> WdsError:
        """The error for a sample of a refused shard, or one past the shard's damage."""
        if self._refusal is not None:
            return self._located(self.refusal, inner, index)
        offsets = self.offsets
        damage = offsets.damage
        if damage is None:  # the index says more samples than the shard has: refused
            return ShardError(f"no sample {inner} in the shard", url=self.url)
        error = type(damage)(
            f"sample {index} (sample {inner} of the shard) cannot be read: the shard is "
            f"damaged at byte {damage.offset} ({problem(damage)}); the {offsets.samples} "
            "samples before the damage can be read",
            url=self.url,
            offset=damage.offset,
        )
        error.__cause__ = damage
        return error


def _plain_sample(
    chunk: bytes, inner: int, url: str, index: int
) -> tuple[Sample, list[Member], int] | None:
    """The sample in ``chunk``, as :func:`~wdspipes.read.offsets.sample_dict` makes it, with
    its members' layouts and the length of its key in bytes, if it is plain (see the
    module); else None."""
    members: list[Member] = []
    sample: Sample | None = None
    key = b""
    position = 0
    length = len(chunk)
    while position < length:
        header = chunk[position : position + BLOCK]
        plain = plain_header(header)
        if plain is None:
            return None
        name, size = plain
        begin = position + BLOCK
        position = begin + size + (-size % BLOCK)
        # split_name on the bytes (dots and slashes are never part of another character)
        dot = name.find(b".", name.rfind(b"/") + 1)
        if position > length or dot <= name.rfind(b"/") + 1 or len(members) == _MAX_MEMBERS:
            return None
        if b"\n" in name or name.startswith(b"__"):
            return None  # a meta file, or a name split otherwise: parsed at every read
        if sample is None:
            key = name[:dot]
            text = key.decode("utf-8", "surrogateescape")
            sample = {"__key__": text, "__url__": url, "__index__": index, "__shardindex__": inner}
        elif name[:dot] != key:
            return None
        field = name[dot + 1 :].decode("utf-8", "surrogateescape").lower()
        if field in sample:
            return None  # a field twice: the parse reports it
        sample[field] = chunk[begin : begin + size]
        members.append((begin, size, field, zlib.adler32(header[:_MADE])))
    if sample is None:
        return None
    return sample, members, len(key)


def problem(error: WdsError) -> str:
    """An error's message without the location prefix."""
    text = str(error)
    prefix = ", ".join(
        part
        for part in (
            error.url,
            None if error.member is None else f"member {error.member!r}",
            None if error.key is None else f"key {error.key!r}",
            None if error.field is None else f"field {error.field!r}",
            None if error.offset is None else f"at byte {error.offset}",
        )
        if part is not None
    )
    return text[len(prefix) + 2 :] if prefix and text.startswith(prefix + ": ") else text


def _unread(start: int, size: int) -> bytes:
    raise AssertionError("read of a refused shard")
