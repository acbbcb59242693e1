"""Samples by index over the shards of an index: the torch-free core of
:class:`~wdspipes.read.random_access.ShardListDataset`.

Sample ``i`` is the ``i``-th in shard order: the shards in the index's order, the samples of
each in the order the streaming readers give them. Reading it is one positioned read of its
bytes (:mod:`wdspipes.read.offsets`), parsed the first time and then made into the sample by
its layout, kept while its shard is open (:mod:`wdspipes.read.shard_reader`):

- **local shards** are opened once (at most ``lru_size`` at a time, the least recently used
  closed first) and read with ``os.pread``; their offsets come from the sidecar beside them,
  or from one walk over the shard, after which the sidecar is written (beside the shard, else
  in the cache directory, else kept in memory only);
- **remote shards** (``http(s)``, ``s3``, ``ais``, ``pipe:`` and the rest) are fetched whole
  into the shard cache (``cache_dir``, bounded by ``cache_size``, least recently used shards
  evicted: :mod:`wdspipes.io.cache`) the first time one of their samples is read, and walked
  for their offsets on the way in; the cache keeps the offsets beside the entry. Readers in
  other processes wait for the one that fetches a shard instead of fetching it too (without
  a request; an error if its fetch writes nothing for ``FETCH_STALL`` seconds). With
  ``ranged=True`` they are not fetched: each sample is one ranged request
  (:mod:`wdspipes.io.ranges`), and the offsets come from a sidecar in the cache directory, a
  sidecar beside the remote shard (``URL.wdsidx``, as ``wdspipes index`` writes it beside local
  shards that are then uploaded), or one streamed walk over the shard.

Each shard is checked against its index entry when first opened: a whole shard whose size or
number of samples differs from the index is an :class:`~wdspipes.errors.IndexMismatchError`
naming both, for every one of its samples; a damaged shard (cut short, corrupt) serves the
samples before the damage, and the others raise the damage's error naming the URL, the
sample's index and the byte offset.

The object pickles without its open files and offsets (a spawned DataLoader worker reads the
sidecars again); forked workers share them, which ``pread`` allows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
import os
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from wdspipes.core.arguments import int_at_least
from wdspipes.errors import (
    IndexMismatchError,
    ShardError,
    ShardOpenError,
    WdsError,
)
from wdspipes.io.cache import (
    DEFAULT_CACHE_SIZE,
    CacheDir,
    CacheWriter,
    Located,
    ShardCache,
    sidecar_of,
)
from wdspipes.io.local import reading_path
from wdspipes.io.pipe import Commands
from wdspipes.io.ranges import LocalRanges, RangeReader, has_ranges, open_ranges
from wdspipes.io.urls import ByteStream, close_quietly, open_url
from wdspipes.read.index_file import Index, ShardEntry, load_index
from wdspipes.read.offsets import (
    SIDECAR_SUFFIX,
    ShardOffsets,
    parse_sidecar,
    read_sidecar,
    scan_offsets,
    sidecar_limit,
    sidecar_path,
    write_sidecar,
)
from wdspipes.read.shard_reader import ShardBytes, ShardReader, problem

__all__ = ["IndexedShards"]

log = logging.getLogger(__name__)

Sample = dict[str, Any]

_FETCHES = 3  # fetches of a shard by one read, when the cache does not keep it


class IndexedShards:
    """The samples of the shards of an index, by their index in shard order (see the module).

    Args:
        index: the path or URL of a wids index file, or a list of ``{"url", "nsamples"}``
            dicts (see :mod:`wdspipes.read.index_file`).
        base: resolve the index's relative URLs against this.
        cache_dir: the shard cache's directory, where remote shards are fetched (required for
            remote shards unless ``ranged``), and where offsets go that cannot be written
            beside their local shard.
        cache_size: bytes the cache holds before the least recently used shards go.
        lru_size: shards kept open at once.
        ranged: read remote shards by ranged requests, one a sample, instead of fetching them.
        sidecars: read and write the offsets' sidecar files (else offsets stay in memory).
        ignore_zeros: read on past zero blocks, as ``load_tar(ignore_zeros=True)``.
        storage_options: options for fsspec's stores (credentials, endpoint).
        commands: which ``pipe:`` URLs of the index run (an index is data: by default none;
            ``"any"`` for an index you trust; see :mod:`wdspipes.io.pipe`).

    Raises:
        ShardIndexError: the index cannot be used.
        ValueError: a bad argument.
    """

    def __init__(
        self,
        index: Index,
        *,
        base: str | None = None,
        cache_dir: CacheDir | None = None,
        cache_size: int | None = DEFAULT_CACHE_SIZE,
        lru_size: int = 10,
        ranged: bool = False,
        sidecars: bool = True,
        ignore_zeros: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        commands: Commands | None = None,
    ) -> None:
        int_at_least("lru_size", lru_size)
        self.entries = load_index(
            index, base=base, storage_options=storage_options, commands=commands
        )
        self.cache = None if cache_dir is None else ShardCache(cache_dir, cache_size)
        self.lru_size = lru_size
        self.ranged = ranged
        self.sidecars = sidecars
        self.ignore_zeros = ignore_zeros
        self.storage_options = storage_options
        self.commands = commands
        self.firsts: list[int] = []  # the index of each shard's first sample
        self.ends: list[int] = []  # and of the sample after its last
        total = 0
        for entry in self.entries:
            self.firsts.append(total)
            total += entry.samples
            self.ends.append(total)
        self.total = total
        self._setup()

    def _open_url(self, url: str) -> ByteStream:
        """``url`` opened to read, with the store's options; a ``pipe:`` URL of the index
        runs only as :attr:`commands` allows commands from the data."""
        return open_url(
            url, storage_options=self.storage_options, commands=self.commands, from_data=True
        )

    def _setup(self) -> None:
        self._open: OrderedDict[int, ShardReader] = OrderedDict()
        self._offsets: dict[int, ShardOffsets] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_open", "_offsets", "_lock"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def __len__(self) -> int:
        return self.total

    def __repr__(self) -> str:
        return f"IndexedShards({len(self.entries)} shards, {len(self)} samples)"

    def __getitem__(self, index: int) -> Sample:
        """Sample ``index``: ``__key__``, ``__url__``, ``__index__`` (``index``),
        ``__shardindex__`` (its number in its shard), then its fields as bytes.

        Raises:
            IndexError: ``index`` is out of range.
            TypeError: ``index`` is not an integer.
            WdsError: the sample cannot be read; the error names the URL, the index and the
                byte offset.
        """
        if type(index) is not int:
            index = operator.index(index)
        total = self.total
        position = index + total if index < 0 else index
        if not 0 <= position < total:
            raise IndexError(f"sample index {index} out of range: the shards hold {total}")
        shard = bisect_right(self.ends, position)
        inner = position - self.firsts[shard]
        try:
            reader = self.shard(shard)
        except WdsError as exn:
            exn.add_detail(f"reading sample {position} (sample {inner} of the shard)")
            raise
        return reader.sample(inner, position)

    def shard(self, number: int) -> ShardReader:
        """The reader of shard ``number``, opened (and checked against its entry) on first
        use; the least recently used beyond ``lru_size`` are closed."""
        opened = self._open
        try:  # a lookup and a move are atomic: no lock to find one
            reader = opened[number]
            opened.move_to_end(number)
            return reader
        except KeyError:  # not open, or let go by another thread meanwhile
            pass
        reader = self._make_reader(number)
        with self._lock:
            self._open[number] = reader
            while len(self._open) > self.lru_size:
                # Closed once no sample read holds it any more (see LocalRanges.__del__).
                self._open.popitem(last=False)
        return reader

    def offsets(self, number: int) -> ShardOffsets:
        """The offsets of shard ``number`` (opening it if needed)."""
        return self.shard(number).offsets

    def close(self) -> None:
        """Close every open shard (they open again when read)."""
        with self._lock:
            self._open.clear()

    def _make_reader(self, number: int) -> ShardReader:
        """A reader of shard ``number``. A shard that cannot be opened or fetched raises (and
        is tried again at the next read); one that is damaged or does not match its entry
        gives a reader that says so for the samples it cannot serve."""
        entry = self.entries[number]
        if reading_path(entry.url) is not None:
            return self._local(entry, number)
        if self.ranged:
            return self._ranged(entry, number)
        return self._cached(entry, number)

    # --- local shards ----------------------------------------------------------------------

    def _local(self, entry: ShardEntry, number: int) -> ShardReader:
        path = reading_path(entry.url) or entry.url
        file = LocalRanges.open(path, entry.url)
        fd = file.fd
        assert fd is not None  # open
        info = os.fstat(fd)
        offsets = self._offsets.get(number)
        if offsets is None or (offsets.size, offsets.mtime_ns) != (info.st_size, info.st_mtime_ns):
            offsets = self._local_offsets(entry, path, fd, info.st_size, info.st_mtime_ns)
            self._offsets[number] = offsets
        return self._checked(entry, offsets, file)

    def _local_offsets(
        self, entry: ShardEntry, path: str | None, fd: int, size: int, mtime_ns: int | None
    ) -> ShardOffsets:
        """The offsets of the local file ``fd``: the shard at ``path``, or the cache's copy
        (``path`` None, ``mtime_ns`` None: not checked). From a valid sidecar, else by a walk
        over the file (then saved in a sidecar)."""
        places = self._sidecar_places(entry.url, path)
        offsets = _from_sidecars(places, size, mtime_ns, entry.samples)
        if offsets is None:
            with os.fdopen(os.dup(fd), "rb") as stream:
                offsets = scan_offsets(
                    stream, entry.url, size=size, mtime_ns=mtime_ns, ignore_zeros=self.ignore_zeros
                )
            _to_sidecars(places, offsets)
        return offsets

    def _sidecar_places(self, url: str, path: str | None) -> list[str]:
        """Where a shard's sidecar may be, in order: beside a local shard (at ``path``), in
        the cache (if it can be made)."""
        if not self.sidecars:
            return []
        places = [] if path is None else [sidecar_path(path)]
        if self.cache is not None:
            with contextlib.suppress(OSError):  # a cache that cannot be made is not used
                self.cache.make_directory()
            places.append(sidecar_of(self.cache.path(url)))
        return places

    # --- remote shards, through the cache --------------------------------------------------

    def _cached(self, entry: ShardEntry, number: int) -> ShardReader:
        if self.cache is None:
            raise ShardOpenError(
                "a remote shard is read by index from a local copy: give cache_dir= (it is "
                "fetched there once), or ranged=True (one request a sample)",
                url=entry.url,
            )
        cache = self.cache
        url = entry.url
        fetched: ShardOffsets | None = None
        located: Located | None = None
        for _ in range(_FETCHES):
            claimed = self._claim(entry, cache)
            if isinstance(claimed, Located):
                located = claimed
                break
            fetched = self._fetch(entry, claimed)
            if fetched.damage is not None:
                return self._damaged_remote(entry, fetched)
            located = cache.open_entry(url)  # committed, unless writing it failed
            if located is not None:
                break
        if located is None:
            raise ShardError(
                f"cannot fetch the shard into the cache {cache.cache_dir} (see the log)", url=url
            )
        # The duplicate holds the entry's shared lock (no eviction) while the reader lives.
        fd = os.dup(located.stream.fileno())  # type: ignore[attr-defined]
        located.close()
        file = LocalRanges(fd, url)
        size = os.fstat(fd).st_size
        offsets = self._offsets.get(number)
        if offsets is None or offsets.size != size:
            offsets = fetched if fetched is not None and fetched.size == size else None
            if offsets is None:
                offsets = self._local_offsets(entry, None, fd, size, None)
            self._offsets[number] = offsets
        return self._checked(entry, offsets, file)

    def _claim(self, entry: ShardEntry, cache: ShardCache) -> Located | CacheWriter:
        """The shard's complete entry in the cache, or the shard opened to be fetched into it
        by this reader; while another reader fetches it, this one waits and requests nothing
        (one download a shard across processes)."""
        while True:
            try:
                stream = cache.claim(entry.url, self._open_url)
                if stream is not None:
                    return stream
                cache.wait(entry.url)
            except WdsError:
                raise
            except OSError as exn:  # a read-only cache, a fetch by another reader stuck
                raise ShardError(
                    f"cannot fetch the shard into the cache {cache.cache_dir}: {exn}",
                    url=entry.url,
                ) from exn

    def _fetch(self, entry: ShardEntry, stream: CacheWriter) -> ShardOffsets:
        """Fetch the shard into the cache through ``stream``, walking it for its offsets on
        the way (a damaged shard is not cached)."""
        counted = _Counted(stream)
        try:
            offsets = scan_offsets(counted, entry.url, size=-1, ignore_zeros=self.ignore_zeros)
        except BaseException:
            stream.discard()
            close_quietly(stream)
            raise
        if offsets.damage is not None:
            stream.discard()  # a shard found bad is not cached
        stream.close()
        offsets = _sized(offsets, counted.count)
        _to_sidecars(self._sidecar_places(entry.url, None), offsets)
        return offsets

    def _damaged_remote(self, entry: ShardEntry, offsets: ShardOffsets) -> ShardReader:
        """A damaged remote shard is not cached: the samples before the damage are read by
        ranges where the URL has them; otherwise none are."""
        if not has_ranges(entry.url):
            return ShardReader(
                entry, offsets, None, self.ignore_zeros, _all_damaged(entry, offsets)
            )
        reader = open_ranges(entry.url, self.storage_options)
        return ShardReader(entry, offsets, reader, self.ignore_zeros)

    # --- remote shards, by ranges ----------------------------------------------------------

    def _ranged(self, entry: ShardEntry, number: int) -> ShardReader:
        reader = open_ranges(entry.url, self.storage_options)
        offsets = self._offsets.get(number)
        if offsets is None:
            offsets = self._ranged_offsets(entry, reader)
            self._offsets[number] = offsets
        return self._checked(entry, offsets, reader)

    def _ranged_offsets(self, entry: ShardEntry, reader: RangeReader) -> ShardOffsets:
        """From a sidecar in the cache or beside the remote shard, else by streaming the
        shard once through a walk (no copy kept)."""
        size = _remote_size(entry, reader)
        places = self._sidecar_places(entry.url, None)
        offsets = _from_sidecars(places, size, None, entry.samples)
        if offsets is not None:
            return offsets
        offsets = self._remote_sidecar(entry, size) if self.sidecars else None
        if offsets is None:
            stream = self._open_url(entry.url)
            counted = _Counted(stream)
            try:
                offsets = scan_offsets(counted, entry.url, size=-1, ignore_zeros=self.ignore_zeros)
            finally:
                close_quietly(stream)
            offsets = _sized(offsets, counted.count)
        _to_sidecars(places, offsets)
        return offsets

    def _remote_sidecar(self, entry: ShardEntry, size: int) -> ShardOffsets | None:
        """The sidecar beside a remote shard (``URL.wdsidx``), if there is a valid one."""
        url = entry.url + SIDECAR_SUFFIX
        limit = sidecar_limit(size)
        try:
            stream = self._open_url(url)
        except WdsError:
            return None
        try:
            data = stream.read(limit + 1)
        except WdsError:
            return None
        finally:
            close_quietly(stream)
        if len(data) > limit:
            return None
        return parse_sidecar(data, url, size, None, entry.samples)

    # --- checks ----------------------------------------------------------------------------

    def _checked(self, entry: ShardEntry, offsets: ShardOffsets, source: ShardBytes) -> ShardReader:
        """A reader of the shard, refusing every sample if it is whole but not what its entry
        says."""
        refusal = None
        if offsets.damage is None:
            problems = []
            if entry.size is not None and offsets.size != entry.size:
                problems.append(f"{offsets.size} bytes where the index says {entry.size}")
            if offsets.samples != entry.samples:
                problems.append(f"{offsets.samples} samples where the index says {entry.samples}")
            if problems:
                refusal = IndexMismatchError(
                    f"the shard does not match its entry in the index: it has "
                    f"{' and '.join(problems)}; its samples are not read (make the index again "
                    "with wdspipes index)",
                    url=entry.url,
                )
        return ShardReader(entry, offsets, source, self.ignore_zeros, refusal)


def _all_damaged(entry: ShardEntry, offsets: ShardOffsets) -> WdsError:
    damage = offsets.damage
    assert damage is not None
    error = type(damage)(
        f"the shard is damaged ({problem(damage)}) and cannot be read by ranges, so it is "
        "not read by index",
        url=entry.url,
        offset=damage.offset,
    )
    error.__cause__ = damage
    return error


class _Counted:
    """A stream that counts the bytes read from it."""

    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self.count = 0

    def read(self, size: int = -1, /) -> bytes:
        data = self.stream.read(size)
        self.count += len(data)
        return data

    def close(self) -> None:
        self.stream.close()


def _sized(offsets: ShardOffsets, size: int) -> ShardOffsets:
    return dataclasses.replace(offsets, size=size)


def _from_sidecars(
    places: list[str], size: int, mtime_ns: int | None, samples: int
) -> ShardOffsets | None:
    """The offsets in the first valid sidecar of ``places``, if there is one."""
    for place in places:
        offsets = read_sidecar(place, size, mtime_ns, samples)
        if offsets is not None:
            return offsets
    return None


def _to_sidecars(places: list[str], offsets: ShardOffsets) -> None:
    """Write ``offsets`` to the first of ``places`` where it can be written."""
    for place in places:
        if write_sidecar(place, offsets):
            return


def _remote_size(entry: ShardEntry, reader: RangeReader) -> int:
    """The size of a remote shard: from a read of its first block."""
    reader.read_range(0, 512)
    size = reader.length()
    if size is None:
        if entry.size is None:
            raise ShardError("the size of the shard is unknown", url=entry.url)
        size = entry.size
    return size
