"""Read-ahead of shards (``wdspipes.io.readahead``), for every kind of URL but HTTP (whose
connections, ranges, drops and aborts are tests/test_http.py's): ``pipe:`` commands, fsspec
stores, local files, and URL schemes of the test's own whose shards open slowly or fail.

What this file proves: samples come in the list's order, as without read-ahead, whatever order
the shards finish opening in; a shard that fails to open, or to read, fails in its turn,
through the handler, after everything before it; stopping early leaves no thread and no
command behind; a shard cache keeps no shard read ahead but not read; states resume as
without read-ahead, and a restored reader (of the same split or another) reads ahead only the
shards it reads; the opener pickles mid-epoch; the statistics and their log line.
"""

from __future__ import annotations

import io
import itertools
import logging
import os
import pickle
import random
import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from shardgen import Shards, make_tar, write_shards
from torch.utils.data.graph_settings import apply_sharding

import wdspipes as wds
from wdspipes.io.items import shard_url
from wdspipes.io.readahead import Lookahead, Prefetcher, ReadAhead, ReadStats, readahead_config
from wdspipes.io.urls import SCHEMES
from wdspipes.read import opener as opener_module
from wdspipes.read.opener import ShardOpener

Sample = dict[str, Any]


def readahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("wdspipes-readahead")]


def keys(samples: Any) -> list[str]:
    return [sample["__key__"] for sample in samples]


def contents(samples: Any) -> list[Sample]:
    return [{k: v for k, v in s.items() if k not in ("__url__", "__local_path__")} for s in samples]


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The URL scheme ``slow:COUNT:PATH``: the file at PATH, opened once COUNT other shards
    have been (a minute at most: read-ahead opens them meanwhile, in the background); and
    ``fail:MESSAGE``, which fails to open at once. Returns what was opened, in order."""
    events: dict[str, list[str]] = {"opened": []}
    opening = threading.Condition()

    def open_slow(url: str) -> io.BufferedReader:
        _, count, path = url.split(":", 2)
        with opening:
            opening.wait_for(lambda: len(events["opened"]) >= int(count), timeout=60)
            events["opened"].append(path)
            opening.notify_all()
        return open(path, "rb")

    def open_fail(url: str) -> io.BufferedReader:
        raise wds.ShardOpenError("cannot open: no such shard", url=url)

    monkeypatch.setitem(SCHEMES, "slow", open_slow)
    monkeypatch.setitem(SCHEMES, "fail", open_fail)
    return events


def test_samples_come_in_list_order_whatever_order_shards_open_in(
    small_shards: Shards, slow: dict[str, list[str]]
) -> None:
    after = [3, 2, 1, 0]  # the last shard opens first, the first last
    urls = [f"slow:{count}:{path}" for count, path in zip(after, small_shards.paths, strict=True)]
    got = contents(wds.WebDataset(urls))
    assert slow["opened"] == small_shards.paths[::-1]  # out of order, in the background
    assert got == contents(wds.WebDataset(small_shards.paths))


def events_of(urls: list[str], handler: Any, readahead: bool) -> list[str]:
    """What reading ``urls`` gives, in order: sample keys, the errors the handler sees (by
    URL), and the error that ends it."""
    events: list[str] = []

    def note(exn: Exception) -> bool:
        events.append(f"handled {getattr(exn, 'url', None)}")
        return bool(handler(exn))

    try:
        for sample in wds.WebDataset(urls, handler=note, readahead=readahead):
            events.append(sample["__key__"])
    except wds.WdsError as exn:
        events.append(f"raised {type(exn).__name__} {exn.url} at {exn.offset}")
    return events


@pytest.mark.parametrize("handler", [wds.reraise_exception, wds.ignore_and_continue])
def test_a_shard_failing_to_open_fails_in_its_turn(
    small_shards: Shards, slow: dict[str, list[str]], handler: Any
) -> None:
    first, third = small_shards.paths[0], small_shards.paths[2]
    urls = [f"slow:1:{first}", "fail:shard-1", f"slow:0:{third}"]
    got = events_of(urls, handler, readahead=True)
    assert slow["opened"][0] == third  # opened ahead, before the first shard
    assert got == events_of([first, "fail:shard-1", third], handler, readahead=False)
    assert got.count("handled fail:shard-1") == 1  # once, after the first shard's samples
    assert got.index("handled fail:shard-1") >= 4
    assert not any(event.startswith("001-") for event in got)


def test_a_read_error_comes_after_the_bytes_before_it(
    small_shards: Shards, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = Path(small_shards.paths[1]).read_bytes()

    class Cut:
        """A shard whose source fails after 2,600 bytes (in its third member's data)."""

        def __init__(self, url: str) -> None:
            self.url, self.left = url, 2600

        def read(self, size: int = -1) -> bytes:
            if not self.left:
                raise wds.ShardError("reading failed: connection lost", url=self.url, offset=2600)
            size = self.left if size < 0 else min(size, self.left)
            start = 2600 - self.left
            self.left -= size
            return data[start : start + size]

        def close(self) -> None:
            pass

    monkeypatch.setitem(SCHEMES, "cut", Cut)
    urls = [small_shards.paths[0], "cut:shard-1", small_shards.paths[2]]
    for handler in (wds.reraise_exception, wds.ignore_and_continue):
        got = events_of(urls, handler, readahead=True)
        assert got == events_of(urls, handler, readahead=False)
        assert got.count("handled cut:shard-1") == 1
    assert got[-1] == "002-00004"


# --- pipe: commands -------------------------------------------------------------------------------


def pipe_urls(paths: list[str], suffix: str = "") -> list[str]:
    return [f"pipe:cat {shlex.quote(path)}{suffix}" for path in paths]


def ended(marks: list[Path]) -> bool:
    """Whether the commands whose shell wrote its process id to each of ``marks`` have ended
    and been reaped."""
    return not any(Path(f"/proc/{mark.read_text().strip()}").exists() for mark in marks)


@pytest.mark.parametrize(
    "config",
    [
        ReadAhead(),
        ReadAhead(max_bytes=0, connections=1, part_size=1000),  # only what the reader needs
        ReadAhead(max_bytes=3000, connections=2, part_size=1000),
    ],
    ids=["defaults", "nothing-ahead", "small-parts"],
)
def test_pipe_shards_read_ahead_equal_those_read_in_turn(
    small_shards: Shards, config: ReadAhead
) -> None:
    urls = pipe_urls(small_shards.paths)
    opener = wds.ShardList(urls).open_shards(readahead=config)
    got = contents(opener.load_tar().group_samples())
    assert got == contents(wds.WebDataset(urls, readahead=False))
    assert opener.read_stats is not None
    assert opener.read_stats.peak_bytes <= config.max_bytes + config.part_size


def wait_for(paths: list[Path]) -> None:
    deadline = time.monotonic() + 60
    while not all(path.exists() for path in paths) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(path.exists() for path in paths)


@pytest.mark.parametrize("stop", ["break", "islice", "exception"])
def test_commands_started_ahead_end_when_the_epoch_stops_early(
    small_shards: Shards, tmp_path: Path, stop: str
) -> None:
    started = [tmp_path / "started-2", tmp_path / "started-3"]
    urls = pipe_urls(small_shards.paths[:2])  # then two whose commands linger, read ahead
    urls += [
        f"{url}; echo $$ > {mark}; sleep 600"
        for url, mark in zip(pipe_urls(small_shards.paths[2:]), started, strict=True)
    ]
    pipe = wds.WebDataset(urls)
    if stop == "break":
        for _ in pipe:
            wait_for(started)
            break
    elif stop == "islice":
        got = list(itertools.islice(map(lambda s: wait_for(started) or s, pipe), 7))
        assert len(got) == 7  # into the second shard
    else:
        with pytest.raises(KeyError):
            for sample in pipe:
                wait_for(started)
                sample["missing"]
    wait_for(started)
    assert readahead_threads() == []
    assert ended(started)


def test_a_failing_command_is_reported_in_its_turn(small_shards: Shards, tmp_path: Path) -> None:
    marks = [tmp_path / f"pid-{n}" for n in range(4)]
    urls = [
        f"{url}; echo $$ > {mark}"
        for url, mark in zip(pipe_urls(small_shards.paths), marks, strict=True)
    ]
    urls[1] += "; exit 3"
    for handler in (wds.reraise_exception, wds.ignore_and_continue):
        got = events_of(urls, handler, readahead=True)
        assert got == events_of(urls, handler, readahead=False)
        assert f"handled {urls[1]}" in got and "001-00003" in got
    assert ended([mark for mark in marks if mark.exists()])


# --- local files, stores, the cache -----------------------------------------------------------


def test_local_files_are_read_ahead_only_when_asked(small_shards: Shards) -> None:
    expected = contents(wds.WebDataset(small_shards.paths))
    got = []
    for sample in wds.WebDataset(small_shards.paths):  # the default: remote URLs only
        assert readahead_threads() == []
        got.append(sample)
    assert contents(got) == expected
    opener = wds.ShardList(small_shards.paths).open_shards(readahead=ReadAhead(local=True))
    streams = iter(opener)
    _, stream = next(streams)
    assert isinstance(stream, io.BufferedReader)  # the file itself: no copy, no thread reads it
    streams.close()  # type: ignore[attr-defined]
    local = wds.WebDataset(small_shards.paths, readahead=ReadAhead(local=True))
    assert contents(local) == expected


def test_store_objects_are_read_in_parallel_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = fsspec.filesystem("memory")
    data = make_tar((f"{i:03d}.bin", os.urandom(30_000)) for i in range(20))  # 620 kB
    requests: list[tuple[int, int]] = []
    cat_file = type(memory).cat_file

    def recording(self: Any, path: str, start: int | None = None, end: int | None = None) -> Any:
        requests.append((start or 0, end or -1))
        return cat_file(self, path, start=start, end=end)

    monkeypatch.setattr(type(memory), "cat_file", recording)
    try:
        memory.pipe("/readahead/big.tar", data)
        config = ReadAhead(part_size=100_000, ranged_above=200_000)
        got = list(wds.WebDataset("memory://readahead/big.tar", readahead=config))
        assert [s["bin"] for s in got] == [data[512 + i * 30_720 :][:30_000] for i in range(20)]
        parts = [(a, min(a + 100_000, len(data))) for a in range(100_000, len(data), 100_000)]
        assert sorted(requests) == parts  # the first part comes through the file itself
    finally:
        memory.rm("/readahead", recursive=True)


def test_a_range_that_fails_to_open_leaves_the_first_part_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A later part's range request fails (the object changed on the server) while the first
    part is still being received from the shard's own stream: the reader gets the first part's
    bytes, then the range's error; the stream the first part reads is not closed under it."""
    data = make_tar((f"{i:03d}.bin", bytes([i]) * 30_000) for i in range(20))  # 620 kB
    range_failed = threading.Event()
    finish = Prefetcher._finish

    def finishing(self: Prefetcher, part: Any, error: BaseException | None) -> None:
        finish(self, part, error)
        if part.ranged:
            range_failed.set()

    class Changing:
        """An object store's stream whose ranges find another version of the object."""

        def __init__(self, url: str) -> None:
            self.url, self.offset, self.closed = url, 0, False

        def split_size(self) -> int:
            return len(data)

        def open_range(self, start: int, end: int) -> Any:
            raise wds.ShardError("shard changed on the server", url=self.url, offset=start)

        def read1(self, size: int) -> bytes:
            range_failed.wait()  # the first part is received after the ranges failed
            if self.closed:
                raise ValueError(f"read of a closed stream: {self.url}")
            chunk = data[self.offset : self.offset + size]
            self.offset += len(chunk)
            return chunk

        read = read1

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(Prefetcher, "_finish", finishing)
    monkeypatch.setitem(SCHEMES, "changing", Changing)
    config = ReadAhead(part_size=100_000, ranged_above=200_000)
    got = []
    with pytest.raises(wds.ShardError, match="shard changed on the server"):
        for sample in wds.WebDataset("changing:big.tar", readahead=config):
            got.append(sample["__key__"])
    assert got == ["000", "001"]  # those the walk ends within the first part


def test_a_cache_keeps_no_shard_read_ahead_but_not_read(
    small_shards: Shards, tmp_path: Path
) -> None:
    done = [tmp_path / f"sent-{n}" for n in range(4)]
    marked = zip(pipe_urls(small_shards.paths), done, strict=True)
    urls = [f"{url} && touch {mark}" for url, mark in marked]
    cache = tmp_path / "cache"
    samples = iter(wds.WebDataset(urls, cache_dir=cache))
    next(samples)
    wait_for(done)  # every shard is sent whole and received, in the background
    samples.close()  # type: ignore[attr-defined]
    assert [p.name for p in cache.iterdir() if not p.name.startswith(".")] == []
    assert contents(wds.WebDataset(urls, cache_dir=cache)) == contents(
        wds.WebDataset(small_shards.paths)
    )
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 4


# --- state, pickling, statistics --------------------------------------------------------------


def test_states_resume_as_without_readahead(tmp_path: Path) -> None:
    paths = write_shards(tmp_path, 6, 20)
    urls = pipe_urls(paths)

    def build() -> Any:
        return wds.WebDataset(urls, shardshuffle=True, seed=5).buffer_shuffle(30, seed=6)

    expected = keys(build())
    for stop in (1, 45, 119):
        pipe = build()
        items = iter(pipe)
        first = [next(items)["__key__"] for _ in range(stop)]
        assert readahead_threads() or stop > 100  # the epoch's shards all taken by then
        state = pickle.loads(pickle.dumps(pipe.state_dict()))
        again = build()
        again.load_state_dict(state)
        assert first + keys(again) == expected
        items.close()  # type: ignore[attr-defined]


UNEVEN = [7, 9, 5, 11, 6, 8, 10, 4, 12, 3]
"""Samples per shard of :func:`uneven_urls`: readers run out apart, and buffers span shards."""


@pytest.fixture(scope="module")
def uneven_urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``pipe:cat`` URLs (read ahead by default) of shards of :data:`UNEVEN` samples."""
    directory = tmp_path_factory.mktemp("uneven")
    paths = []
    for shard, size in enumerate(UNEVEN):
        paths.append(str(directory / f"s-{shard}.tar"))
        with wds.TarWriter(paths[-1]) as tar:
            for index in range(size):
                tar.write({"__key__": f"{shard}-{index:02d}", "cls": index})
    return pipe_urls(paths)


@pytest.fixture
def shards_opened(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The shard URLs the openers open (read ahead or not: ``"opened"``) and hand out to their
    readers (``"handed"``), as they do."""
    events: dict[str, list[str]] = {"opened": [], "handed": []}
    open_item, hand = ShardOpener._open_item, opener_module.opened

    def opening(self: ShardOpener, item: Any) -> Any:
        events["opened"].append(shard_url(item))  # on the read-ahead's threads too
        return open_item(self, item)

    def handing(item: Any, stream: Any) -> Any:
        events["handed"].append(shard_url(item))
        return hand(item, stream)

    monkeypatch.setattr(ShardOpener, "_open_item", opening)
    monkeypatch.setattr(opener_module, "opened", handing)
    return events


@pytest.mark.filterwarnings(r"ignore:\d+ shards for .*:RuntimeWarning")  # an uneven split
@pytest.mark.parametrize(("old", "new"), [(1, 1), (3, 3), (3, 1), (2, 3), (4, 2)])
def test_resumed_readers_read_ahead_only_the_shards_they_read(
    uneven_urls: list[str], shards_opened: dict[str, list[str]], old: int, new: int
) -> None:
    """States of ``old`` readers, each stopped at a random point, restored into ``new``
    readers (merged where the counts differ): every sample once; each reader's read-ahead opens
    only the shards it hands out (none of those the state says were read), of its share of
    the epoch's shards."""

    def reader(readers: int, index: int) -> Any:
        pipe = wds.WebDataset(uneven_urls, shardshuffle=True, seed=1)
        pipe = pipe.buffer_shuffle(12, initial=5, seed=2).map_samples(lambda s: s["__key__"])
        apply_sharding(pipe, readers, index)
        return pipe

    samples = wds.WebDataset(uneven_urls, shardshuffle=True, seed=1)  # the epoch's shards:
    order = list(dict.fromkeys(sample["__url__"] for sample in samples))
    rng = random.Random(f"{old} into {new}")
    for _ in range(3):
        delivered, states = [], []
        for index in range(old):
            pipe = reader(old, index)
            items = iter(pipe)
            delivered += itertools.islice(items, rng.randint(0, 40))
            states.append(pickle.loads(pickle.dumps(pipe.state_dict())))
            items.close()  # type: ignore[attr-defined]
        rest = []
        for index in range(new):
            pipe = reader(new, index)
            pipe.load_state_dict(states[index] if old == new else wds.merge_states(states))
            shards_opened["opened"].clear()
            shards_opened["handed"].clear()
            rest += list(pipe)
            opened, handed = shards_opened["opened"], shards_opened["handed"]
            assert sorted(opened) == sorted(handed), f"reader {index} of {new}"
            assert set(handed) <= set(order[index::new]), f"reader {index} of {new}"
        assert sorted(delivered + rest) == sorted(
            f"{shard}-{index:02d}" for shard, size in enumerate(UNEVEN) for index in range(size)
        )


def test_the_opener_pickles_mid_epoch(small_shards: Shards) -> None:
    opener = wds.ShardList(pipe_urls(small_shards.paths)).open_shards()
    streams = iter(opener)
    next(streams)
    assert readahead_threads()
    copy = pickle.loads(pickle.dumps(opener))  # no thread, lock or stream in its state
    assert copy.readahead == ReadAhead() and copy.read_stats is not None
    streams.close()  # type: ignore[attr-defined]
    assert [url for url, stream in copy] == pipe_urls(small_shards.paths)


def test_statistics_and_their_log_line(
    small_shards: Shards, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "token=hunter2"
    urls = [f"pipe:cat {shlex.quote(p)} # {secret}" for p in small_shards.paths]
    opener = wds.ShardList(urls).open_shards()
    with caplog.at_level(logging.INFO, logger="wdspipes.io.readahead"):
        assert len(list(opener.load_tar().group_samples())) == 20
    stats = opener.read_stats
    assert stats is not None and stats.shards == 4
    assert stats.bytes == sum(os.path.getsize(p) for p in small_shards.paths)
    assert 0 <= stats.waited <= stats.elapsed and stats.computing == stats.elapsed - stats.waited
    lines = [r.getMessage() for r in caplog.records if r.name == "wdspipes.io.readahead"]
    assert len(lines) == 1 and lines[0].startswith("read ahead: 4 shards, ")
    assert "waited for the network" in lines[0] and secret not in caplog.text
    assert wds.ShardList(urls).open_shards(readahead=False).read_stats is None


def test_stats_say_how_the_time_was_spent() -> None:
    stats = ReadStats(shards=2, bytes=50_000_000, waited=1.5, elapsed=2.0)
    assert stats.mb_per_second == 25.0 and stats.computing == 0.5
    assert str(stats) == (
        "2 shards, 50.0 MB in 2.00 s (25.0 MB/s); waited for the network 1.50 s (75%), "
        "the rest 0.50 s"
    )


# --- the parts --------------------------------------------------------------------------------


def test_lookahead_raises_a_source_error_in_its_turn() -> None:
    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise RuntimeError("the shard list broke")

    items = Lookahead(source())
    assert next(items) == 1
    assert items.upcoming(5) == [2]  # the error waits for its turn
    assert next(items) == 2
    with pytest.raises(RuntimeError, match="broke"):
        next(items)
    assert list(items) == []


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_bytes": -1}, "max_bytes must be an int >= 0"),
        ({"connections": 0}, "connections must be an int >= 1"),
        ({"part_size": 0}, "part_size must be an int >= 1"),
        ({"part_size": 10, "ranged_above": 5}, "ranged_above must be None or >= part_size"),
    ],
)
def test_bounds_are_checked(options: dict[str, int], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ReadAhead(**options)


def test_readahead_argument() -> None:
    assert readahead_config(True) == ReadAhead() and readahead_config(False) is None
    config = ReadAhead(max_bytes=1 << 20)
    assert readahead_config(config) is config
    with pytest.raises(TypeError, match="readahead must be a bool or a ReadAhead"):
        readahead_config(64)  # type: ignore[arg-type]
    assert ReadAhead().wants("s3://b/a.tar") and not ReadAhead().wants("/data/a.tar")
    assert ReadAhead(local=True).wants("file:///data/a.tar") and not ReadAhead(local=True).wants(
        "-"
    )
