"""The shard cache (``cache_dir=``): each remote shard fetched once, while it is first read.

What this file proves, with ``pipe:`` URLs (always) and ``http://`` URLs from a local server
(when the HTTP opener is registered), counting the requests each shard gets:

- a second epoch makes no request and gives the same samples, which carry ``__local_path__``
  inside the cache directory; a cached file holds exactly the shard's bytes;
- URLs with one basename in different folders are distinct entries;
- an epoch abandoned mid-shard, a failing command and a truncated shard leave no entry and no
  temporary file; the next epoch fetches the shard again;
- a truncated entry, or one without its meta file, is removed and fetched again;
- least recently *used* entries go first (FIFO would keep another), the total stays within
  ``cache_size``, and an entry being read is not evicted;
- a shard another reader is fetching is read from its URL without writing; two DataLoader
  workers racing on one shard deliver its samples once each and leave one valid entry;
- a reader that claims such a shard (random access) opens nothing and waits for its copy;
- local paths are not cached but carry their own path; without a cache no sample changes.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import http.server
import io
import json
import os
import pickle
import re
import shlex
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from shardgen import make_tar, sample_members, write_shards
from torch.utils.data import DataLoader

import wdspipes as wds
import wdspipes.io.cache
from wdspipes.io.cache import (
    CacheWriter,
    Located,
    ShardCache,
    _aux,
    _try_lock,
    _unlock,
    entry_name,
)
from wdspipes.io.urls import SCHEMES
from wdspipes.read import opener

Sample = dict[str, Any]


# --- sources: URLs for shard files, and how many requests each shard got --------------------


class PipeSource:
    """``pipe:`` URLs that count their runs in a file next to the shard."""

    name = "pipe"

    def url(self, path: str) -> str:
        counter = shlex.quote(path + ".count")
        return f"pipe:echo >> {counter}; cat {shlex.quote(path)}"

    def requests(self, path: str) -> int:
        try:
            return Path(path + ".count").read_text().count("\n")
        except FileNotFoundError:
            return 0


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    counts: Counter[str]

    def do_GET(self) -> None:
        self.counts[self.path] += 1
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class HttpSource:
    """A ThreadingHTTPServer on 127.0.0.1 serving ``/``, counting GETs per path."""

    name = "http"

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        handler = type("Handler", (_CountingHandler,), {"counts": self.counts})

        def make(*args: Any) -> _CountingHandler:
            return handler(*args, directory="/")  # type: ignore[no-any-return]

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def requests(self, path: str) -> int:
        return self.counts[path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        from wdspipes.io.http import close_connections

        close_connections()


Source = PipeSource | HttpSource
HTTP = "http" in SCHEMES


@pytest.fixture(
    params=[
        "pipe",
        pytest.param("http", marks=pytest.mark.skipif(not HTTP, reason="no http opener")),
    ]
)
def source(request: pytest.FixtureRequest) -> Iterator[Source]:
    if request.param == "pipe":
        yield PipeSource()
        return
    server = HttpSource()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def paths(tmp_path: Path) -> list[str]:
    """4 shards of 5 samples (about 10 KB each)."""
    (tmp_path / "src").mkdir()
    return write_shards(tmp_path / "src", 4, 5)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def entries(cache: Path) -> list[str]:
    """The entry files of a cache directory, sorted."""
    return sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))


def leftovers(cache: Path) -> list[str]:
    """Temporary and lock files: none may remain once readers are done."""
    names = [p.name for p in cache.iterdir()] if cache.exists() else []
    return sorted(n for n in names if re.search(r"\.(tmp|meta)-|\.tmp$|\.lock$", n))


def read(urls: list[str], cache: Path | None, **options: Any) -> list[Sample]:
    if cache is not None:
        options["cache_dir"] = cache
    return list(wds.WebDataset(urls, **options))


def without_local_path(samples: list[Sample]) -> list[Sample]:
    return [{k: v for k, v in s.items() if k != "__local_path__"} for s in samples]


def content(samples: list[Sample]) -> list[Sample]:
    """Samples without ``__url__`` and ``__local_path__``: what a shard holds, wherever read."""
    return [{k: v for k, v in s.items() if k not in ("__url__", "__local_path__")} for s in samples]


# --- epochs ---------------------------------------------------------------------------------


def functional(urls: list[str], cache: Path) -> Any:
    return wds.ShardList(urls).open_shards(cache_dir=cache).load_tar().group_samples()


def datapipeline(urls: list[str], cache: Path) -> Any:
    return wds.DataPipeline(urls, wds.tarfile_to_samples(cache_dir=str(cache)))


def webdataset(urls: list[str], cache: Path) -> Any:
    return wds.WebDataset(urls, cache_dir=cache)


@pytest.mark.parametrize("build", [webdataset, datapipeline, functional])
def test_second_epoch_reads_the_cache_and_makes_no_request(
    source: Source, paths: list[str], cache: Path, build: Callable[..., Any]
) -> None:
    urls = [source.url(p) for p in paths]
    pipe = build(urls, cache)
    first = list(pipe)
    assert [source.requests(p) for p in paths] == [1, 1, 1, 1]
    second = list(pipe)
    assert [source.requests(p) for p in paths] == [1, 1, 1, 1], "the second epoch fetched"
    assert second == first
    assert content(first) == content(read(paths, None))
    assert without_local_path(first) == read(urls, None)  # only __local_path__ is new
    for path, url in zip(paths, urls, strict=True):
        local = {s["__local_path__"] for s in first if s["__url__"] == url}
        assert local == {str(cache / entry_name(url))}
        assert Path(local.pop()).read_bytes() == Path(path).read_bytes()
    assert len(entries(cache)) == 4
    assert leftovers(cache) == []


def test_cached_streams_are_context_managers(paths: list[str], cache: Path) -> None:
    """A shard fetched into the cache, then read from it, then a local one: each stream
    closes as its ``with`` block ends, and the fetched one is committed then."""
    shard_cache = ShardCache(cache)
    fetched = f"pipe:cat {paths[0]}"
    kinds = []
    for url in (fetched, fetched, paths[1]):
        with shard_cache.open(url, wds.open_url) as stream:
            kinds.append(type(stream).__name__)
            assert stream.read() == Path(url.removeprefix("pipe:cat ")).read_bytes()
        assert entries(cache) == [entry_name(fetched)]
    assert kinds[0] == "CacheWriter" and kinds[2] == "Located"
    assert (cache / entries(cache)[0]).read_bytes() == Path(paths[0]).read_bytes()
    assert not leftovers(cache)


def test_same_basename_in_two_folders_are_two_entries(source: Source, tmp_path: Path) -> None:
    paths = []
    for folder in ("train", "val"):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "shard.tar"
        path.write_bytes(make_tar(sample_members([f"{folder}-0", f"{folder}-1"])))
        paths.append(str(path))
    urls = [source.url(p) for p in paths]
    cache = tmp_path / "cache"
    for _ in range(2):
        for path, url in zip(paths, urls, strict=True):
            samples = read([url], cache)
            assert content(samples) == content(read([path], None))
            assert Path(samples[0]["__local_path__"]).read_bytes() == Path(path).read_bytes()
    assert [source.requests(p) for p in paths] == [1, 1]
    assert len(entries(cache)) == 2
    assert all(name.endswith("-shard.tar") for name in entries(cache))


# --- what must not be cached ----------------------------------------------------------------


def test_abandoned_epoch_leaves_no_entry_and_the_next_fetches_again(
    source: Source, paths: list[str], cache: Path
) -> None:
    url = source.url(paths[0])
    pipe = wds.WebDataset([url], cache_dir=cache)
    for _sample in pipe:
        break  # mid-shard: 4 samples unread
    gc.collect()
    assert entries(cache) == []
    assert leftovers(cache) == []
    assert content(list(pipe)) == content(read(paths[:1], None))
    assert source.requests(paths[0]) == 2
    assert entries(cache) == [entry_name(url)]
    list(pipe)
    assert source.requests(paths[0]) == 2


def test_failing_command_and_truncated_shard_leave_no_entry(paths: list[str], cache: Path) -> None:
    failing = f"pipe:cat {shlex.quote(paths[0])}; exit 3"
    truncated = f"pipe:head -c 2565 {shlex.quote(paths[1])}"  # in the data of member 3
    for url, error in ((failing, wds.CommandError), (truncated, wds.TruncatedShardError)):
        with pytest.raises(error):
            read([url], cache)
        assert entries(cache) == []
        assert leftovers(cache) == []
    whole = PipeSource().url(paths[2])
    samples = read([truncated, whole], cache, handler=wds.ignore_and_continue)
    # sample 0 of the truncated shard (members 1 and 2), then the next shard
    assert content(samples) == content(read([paths[1]], None)[:1] + read([paths[2]], None))
    assert entries(cache) == [entry_name(whole)]


def test_missing_shard_leaves_nothing(source: Source, tmp_path: Path, cache: Path) -> None:
    with pytest.raises(wds.ShardError):  # pipe: an empty output, then cat's status; http: 404
        read([source.url(str(tmp_path / "missing.tar"))], cache)
    assert entries(cache) == []
    assert leftovers(cache) == []


def test_local_shards_are_not_cached_but_carry_their_path(paths: list[str], cache: Path) -> None:
    urls = [paths[0], Path(paths[1]).as_uri()]
    samples = read(urls, cache)
    assert {s["__local_path__"] for s in samples} == set(paths[:2])
    assert read(urls, None) == samples  # WebDataset: local paths with or without a cache
    assert entries(cache) == []
    pipe = wds.DataPipeline(urls, wds.tarfile_to_samples())  # as webdataset's: no local path
    assert list(pipe) == without_local_path(samples)


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "no meta file"])
def test_damaged_entry_is_removed_and_fetched_again(
    source: Source, paths: list[str], cache: Path, damage: str
) -> None:
    url = source.url(paths[0])
    expected = read([url], cache)
    entry = cache / entry_name(url)
    if damage == "truncate":
        with open(entry, "r+b") as file:
            file.truncate(entry.stat().st_size // 2)
    else:
        os.unlink(_aux(str(entry), "meta"))
    assert read([url], cache) == expected
    assert source.requests(paths[0]) == 2
    assert entry.read_bytes() == Path(paths[0]).read_bytes()
    meta = json.loads(Path(_aux(str(entry), "meta")).read_text())
    digest = hashlib.sha256(url.encode()).hexdigest()
    assert meta == {"url": url, "sha256": digest, "size": entry.stat().st_size}
    read([url], cache)
    assert source.requests(paths[0]) == 2
    assert leftovers(cache) == []


# --- bounded size ---------------------------------------------------------------------------


def test_least_recently_used_entries_are_evicted_first(
    source: Source, paths: list[str], cache: Path
) -> None:
    urls = [source.url(p) for p in paths]
    size = Path(paths[0]).stat().st_size
    assert all(Path(p).stat().st_size == size for p in paths)
    bound = size * 5 // 2  # room for two shards

    def cached() -> set[int]:
        names = entries(cache)
        assert sum((cache / n).stat().st_size for n in names) <= bound
        return {i for i, url in enumerate(urls) if entry_name(url) in names}

    read(urls, cache, cache_size=bound)
    assert cached() == {2, 3}
    read([urls[2]], cache, cache_size=bound)  # used: now 3 is the least recently used
    assert source.requests(paths[2]) == 1
    read([urls[0]], cache, cache_size=bound)
    assert cached() == {0, 2}, "evicted by insertion order, not by use"
    assert [source.requests(p) for p in paths] == [2, 1, 1, 1]
    assert leftovers(cache) == []


def test_an_entry_being_read_is_not_evicted(paths: list[str], cache: Path) -> None:
    urls = [PipeSource().url(p) for p in paths]
    size = Path(paths[0]).stat().st_size
    read(urls[:1], cache)
    reading = iter(wds.WebDataset(urls[:1], cache_dir=cache, cache_size=size))
    first = next(reading)  # shard 0 is open, from the cache
    read(urls[1:], cache, cache_size=size)  # each addition would evict shard 0
    assert entry_name(urls[0]) in entries(cache)
    assert [first, *reading] == read(urls[:1], cache)
    read(urls[2:3], cache, cache_size=size)  # read to its end: now it goes
    assert entries(cache) == [entry_name(urls[2])]


@pytest.mark.parametrize("suffix", [".tmp", ".tmp-k3j9x0ab"])  # as older versions named it
def test_temporary_file_left_by_a_killed_reader_is_removed(
    paths: list[str], cache: Path, suffix: str
) -> None:
    urls = [PipeSource().url(p) for p in paths[:2]]
    cache.mkdir()
    stale = cache / f".{entry_name(urls[0])}{suffix}"
    stale.write_bytes(b"half a shard")
    read(urls[1:], cache)  # an eviction pass
    assert not stale.exists()
    assert entries(cache) == [entry_name(urls[1])]


def test_shard_read_on_when_the_cache_cannot_be_written(
    paths: list[str], cache: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = PipeSource().url(paths[0])
    cache.mkdir()

    def full(directory: str, prefix: str, mode: int = 0o666) -> tuple[int, str]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(wdspipes.io.cache, "create_new", full)
    samples = read([url], cache)
    assert content(samples) == content(read(paths[:1], None))
    assert entries(cache) == []
    assert "reading on without it" in caplog.text


def test_cache_arguments_are_checked(cache: Path) -> None:
    with pytest.raises(ValueError, match="cache_size must be bytes >= 0 or None, got -1"):
        wds.WebDataset("a.tar", cache_dir=cache, cache_size=-1)
    with pytest.raises(TypeError, match="cache_dir must be a path, got int"):
        ShardCache(3)  # type: ignore[arg-type]


# --- several readers ------------------------------------------------------------------------


def test_shard_fetched_by_another_reader_is_read_without_writing(
    paths: list[str], cache: Path
) -> None:
    url = PipeSource().url(paths[0])
    cache.mkdir()
    lock_path = _aux(str(cache / entry_name(url)), "lock")
    lock = _try_lock(lock_path)  # as a reader fetching the shard right now holds it
    assert lock is not None
    try:
        samples = read([url], cache)
        assert content(samples) == content(read(paths[:1], None))
        assert {s["__local_path__"] for s in samples} == {str(cache / entry_name(url))}
        assert entries(cache) == []
        assert os.path.exists(lock_path), "the other reader's lock was touched"
    finally:
        _unlock(lock, lock_path)
    assert read([url], cache) == samples
    assert entries(cache) == [entry_name(url)]
    read([url], cache)
    assert PipeSource().requests(paths[0]) == 2  # read through, then cached once


def test_a_claim_of_a_shard_another_reader_fetches_opens_nothing_and_waits_for_its_copy(
    paths: list[str], cache: Path
) -> None:
    url = PipeSource().url(paths[0])  # only the key here: the opener below serves the bytes
    data = Path(paths[0]).read_bytes()
    opened: list[str] = []

    def open_url(url: str) -> io.BytesIO:
        opened.append(url)
        return io.BytesIO(data)

    fetcher = ShardCache(cache).claim(url, open_url)
    assert isinstance(fetcher, CacheWriter)
    other = ShardCache(cache)
    assert other.claim(url, open_url) is None
    claimed: list[object] = []

    def wait_and_claim() -> None:
        other.wait(url)
        claimed.append(other.claim(url, open_url))

    waiter = threading.Thread(target=wait_and_claim)
    waiter.start()
    assert fetcher.read() == data
    fetcher.close()  # commits the entry, then lets go of the lock
    waiter.join(60)
    assert not waiter.is_alive()
    (entry,) = claimed
    assert isinstance(entry, Located) and entry.read() == data
    entry.close()
    assert opened == [url]
    assert entries(cache) == [entry_name(url)] and leftovers(cache) == []
    other.wait(url)  # no one fetches it: at once


def tag_reader(sample: Sample) -> Sample:
    sample["__pid__"] = os.getpid()
    return sample


@pytest.mark.loaders
def test_two_dataloader_workers_racing_on_one_shard(tmp_path: Path, paths: list[str]) -> None:
    """Worker 0 reads shards [S, A], worker 1 [S, B], both starting with S at once. S's command
    waits (up to 30 s) until it has been started twice: so the second reader opens S while the
    first is still fetching it, whichever wins the lock."""
    shared, own_a, own_b = paths[:3]
    counter = shlex.quote(shared + ".count")
    both_started = f"[ $(wc -l < {counter}) -ge 2 ]"
    slow = (
        f"pipe:echo >> {counter}; for i in $(seq 600); do {both_started} && break; sleep 0.05;"
        f" done; cat {shlex.quote(shared)}"
    )
    fast = PipeSource()
    urls = [slow, slow, fast.url(own_a), fast.url(own_b)]
    cache = tmp_path / "cache"
    loader = DataLoader(
        wds.WebDataset(urls, cache_dir=cache).map(tag_reader),
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
    )
    samples = list(loader)
    by_reader: dict[int, list[str]] = {}
    for sample in samples:
        by_reader.setdefault(sample["__pid__"], []).append(sample["__key__"])
    assert len(by_reader) == 2
    shared_keys = [s["__key__"] for s in read([shared], None)]
    own_keys = {p: [s["__key__"] for s in read([p], None)] for p in (own_a, own_b)}
    assert sorted(sorted(keys) for keys in by_reader.values()) == sorted(
        [sorted(shared_keys + own_keys[own_a]), sorted(shared_keys + own_keys[own_b])]
    )
    assert PipeSource().requests(shared) == 2  # both read it from its URL: no waiting
    assert entries(cache) == sorted(entry_name(u) for u in urls[1:])
    entry = cache / entry_name(slow)
    assert entry.read_bytes() == Path(shared).read_bytes()
    assert leftovers(cache) == []
    assert content(read([slow], cache)) == content(read([shared], None))
    assert PipeSource().requests(shared) == 2


def _read_in_process(urls: list[str], cache: str, results: Any) -> None:
    keys = [s["__key__"] for s in read(urls, Path(cache))]
    results.put((os.getpid(), keys))


@pytest.mark.loaders
def test_processes_racing_on_the_same_shards(tmp_path: Path, paths: list[str]) -> None:
    """Three processes read the same four shards at once, each in its own order."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    urls = [PipeSource().url(p) for p in paths]
    expected = sorted(s["__key__"] for s in read(paths, None))
    cache = tmp_path / "cache"
    results = context.Queue()
    orders = [urls, urls[::-1], urls[1:] + urls[:1]]
    processes = [
        context.Process(target=_read_in_process, args=(order, str(cache), results))
        for order in orders
    ]
    for process in processes:
        process.start()
    outputs = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    results.close()
    results.join_thread()
    for _, keys in outputs:
        assert sorted(keys) == expected
    assert entries(cache) == sorted(entry_name(u) for u in urls)
    for path, url in zip(paths, urls, strict=True):
        assert (cache / entry_name(url)).read_bytes() == Path(path).read_bytes()
    assert leftovers(cache) == []
    before = [PipeSource().requests(p) for p in paths]
    read(urls, cache)
    assert [PipeSource().requests(p) for p in paths] == before


# --- plumbing -------------------------------------------------------------------------------


def test_storage_options_reach_open_url_only_when_given(
    paths: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    real_open_url = opener.open_url

    def recording_open_url(url: str, **options: Any) -> Any:
        calls.append(options)
        return real_open_url(url)

    monkeypatch.setattr(opener, "open_url", recording_open_url)
    list(wds.WebDataset(paths[:1]))
    list(wds.WebDataset(paths[:1], storage_options={"anon": True}))
    assert calls == [{}, {"storage_options": {"anon": True}}]


def test_cached_pipeline_pickles(paths: list[str], cache: Path) -> None:
    urls = [PipeSource().url(p) for p in paths[:2]]
    pipe = pickle.loads(pickle.dumps(wds.WebDataset(urls, cache_dir=cache, cache_size=10**6)))
    assert content(list(pipe)) == content(read(paths[:2], None))
    assert len(entries(cache)) == 2
