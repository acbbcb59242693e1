"""Opening shards: schemes, errors that name the path or command, and the promise that every file
handle and child process is closed when a shard ends or iteration is abandoned."""

from __future__ import annotations

import gc
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reference import wdsref
from shardgen import make_tar, sample_members, write_shards

import wdspipes as wds
from wdspipes.io import SCHEMES, open_url
from wdspipes.io.pipe import PipeStream
from wdspipes.pipes import ShardOpener


def child_states() -> dict[int, str]:
    """pid -> state letter of this process's children (Z for a zombie)."""
    states = {}
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except FileNotFoundError:
                continue
            states[int(pid)] = stat.rsplit(")", 1)[1].split()[0]
    return states


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_local_path_and_file_urls(tmp_path: Path) -> None:
    path = tmp_path / "a b.tar"
    path.write_bytes(b"data")
    for url in (str(path), f"file:{path}", f"file://{path}", path.as_uri()):
        stream = open_url(url)
        try:
            assert stream.read() == b"data", url
        finally:
            stream.close()


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.tar"
    with pytest.raises(wds.ShardOpenError) as caught:
        open_url(str(missing))
    assert str(caught.value) == f"{missing}: no such file"
    assert caught.value.url == str(missing)
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    with pytest.raises(wds.ShardOpenError) as caught:
        open_url(f"file://{missing}")
    assert str(caught.value) == f"file://{missing}: no such file ({missing})"


def test_directory_is_not_a_shard(tmp_path: Path) -> None:
    with pytest.raises(wds.ShardOpenError, match="is a directory"):
        open_url(str(tmp_path))


def test_unknown_scheme_lists_the_supported_ones() -> None:
    with pytest.raises(wds.ShardOpenError) as caught:
        open_url("gopher://host/a.tar")
    message = str(caught.value)
    assert "'gopher'" in message and "file:" in message and "pipe:" in message
    assert "stdin" in message


def test_one_letter_prefix_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("c:shard.tar").write_bytes(b"x")
    stream = open_url("c:shard.tar")
    stream.close()


def test_url_must_be_a_string() -> None:
    with pytest.raises(wds.ShardOpenError, match="must be a string"):
        open_url(42)  # type: ignore[arg-type]


@pytest.mark.slow
def test_stdin_is_a_shard(tmp_path: Path) -> None:
    tar = make_tar(sample_members(["0", "1"]))
    script = "import wdspipes as w; print([s['__key__'] for s in w.WebDataset('-')])"
    result = subprocess.run(
        [sys.executable, "-c", script], input=tar, capture_output=True, check=True
    )
    assert result.stdout.decode().strip() == "['0', '1']"


def test_pipe_reads_the_command_output(tmp_path: Path) -> None:
    (path,) = write_shards(tmp_path, 1, 3)
    samples = list(wds.WebDataset(f"pipe:cat {path}"))
    assert [s["__key__"] for s in samples] == ["000-00000", "000-00001", "000-00002"]
    assert all(s["__url__"] == f"pipe:cat {path}" for s in samples)


def stream_kinds(path: Path) -> dict[str, str]:
    return {"path": str(path), "file-url": path.as_uri(), "pipe": f"pipe:cat {path}"}


@pytest.mark.parametrize("kind", ["path", "file-url", "pipe"])
def test_read_streams_are_context_managers_as_webdatasets_gopen(tmp_path: Path, kind: str) -> None:
    """``with open_url(url) as stream``, as webdataset's ``with gopen(url, "rb")``: the same
    bytes, and the stream closed (its command reaped) when the block ends (issue 27)."""
    path = tmp_path / "a.tar"
    path.write_bytes(b"abc" * 1000)
    url = stream_kinds(path)[kind]
    children = set(child_states())
    with open_url(url) as stream:
        ours = stream.read()
    with wdsref.gopen(url, "rb") as theirs:
        assert ours == theirs.read() == path.read_bytes()
    assert stream.closed
    assert set(child_states()) <= children


def test_stdin_is_a_context_manager_that_leaves_stdin_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"abc"))
    monkeypatch.setattr(sys, "stdin", stdin)
    with open_url("-") as stream:
        assert stream.read() == b"abc"
    assert stream.closed and not stdin.closed


def test_a_command_that_fails_is_reported_as_its_with_block_ends(tmp_path: Path) -> None:
    children = set(child_states())
    with pytest.raises(wds.CommandError, match="status 3"), open_url("pipe:echo x; exit 3") as s:
        assert s.read() == b"x\n"
    with pytest.raises(KeyError), open_url("pipe:echo x; exit 3") as s:  # the block's error wins
        s.read()
        raise KeyError("the block's")
    assert set(child_states()) <= children


def test_failing_command_names_command_and_status(tmp_path: Path) -> None:
    url = f"pipe:cat {tmp_path}/missing.tar"
    with pytest.raises(wds.CommandError, match="exited with status 1") as caught:
        list(wds.WebDataset(url))
    error = caught.value
    assert error.url == url and error.status == 1 and error.command == url[5:]
    assert str(error).startswith(url)
    assert isinstance(error.__cause__, wds.TruncatedShardError)  # what the failure did


def test_command_failing_after_a_whole_archive_is_reported(tmp_path: Path) -> None:
    (path,) = write_shards(tmp_path, 1, 2)
    with pytest.raises(wds.CommandError, match="status 3"):
        list(wds.WebDataset(f"pipe:cat {path}; exit 3"))


def test_status_141_is_not_a_failure(tmp_path: Path) -> None:
    (path,) = write_shards(tmp_path, 1, 2)
    assert len(list(wds.WebDataset(f"pipe:cat {path}; exit 141"))) == 2


def test_command_killed_by_a_signal(tmp_path: Path) -> None:
    (path,) = write_shards(tmp_path, 1, 2)
    with pytest.raises(wds.CommandError, match="killed by signal SIGTERM"):
        list(wds.WebDataset(f"pipe:cat {path}; kill -TERM $$"))


def test_early_close_ends_the_command_without_a_zombie(tmp_path: Path) -> None:
    (path,) = write_shards(tmp_path, 1, 50)
    # The command writes the shard, then would block forever: only ending it early finishes.
    stream = PipeStream(f"cat {path}; sleep 600", url="pipe:test")
    assert stream.read(512)
    pid = stream._process.pid
    stream.close()  # before the end: the group is ended, no status is checked
    assert pid not in child_states()


def test_abandoned_iteration_closes_pipes_and_files(tmp_path: Path) -> None:
    paths = write_shards(tmp_path, 3, 400)
    urls = [f"pipe:cat {paths[0]}", paths[1], f"pipe:cat {paths[2]}"]
    fds_before = open_fds()
    for stop_after in (1, 500, 900):
        iterator = iter(wds.WebDataset(urls))
        for _ in range(stop_after):
            next(iterator)
        del iterator
        gc.collect()
        assert open_fds() == fds_before
        assert "Z" not in child_states().values()


@pytest.mark.parametrize("readahead", [False, True], ids=["no-readahead", "readahead"])
def test_opener_closes_each_stream_when_the_next_is_requested(
    monkeypatch: pytest.MonkeyPatch, readahead: bool
) -> None:
    opened: dict[str, Recorder] = {}

    class Recorder:
        def __init__(self, url: str) -> None:
            self.closed = False
            opened[url] = self

        def read(self, size: int = -1) -> bytes:
            return b""

        def close(self) -> None:
            self.closed = True

    monkeypatch.setitem(SCHEMES, "test", Recorder)
    iterator = iter(wds.ShardList("test:{0..2}").open_shards(readahead=readahead))
    next(iterator)  # the consumer never closes what it gets
    next(iterator)
    assert [opened[f"test:{n}"].closed for n in range(2)] == [True, False]
    deadline = time.monotonic() + 30  # read-ahead opens the third shard in the background
    while readahead and len(opened) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(opened) == (3 if readahead else 2)  # the third shard opened ahead, or not yet
    del iterator
    gc.collect()
    assert all(r.closed for r in opened.values()) and len(opened) == (3 if readahead else 2)


def test_open_errors_go_through_the_handler(tmp_path: Path) -> None:
    (path,) = write_shards(tmp_path, 1, 2)
    urls = [str(tmp_path / "missing.tar"), path]
    with pytest.warns(wds.DataWarning, match="no such file"):
        samples = list(wds.WebDataset(urls, handler=wds.warn_and_continue))
    assert len(samples) == 2
    assert list(wds.WebDataset(urls, handler=wds.ignore_and_stop)) == []
    with pytest.raises(wds.ShardOpenError):
        list(wds.WebDataset(urls))


def test_url_opener_stage() -> None:
    stage = wds.url_opener(handler=wds.ignore_and_continue)
    pipe = stage(wds.ShardList(["missing-a.tar", "missing-b.tar"]))
    assert isinstance(pipe, ShardOpener) and list(pipe) == []
