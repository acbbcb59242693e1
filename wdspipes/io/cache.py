"""A local cache of remote shards: each fetched once, while it is first read.

``open_shards(cache_dir=...)`` (and ``url_opener``, ``tarfile_to_samples`` and ``WebDataset``)
reads remote shards through a :class:`ShardCache`:

- **First read**: the shard streams from its URL to the reader, and every byte read is also
  written to a temporary file in the cache directory (a tee: the first sample does not wait
  for the download). Once the reader has read the shard to its end, the source closed without
  error (a ``pipe:`` command's exit status included) and the tar loader found the shard whole,
  the file is fsynced and renamed to its cache name. A reader that stops early or fails leaves
  nothing behind: the temporary file is removed.
- **Later reads**, by this or any other process, open the cached file and make no request.
- **Names** derive from the whole URL, ``<16 hex digits of its sha256>-<its basename>``, so two
  URLs with one basename in different folders never share an entry (webdataset issue #471).
- **Validation**: an entry is written only by rename, next to a small ``.<name>.meta`` file
  recording its URL (without its secrets: see :func:`~wdspipes.redaction.redact`), the sha256
  of the whole URL and its size, readable by its owner only; it is used only if they agree
  with the URL and the file. Anything else (a truncated file, a missing meta file) is removed
  and fetched again. Temporary files are created exclusively (never through a link planted
  under their name: :func:`~wdspipes.io.atomic.create_new`).
- **Bounded size**: after a shard is added, the least recently used entries (by the time of
  their last use, kept as the file's mtime) are removed until the cache holds at most
  ``cache_size`` bytes. An entry being read (a reader holds a shared ``flock`` on it) or
  fetched is skipped, and so is the entry just added: one shard larger than the whole cache
  is kept.
- **Several readers** (DataLoader workers, processes, machines sharing a POSIX file system
  with working ``flock``): the first to miss an entry takes its lock (``.<name>.lock``) and
  fetches it; the other streaming readers (:meth:`ShardCache.open`) do not wait, they read
  the shard from its URL without writing, as if there were no cache. Every reader gets every
  sample of the shard once; the entry is written once. Readers that need the local copy
  (random access) make no request instead: :meth:`ShardCache.claim` fetches only under the
  lock, and :meth:`ShardCache.wait` waits for the holder to let go of it (its entry committed,
  its fetch given up, or its process dead), so a shard is downloaded once across processes.

Local paths, ``file:`` URLs and URLs naming an existing file are not cached (they are local
already) and ``-`` (standard input, readable once) is not either. ``pipe:`` URLs are cached
like any remote URL, keyed by the whole command, as webdataset does. Locks use
``fcntl.flock``: Linux and other POSIX systems.

Every opened stream has a ``local_path`` attribute: the cache file (the name it gets once
complete, while it is being fetched, or fetched by another reader), or for local shards the
file's own path; None for standard input. Samples carry it as ``__local_path__``.

>>> entry_name("https://host/train/shard-000.tar")
'3ae141922bc8ee8a-shard-000.tar'
>>> entry_name("https://host/val/shard-000.tar")
'999d0bec1dd6ac99-shard-000.tar'
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

from wdspipes.io.atomic import create_new
from wdspipes.io.local import BUFFER_SIZE, ByteStream, ClosingStream, reading_path
from wdspipes.redaction import RedactedOptions, redact

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "FETCH_STALL",
    "CacheDir",
    "CacheWriter",
    "Located",
    "ShardCache",
    "StorageOptions",
    "discard_entry",
    "entry_name",
    "opener_options",
    "sidecar_of",
]

log = logging.getLogger(__name__)

DEFAULT_CACHE_SIZE = 10 * 10**9
"""Bytes a cache holds by default (10 GB) before the least recently used shards are removed."""

CacheDir = str | os.PathLike[str]
"""A cache directory: a path."""
StorageOptions = Mapping[str, Any]
"""Options for a URL's store, passed to ``open_url(url, storage_options=...)``."""

_DIGITS = 16  # hex digits of the URL's sha256 in an entry name: 64 bits
_ENTRY = re.compile(rf"[0-9a-f]{{{_DIGITS}}}-")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_STALE = re.compile(rf"\.([0-9a-f]{{{_DIGITS}}}-.*)\.tmp(-[a-z0-9]{{8}})?")  # an entry's temporary
_WRITE_BUFFER = 1 << 18
_POLL = 0.05  # seconds between looks at an entry another reader is fetching

FETCH_STALL = 600.0
"""Seconds :meth:`ShardCache.wait` waits for another reader's fetch that writes nothing to its
temporary file, before it gives up; read at each wait."""


def entry_name(url: str) -> str:
    """The cache file name of ``url``: 16 hex digits of the URL's sha256 and its basename
    (made safe for a file name, at most 80 characters), for people reading the directory.

    >>> entry_name("pipe:curl -s 'https://h/d/b.tar?x=1'")[16:]
    '-b.tar'
    >>> entry_name("s3://b/a&b.tar")[16:]
    '-a_b.tar'
    """
    digest = hashlib.sha256(url.encode("utf-8", "surrogateescape")).hexdigest()[:_DIGITS]
    tail = re.split(r"[\s/]+", url.strip().rstrip("/"))[-1].split("?", 1)[0]
    readable = _UNSAFE.sub("_", tail).strip("_")[-80:].lstrip(".")
    return f"{digest}-{readable or 'shard'}"


class ShardCache:
    """A directory of cached shards with a size bound (see the module documentation).

    Plain data (the directory and the bound), so it pickles with the opener that holds it.

    Args:
        cache_dir: the directory, created when first used. Give the cache a directory of its
            own; files not named like cache entries are left alone.
        cache_size: the bound in bytes, or None for no bound.

    Raises:
        TypeError, ValueError: a bad ``cache_dir`` or ``cache_size``.
    """

    def __init__(self, cache_dir: CacheDir, cache_size: int | None = DEFAULT_CACHE_SIZE) -> None:
        if not isinstance(cache_dir, str | os.PathLike):
            raise TypeError(f"cache_dir must be a path, got {type(cache_dir).__name__}")
        if cache_size is not None and (
            not isinstance(cache_size, int) or isinstance(cache_size, bool) or cache_size < 0
        ):
            raise ValueError(f"cache_size must be bytes >= 0 or None, got {cache_size!r}")
        self.cache_dir = os.fspath(cache_dir)
        self.cache_size = cache_size

    def __repr__(self) -> str:
        return f"ShardCache({self.cache_dir!r}, cache_size={self.cache_size!r})"

    def make_directory(self) -> None:
        """Create the cache directory if it does not exist.

        Raises:
            OSError: it cannot be made.
        """
        os.makedirs(self.cache_dir, exist_ok=True)

    def path(self, url: str) -> str:
        """Where the entry of ``url`` is, or will be."""
        return os.path.join(self.cache_dir, entry_name(url))

    def open(self, url: str, open_url: Callable[[str], ByteStream]) -> ByteStream:
        """Open ``url``: the cached copy if there is a valid one, else through ``open_url``
        (teeing into the cache if no other reader is fetching it right now).

        Raises:
            Exception: whatever ``open_url`` raises.
            OSError: the cache directory cannot be made.
        """
        if url == "-":
            return open_url(url)
        if reading_path(url) is not None:
            stream = open_url(url)
            name = getattr(stream, "name", None)
            return Located(stream, name if isinstance(name, str) else None)
        os.makedirs(self.cache_dir, exist_ok=True)
        path = self.path(url)
        cached = _open_entry(path, url)
        if cached is not None:
            return cached
        try:
            lock = _try_lock(_aux(path, "lock"))
        except OSError as exn:  # a read-only cache, say: read the shard without caching it
            shown = redact(url)
            log.warning("cannot lock cache entry %s (%s): reading %s uncached", path, exn, shown)
            lock = None
        if lock is None:  # another reader is fetching it: read it ourselves, without writing
            return Located(open_url(url), path)
        return self._fetch(url, path, lock, open_url)

    def claim(
        self, url: str, open_url: Callable[[str], ByteStream]
    ) -> Located | CacheWriter | None:
        """The complete entry of ``url``; else, if this reader takes the entry's lock, ``url``
        opened through ``open_url`` and written to the cache as it is read; else None, and
        nothing requested: another reader is fetching it (:meth:`wait` for it). For readers
        that need the local copy, so that a shard is downloaded once across processes.

        Raises:
            OSError: the cache directory cannot be made, or the lock cannot be taken (a
                read-only cache).
            Exception: whatever ``open_url`` raises.
        """
        os.makedirs(self.cache_dir, exist_ok=True)
        path = self.path(url)
        cached = _open_entry(path, url)
        if cached is not None:
            return cached
        lock = _try_lock(_aux(path, "lock"))
        if lock is None:
            return None
        return self._fetch(url, path, lock, open_url)

    def _fetch(
        self, url: str, path: str, lock: int, open_url: Callable[[str], ByteStream]
    ) -> Located | CacheWriter:
        """With the entry's lock held: the entry if it was completed meanwhile, else ``url``
        opened and teed into the cache (a bad entry removed first)."""
        try:
            cached = _open_entry(path, url)  # completed since we looked, or still bad
            if cached is not None:
                _unlock(lock, _aux(path, "lock"))
                return cached
            _remove_entry(path)
            source = open_url(url)
        except BaseException:
            _unlock(lock, _aux(path, "lock"))
            raise
        return CacheWriter(source, url, path, lock, self)

    def wait(self, url: str, stall: float | None = None) -> None:
        """Return once no reader fetches ``url`` into the cache (holds its entry's lock): its
        entry committed, its fetch given up, or its process dead (the system lets go of a
        dead process's lock). Looks every 50 ms, without taking the lock from a fetcher.

        Raises:
            TimeoutError: the fetch wrote nothing for ``stall`` seconds (default
                :data:`FETCH_STALL`).
            OSError: the lock file cannot be read.
        """
        stall = FETCH_STALL if stall is None else stall
        path = self.path(url)
        lock_path = _aux(path, "lock")
        if not _held(lock_path):
            return
        written, since = _written(lock_path), time.monotonic()
        while True:
            time.sleep(_POLL)
            if not _held(lock_path):
                return
            now, progress = time.monotonic(), _written(lock_path)
            if progress != written:
                written, since = progress, now
            elif now - since >= stall:
                raise TimeoutError(
                    f"another reader has been fetching it into {path} without progress for "
                    f"{stall:g} s"
                )

    def open_entry(self, url: str) -> Located | None:
        """The complete entry of ``url``, opened and marked as used, or None. Until it is
        closed its reader holds a shared lock on it, so that it is not evicted meanwhile."""
        return _open_entry(self.path(url), url)

    def evict(self, keep: str | None = None) -> None:
        """Remove least recently used entries until the cache holds ``cache_size`` bytes at
        most; entries being read or fetched, and ``keep``, stay."""
        if self.cache_size is None:
            return
        entries, total = self._entries()
        for _, name, size in sorted(entries):
            if total <= self.cache_size:
                return
            path = os.path.join(self.cache_dir, name)
            if path != keep and _evict_entry(path):
                total -= size

    def _entries(self) -> tuple[list[tuple[int, str, int]], int]:
        """``(last use, name, size)`` of every entry, and their total size."""
        entries = []
        total = 0
        with os.scandir(self.cache_dir) as scan:
            for entry in scan:
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    if not _ENTRY.match(entry.name):
                        if _STALE.fullmatch(entry.name):
                            _remove_stale(entry.path)
                        continue
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                entries.append((info.st_mtime_ns, entry.name, info.st_size))
                total += info.st_size
        return entries, total


class Located(ClosingStream):
    """A stream and the local file it comes from (or goes to). Reads go straight to the
    stream's own bound methods: no cost per read."""

    def __init__(self, stream: ByteStream, local_path: str | None) -> None:
        self.stream = stream
        self.read = stream.read
        self.read1 = getattr(stream, "read1", stream.read)
        self.local_path = local_path

    def close(self) -> None:
        self.stream.close()


class CacheWriter(ClosingStream):
    """A shard read from its URL and written to the cache as it is read (the tee).

    Closing it after the source's end commits the entry: fsync, rename, then eviction. Closing
    it earlier, a source that fails or fails to close, or :meth:`discard`, removes the
    temporary file instead. Either way the entry's lock is released.
    """

    def __init__(
        self, source: ByteStream, url: str, path: str, lock: int, cache: ShardCache
    ) -> None:
        self.url = url
        self.shown = redact(url)  # in log lines
        self.local_path = path
        self.closed = False
        self._source = source
        self._lock = lock
        self._cache = cache
        self._at_end = False
        self._discarded = False
        self._temp: str | None = None
        self._file: BinaryIO | None = None
        try:
            directory, name = os.path.split(path)
            fd, self._temp = create_new(directory, f".{name}.tmp-")
            self._file = os.fdopen(fd, "wb", buffering=_WRITE_BUFFER)
        except OSError as exn:
            self._give_up(exn)
        else:  # where readers waiting for the entry see the fetch progress
            with contextlib.suppress(OSError):
                os.pwrite(lock, os.path.basename(self._temp).encode(), 0)

    def read(self, size: int = -1, /) -> bytes:
        return self._tee(self._source.read(size), size)

    def read1(self, size: int = -1, /) -> bytes:
        """What the source's ``read1`` gives (its ``read`` if it has none; at most 256 KiB if
        ``size`` is negative), teed."""
        size = _WRITE_BUFFER if size < 0 else size
        read1 = getattr(self._source, "read1", self._source.read)
        return self._tee(read1(size), size)

    def _tee(self, data: bytes, size: int) -> bytes:
        """Write ``data``, read for ``size``, to the temporary file; note the end."""
        if data:
            if self._file is not None:
                try:
                    self._file.write(data)
                except OSError as exn:
                    self._give_up(exn)
            if size < 0:
                self._at_end = True
        elif size != 0:
            self._at_end = True
        return data

    def discard(self) -> None:
        """Do not commit what was read: the reader found the shard bad."""
        self._discarded = True

    def close(self) -> None:
        """Close the source (raising its failure, if any) and commit or discard the entry."""
        if self.closed:
            return
        self.closed = True
        try:
            self._source.close()
        except BaseException:
            self._finish(commit=False)
            raise
        self._finish(commit=self._at_end and not self._discarded)

    def _finish(self, commit: bool) -> None:
        lock_path = _aux(self.local_path, "lock")
        try:
            if commit and self._file is not None:
                commit = self._commit(self._file)
                self._file = None
            else:
                commit = False
                self._drop()
        finally:
            _unlock(self._lock, lock_path)
        if commit:
            try:
                self._cache.evict(keep=self.local_path)
            except OSError as exn:
                log.warning("evicting from the shard cache %s failed: %s", self._cache, exn)

    def _commit(self, file: BinaryIO) -> bool:
        """Make the temporary file the entry: data synced first, then the meta file, then the
        data under its name, then the directory. Whether it worked."""
        assert self._temp is not None  # a file was opened
        try:
            file.flush()
            os.fsync(file.fileno())
            size = file.tell()
            file.close()
            _write_meta(self.local_path, _meta(self.url, size))
            os.replace(self._temp, self.local_path)
            now = time.time_ns()
            os.utime(self.local_path, ns=(now, now))
            _fsync_directory(self._cache.cache_dir)
        except OSError as exn:
            log.warning("caching %s as %s failed: %s", self.shown, self.local_path, exn)
            self._drop()
            _remove_entry(self.local_path)
            return False
        return True

    def _drop(self) -> None:
        """Close and remove the temporary file."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        if self._temp is None:
            return
        try:
            os.unlink(self._temp)
        except FileNotFoundError:
            pass
        except OSError as exn:
            log.warning("cannot remove %s: %s", self._temp, exn)

    def _give_up(self, exn: OSError) -> None:
        """Writing failed (a full disk, say): go on reading, without caching."""
        log.warning("caching %s failed, reading on without it: %s", self.shown, exn)
        self._discarded = True
        self._drop()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            self._discarded = True
            try:
                self.close()
            except Exception:  # a finaliser must not raise; the stream was abandoned anyway
                log.debug("closing abandoned %r failed", self.shown, exc_info=True)


def discard_entry(stream: object) -> None:
    """Tell the shard cache not to keep the shard ``stream`` reads (its reader found it bad),
    if ``stream`` is written to the cache: a :class:`CacheWriter`, or a stream that forwards
    ``discard()`` to one (read ahead of it). Nothing for any other stream."""
    discard = getattr(stream, "discard", None)
    if discard is not None:
        discard()


def _aux(path: str, kind: str) -> str:
    """The lock, meta or temporary file of an entry: hidden, never taken for an entry."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{kind}")


def _open_entry(path: str, url: str) -> Located | None:
    """The entry at ``path``, opened and marked as used, if it is complete; else None.

    The reader holds a shared lock on the file until it closes it, so that no one evicts
    it meanwhile. Changes nothing if the entry is bad: that is for the holder of its lock.
    """
    try:
        file = open(path, "rb", buffering=BUFFER_SIZE)  # noqa: SIM115
    except FileNotFoundError:
        return None
    try:
        fd = file.fileno()
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # being evicted this very moment
            file.close()
            return None
        info = os.fstat(fd)
        if info.st_nlink == 0 or _read_meta(path) != _meta(url, info.st_size):
            file.close()
            return None
        now = time.time_ns()
        with contextlib.suppress(OSError):  # a read-only cache still serves its entries
            os.utime(fd, ns=(now, now))
    except BaseException:
        file.close()
        raise
    return Located(file, path)


def sidecar_of(path: str) -> str:
    """The file of the entry at ``path`` that holds its samples' offsets (see
    :mod:`wdspipes.read.offsets`): hidden, removed with the entry."""
    return _aux(path, "offsets")


def _meta(url: str, size: int) -> dict[str, object]:
    """What the meta file of the entry of ``url`` holds: the URL without its secrets, the
    sha256 of the whole URL (that tells one URL from another), and the entry's size."""
    digest = hashlib.sha256(url.encode("utf-8", "surrogateescape")).hexdigest()
    return {"url": redact(url), "sha256": digest, "size": size}


def _write_meta(path: str, meta: dict[str, object]) -> None:
    """Write the meta file of the entry at ``path``, readable by its owner only, synced,
    under its name only once complete."""
    directory, name = os.path.split(_aux(path, "meta"))
    fd, temporary = create_new(directory, f"{name}-", 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(meta, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, os.path.join(directory, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _read_meta(path: str) -> object:
    try:
        with open(_aux(path, "meta"), "rb") as meta:
            return json.loads(meta.read())
    except (OSError, ValueError):
        return None


def _remove_entry(path: str) -> None:
    """Remove an entry's data, meta file and offsets, where they exist."""
    for name in (path, _aux(path, "meta"), sidecar_of(path)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
            if name == path:
                log.info("removed the invalid shard cache entry %s", path)


def _evict_entry(path: str) -> bool:
    """Remove an entry unless someone fetches or reads it; whether it is gone."""
    lock_path = _aux(path, "lock")
    lock = _try_lock(lock_path)
    if lock is None:
        return False
    try:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        else:
            _remove_entry(path)
            log.debug("evicted %s from the shard cache", path)
            return True
        finally:
            os.close(fd)
    finally:
        _unlock(lock, lock_path)


def _remove_stale(temp: str) -> None:
    """Remove a temporary file left by a reader that died, unless its entry is locked."""
    directory, name = os.path.split(temp)
    match = _STALE.fullmatch(name)
    if match is None:
        return
    lock_path = os.path.join(directory, f".{match.group(1)}.lock")
    lock = _try_lock(lock_path)
    if lock is None:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
            log.debug("removed %s, left by a reader that stopped", temp)
    finally:
        _unlock(lock, lock_path)


def _try_lock(path: str) -> int | None:
    """An exclusive lock on the lock file ``path`` (its descriptor), or None if another
    holds it. A lock file is removed by its holder when done, so a lock taken on a file that
    is no longer at ``path`` is let go and taken again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        held = os.fstat(fd)
        if current is not None and (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev):
            return fd
        os.close(fd)


def _held(path: str) -> bool:
    """Whether a reader holds the lock file ``path``: looked at with a shared lock, neither
    creating nor removing the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _written(path: str) -> int | None:
    """The bytes the fetch holding the lock file ``path`` has written to its temporary file
    (whose name it holds), if it can be seen."""
    directory, name = os.path.split(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            temporary = os.read(fd, 256).decode("utf-8", "replace")
        finally:
            os.close(fd)
        if not (temporary.startswith(f"{name.removesuffix('lock')}tmp-") and "/" not in temporary):
            return None
        return os.stat(os.path.join(directory, temporary), follow_symlinks=False).st_size
    except OSError:
        return None


def _unlock(fd: int, path: str) -> None:
    """Remove the lock file, then let go of the lock."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    finally:
        os.close(fd)


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def opener_options(
    cache_dir: CacheDir | None = None,
    cache_size: int | None = DEFAULT_CACHE_SIZE,
    storage_options: StorageOptions | None = None,
    commands: str | None = None,
    readahead: object = True,
) -> dict[str, object]:
    """The cache, store, command and read-ahead keywords of ``ShardOpener`` that differ from
    their defaults, so that a curried stage shows only what was asked for (storage options
    without their values: see :class:`~wdspipes.redaction.RedactedOptions`).

    >>> opener_options(cache_dir="c", storage_options={"secret": "s"}, readahead=False)
    {'cache_dir': 'c', 'storage_options': {'secret': '***'}, 'readahead': False}
    """
    options: dict[str, object] = {}
    if cache_dir is not None:
        options["cache_dir"] = cache_dir
    if cache_size != DEFAULT_CACHE_SIZE:
        options["cache_size"] = cache_size
    if storage_options is not None:
        options["storage_options"] = RedactedOptions(storage_options)
    if commands is not None:
        options["commands"] = commands
    if readahead is not True:
        options["readahead"] = readahead
    return options
