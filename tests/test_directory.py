"""Shards claimed from a directory that producers fill (wdspipes/read/directory.py):
``DirectoryShardList`` and ``claim_shards`` against webdataset 1.0.2's ``DirectoryShardList``
in the cases webdataset's own tests check (oldest or random pick; recycle, keep or unlink;
files added and removed while reading; claims of processes that are gone), each run on both in
directories of their own; then what wdspipes does apart (a dead process's claim goes back to
the queue; brace patterns), waiting for a producer, and workers that share one queue."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from reference import wdsref
from shardgen import make_tar, sample_members
from torch.utils.data.datapipes.iter import IterableWrapper
from workers import two_workers

import wdspipes as wds
from wdspipes.read.directory import ShardClaimer

LIBRARIES = {"ours": wds.DirectoryShardList, "theirs": wdsref.shardlists.DirectoryShardList}


def queue(directory: Path, count: int, start: int = 0) -> str:
    """``count`` empty files ``file{i}.tar`` in ``directory``, each older than the next;
    returns the directory as webdataset takes it, with a trailing slash."""
    directory.mkdir(exist_ok=True)
    for index in range(start, start + count):
        path = directory / f"file{index}.tar"
        path.touch()
        os.utime(path, (index, index))
    return f"{directory}/"


def names(items: Any) -> list[str]:
    """The file names of shard items: ours are paths, webdataset's ``{"url": path}``."""
    return [Path(wds.shard_url(item)).name for item in items]


def left(directory: str, pattern: str = "*.tar") -> list[str]:
    return sorted(path.name for path in Path(directory).glob(pattern))


@pytest.fixture(params=sorted(LIBRARIES))
def library(request: pytest.FixtureRequest) -> Any:
    return LIBRARIES[request.param]


PID = os.getpid()


def test_oldest_first_unlinking_as_webdataset(tmp_path: Path, library: Any) -> None:
    path = queue(tmp_path / "q", 5)
    shards = library(path, pattern="*.tar", select="oldest", mode="unlink", poll=None)
    assert names(itertools.islice(shards, 3)) == [f"file{i}.tar._{PID}_" for i in range(3)]
    assert left(path) == ["file3.tar", "file4.tar"]  # the third is still claimed


def test_random_pick_takes_every_file_as_webdataset(tmp_path: Path, library: Any) -> None:
    path = queue(tmp_path / "q", 5)
    shards = library(path, pattern="*.tar", select="random", mode="unlink", poll=None)
    taken = names(shards)
    assert sorted(taken) == [f"file{i}.tar._{PID}_" for i in range(5)]
    assert left(path, "*") == []


def test_resampling_goes_on_as_webdataset(tmp_path: Path, library: Any) -> None:
    path = queue(tmp_path / "q", 2)
    shards = library(path, pattern="*.tar", select="random", poll=0.01)
    taken = names(itertools.islice(shards, 6))
    assert len(taken) == 6 and set(taken) <= {f"file{i}.tar._{PID}_" for i in range(2)}


def test_files_added_while_reading_are_read_as_webdataset(tmp_path: Path, library: Any) -> None:
    path = queue(tmp_path / "q", 5)
    shards = library(path, pattern="*.tar", select="random", mode="unlink", poll=None)
    first = iter(shards)
    taken = {wds.shard_url(next(first)) for _ in range(3)}
    queue(tmp_path / "q", 5, start=10)
    assert len(left(path)) == 7
    taken |= {wds.shard_url(item) for item in shards}
    assert len(taken) == 10 and left(path) == []


def test_files_removed_while_claimed_end_the_epoch_as_webdataset(
    tmp_path: Path, library: Any
) -> None:
    path = queue(tmp_path / "q", 5)
    shards = library(path, pattern="*.tar", select="random", mode="unlink", poll=None)
    taken = set()
    for _ in range(5):
        taken.add(wds.shard_url(next(iter(shards))))  # each iteration claims one and stops
    assert len(taken) == 5
    for claimed in taken:
        os.remove(claimed)
    with pytest.raises(StopIteration):
        next(iter(shards))


@pytest.mark.parametrize(
    ("mode", "after"),
    [("unlink", []), ("keep", ["file0.tar._done_"]), ("resample", ["file0.tar"])],
)
def test_a_shard_read_is_recycled_as_webdataset(
    tmp_path: Path, library: Any, mode: str, after: list[str]
) -> None:
    path = queue(tmp_path / "q", 1)
    shards = iter(library(path, pattern="*.tar", poll=None, mode=mode))
    claimed = wds.shard_url(next(shards))
    assert Path(claimed).exists() and left(path, "*") == [f"file0.tar._{PID}_"]
    if mode == "resample":
        assert wds.shard_url(next(shards)) == claimed  # put back, and claimed again
        return
    with pytest.raises(StopIteration):
        next(shards)
    assert left(path, "*") == after


def test_claims_of_processes_that_are_gone_are_put_back(tmp_path: Path, library: Any) -> None:
    path = queue(tmp_path / "q", 1)
    shards = library(path, pattern="*.tar", poll=None)
    claimed = wds.shard_url(next(iter(shards)))
    os.rename(claimed, f"{claimed}._99999999_")  # a process that cannot exist
    shards.cleanup_files_without_processes()
    assert left(path, "*") == [f"file0.tar._{PID}_"]


# --- where wdspipes differs on purpose -----------------------------------------------------


@pytest.mark.parametrize("pid", ["0", "99999999999", "9" * 200])
def test_a_claim_no_process_can_have_made_is_put_back(tmp_path: Path, pid: str) -> None:
    """Claim names are written by other processes. webdataset takes ``._0_`` for a live claim
    (``kill(0, 0)`` signals the process group) and stops every reader with an OverflowError on
    an id past the system's range."""
    path = queue(tmp_path / "q", 1)
    shards = wds.DirectoryShardList(path, pattern="*.tar", poll=None)
    claimed = wds.shard_url(next(iter(shards)))
    os.rename(claimed, f"{claimed}._{pid}_")
    shards.cleanup_files_without_processes()
    assert left(path, "*") == [f"file0.tar._{PID}_"]


def test_a_shard_removed_while_claimed_is_left_gone(tmp_path: Path) -> None:
    """webdataset fails with a FileNotFoundError as it recycles a shard removed meanwhile."""
    path = queue(tmp_path / "q", 2)
    shards = iter(wds.DirectoryShardList(path, pattern="*.tar", select="oldest", poll=None))
    os.remove(wds.shard_url(next(shards)))
    assert names([next(shards)]) == [f"file1.tar._{PID}_"]


def test_a_dead_readers_shard_is_read_again_not_removed(tmp_path: Path) -> None:
    """webdataset does with another process's claim what its own mode says: under
    ``unlink`` it removes a shard that process may have read only in part."""
    taken = {}
    for name, library in LIBRARIES.items():
        path = queue(tmp_path / name, 2)
        os.rename(f"{path}file0.tar", f"{path}file0.tar._99999999_")
        shards = library(path, pattern="*.tar", select="oldest", mode="unlink", poll=None)
        taken[name] = names(shards)
    assert taken["ours"] == [f"file1.tar._{PID}_", f"file0.tar._{PID}_"]
    assert taken["theirs"] == [f"file1.tar._{PID}_"]


def test_the_default_pattern_takes_its_alternatives(tmp_path: Path) -> None:
    """``*.{tar,tgz,tar.tgz}``: webdataset's glob reads the braces literally, and finds none."""
    directory = tmp_path / "q"
    directory.mkdir()
    for name in ("a.tar", "b.tgz", "c.txt"):
        (directory / name).touch()
    ours = wds.DirectoryShardList(str(directory), mode="keep", poll=None)
    assert sorted(name.split("._")[0] for name in names(ours)) == ["a.tar", "b.tgz"]
    theirs = wdsref.shardlists.DirectoryShardList(f"{directory}/", mode="keep", poll=None)
    assert list(theirs) == []


def test_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError, match="not a directory"):
        wds.DirectoryShardList(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="mode must be one of resample, keep, unlink"):
        wds.DirectoryShardList(str(tmp_path), mode="move")
    with pytest.raises(ValueError, match="select must be one of random, oldest"):
        IterableWrapper([str(tmp_path)]).claim_shards(select="newest")


def test_a_name_in_the_directory_is_never_a_url_scheme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names are data: a file ``pipe:...`` is a file, whatever directory path is given."""
    directory = tmp_path / "q"
    directory.mkdir()
    (directory / "pipe:touch gotcha.tar").write_bytes(make_tar(sample_members(["a"])))
    monkeypatch.chdir(directory)
    shards = IterableWrapper(["."]).claim_shards(pattern="*.tar", poll=None, mode="keep")
    samples = list(shards.open_shards().load_tar().group_samples())
    assert [sample["__key__"] for sample in samples] == ["a"]
    assert not (directory / "gotcha.tar").exists()
    with pytest.raises(NotADirectoryError):  # "" would make the names the URLs
        list(IterableWrapper([""]).claim_shards(poll=None))


def test_a_reader_waits_for_a_producer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``poll``, an empty queue is looked at again until a shard comes."""
    path = queue(tmp_path / "q", 0)
    shards = iter(wds.DirectoryShardList(path, pattern="*.tar", mode="unlink", poll=0.01))
    looked = threading.Event()
    producer = threading.Thread(target=lambda: looked.wait() and queue(tmp_path / "q", 1))
    real_glob = ShardClaimer._candidates

    def candidates(self: ShardClaimer, directory: str) -> list[str]:
        found = real_glob(self, directory)
        looked.set()
        return found

    monkeypatch.setattr(ShardClaimer, "_candidates", candidates)
    producer.start()
    try:
        assert names([next(shards)]) == [f"file0.tar._{PID}_"]
    finally:
        producer.join()


def test_a_reader_that_waits_in_vain_ends_at_its_timeout(tmp_path: Path) -> None:
    path = queue(tmp_path / "q", 0)
    assert list(wds.DirectoryShardList(path, poll=0.001, timeout=0.01)) == []


@pytest.mark.loaders
def test_workers_share_one_queue_and_read_every_sample_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Two workers take shards from one directory: every sample once, no split needed, and
    no warning that they read every shard (issue 27)."""
    directory = tmp_path / "q"
    directory.mkdir()
    keys = []
    for shard in range(6):
        shard_keys = [f"{shard}-{index}" for index in range(3)]
        (directory / f"s{shard}.tar").write_bytes(make_tar(sample_members(shard_keys)))
        keys += shard_keys
    pipe = wds.DataPipeline(
        wds.DirectoryShardList(str(directory), pattern="*.tar", mode="unlink", poll=None),
        wds.tarfile_to_samples(),
    )
    loader = two_workers(pipe)
    read = [sample["__key__"] for sample in loader]
    assert sorted(read) == sorted(keys)
    assert list(directory.iterdir()) == []
    assert "sharding_filter" not in capfd.readouterr().err
