"""Writing to URLs (``wdspipes/io/sinks.py``): ``open_url(url, "wb")`` for every scheme the
writers take, each complete under its name only once closed where the target allows it, and
the error cases; and what webdataset's ``gopen(url, "wb")`` does with the same URLs and bytes.

S3 (through a local server) is in tests/test_stores.py; the writers on top in
tests/test_writers.py and tests/test_streams.py.
"""

from __future__ import annotations

import gc
import io
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import fsspec
import pytest

import wdspipes as wds
from wdspipes.io import ByteSink, open_url

DATA = b"the bytes of a shard\n" * 1000


def webdataset() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import webdataset as wdsref
    return wdsref


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


# --- Local files ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["path", "file: URL", "pathlib.Path"])
def test_a_local_file_appears_only_when_complete(tmp_path: Path, form: str) -> None:
    path = tmp_path / "out.tar"
    url: str | Path = {"path": str(path), "file: URL": path.as_uri(), "pathlib.Path": path}[form]
    sink = open_url(url, "wb")
    assert sink.atomic
    sink.write(DATA[:10])
    sink.flush()
    sink.write(DATA[10:])
    (temporary,) = listing(tmp_path)
    assert re.fullmatch(r"\.out\.tar\.partial-[a-z0-9]{8}", temporary)
    sink.close()
    sink.close()  # once is enough
    assert listing(tmp_path) == ["out.tar"] and path.read_bytes() == DATA
    with pytest.raises(ValueError, match="closed"):
        sink.write(b"more")


def test_an_exception_leaves_the_file_there_before(tmp_path: Path) -> None:
    path = tmp_path / "out.tar"
    path.write_bytes(b"before")
    with pytest.raises(RuntimeError, match="the source failed"), open_url(str(path), "wb") as sink:
        sink.write(DATA)
        raise RuntimeError("the source failed")
    assert listing(tmp_path) == ["out.tar"] and path.read_bytes() == b"before"
    sink.abort()  # aborted already: nothing happens


def test_a_pathlib_path_is_always_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_url(Path("pipe:odd name"), "wb") as sink:
        sink.write(b"x")
    assert (tmp_path / "pipe:odd name").read_bytes() == b"x"


def test_a_symbolic_link_is_written_through(tmp_path: Path) -> None:
    (tmp_path / "real.tar").write_bytes(b"old")
    (tmp_path / "link.tar").symlink_to("real.tar")
    with open_url(str(tmp_path / "link.tar"), "wb") as sink:
        sink.write(b"new")
    assert (tmp_path / "link.tar").is_symlink() and (tmp_path / "real.tar").read_bytes() == b"new"


def test_a_device_is_written_directly() -> None:
    with open_url(os.devnull, "wb") as sink:
        assert not sink.atomic
        sink.write(DATA)
    assert os.path.exists(os.devnull) and not os.path.isfile(os.devnull)


def test_a_failing_write_names_the_url() -> None:
    sink = open_url("/dev/full", "wb")  # every write fails: no space left on device
    with pytest.raises(wds.ShardWriteError, match=r"^/dev/full: writing failed: OSError: ") as e:
        sink.write(DATA)
        sink.flush()
    assert isinstance(e.value, OSError) and isinstance(e.value.__cause__, OSError)
    sink.abort()


def test_a_missing_directory_names_it(tmp_path: Path) -> None:
    url = str(tmp_path / "no" / "out.tar")
    with pytest.raises(FileNotFoundError) as caught:  # as webdataset's gopen
        open_url(url, "wb")
    assert isinstance(caught.value, wds.ShardOpenError) and caught.value.url == url
    assert str(caught.value) == f"{url}: cannot write: no directory {str(tmp_path / 'no')!r}"
    with pytest.raises(IsADirectoryError, match="cannot write: is a directory"):
        open_url(str(tmp_path), "wb")
    assert listing(tmp_path) == []


def test_a_sink_dropped_unclosed_is_aborted(tmp_path: Path) -> None:
    sink = open_url(str(tmp_path / "out.tar"), "wb")
    sink.write(DATA)
    with pytest.warns(ResourceWarning, match="dropped without close"):
        del sink
        gc.collect()
    assert listing(tmp_path) == []


@pytest.mark.slow
def test_a_forked_child_leaves_the_parent_s_sink_alone(tmp_path: Path) -> None:
    sink = open_url(str(tmp_path / "out.tar"), "wb")
    sink.write(DATA)
    sink.flush()
    child = os.fork()
    if child == 0:  # a copy of the sink, dropped in the child: not the child's to abort
        del sink
        os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    sink.close()
    assert (tmp_path / "out.tar").read_bytes() == DATA


# --- Standard output --------------------------------------------------------------------------


def capture_stdout(monkeypatch: pytest.MonkeyPatch) -> io.BytesIO:
    """Standard output into a buffer, for the rest of the test (pytest's own capture replaces
    sys.stdout between a fixture and the test)."""
    buffer = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(buffer))
    return buffer


def test_standard_output(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = capture_stdout(monkeypatch)
    sink = open_url("-", "wb")
    assert not sink.atomic
    sink.write(DATA)
    sink.close()
    assert stdout.getvalue() == DATA and not sys.stdout.closed
    with pytest.raises(RuntimeError), open_url("-", "wb") as aborted:
        aborted.write(b"half")
        raise RuntimeError
    assert stdout.getvalue() == DATA + b"half"  # no taking back what went out


# --- Commands ---------------------------------------------------------------------------------


def test_a_command_reads_what_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out.tar"
    with open_url(f"pipe:cat > '{out}'", "wb") as sink:
        assert not sink.atomic
        sink.write(DATA)
    assert out.read_bytes() == DATA


@pytest.mark.parametrize(
    ("command", "status", "problem"),
    [
        ("cat > /dev/null; exit 3", 3, "command exited with status 3"),
        ("kill -9 $$", -9, "command was killed by signal SIGKILL"),
    ],
)
def test_a_failing_command_is_an_error(command: str, status: int, problem: str) -> None:
    url = f"pipe:{command}"
    sink = open_url(url, "wb")
    with pytest.raises(OSError) as caught:  # as webdataset's gopen
        sink.write(DATA)
        sink.close()
    error = caught.value
    assert isinstance(error, wds.CommandError)
    assert (error.command, error.status, error.url) == (command, status, url)
    assert problem in str(error) and str(error).startswith(f"{url}: ")


def test_a_command_that_stops_reading_is_an_error() -> None:
    sink = open_url("pipe:exit 0", "wb")
    with pytest.raises(wds.CommandError, match="stopped reading its input") as caught:
        for _ in range(1000):  # more than a pipe holds
            sink.write(DATA)
        sink.close()
    assert caught.value.status == 0 and caught.value.command == "exit 0"
    sink.abort()


def test_an_aborted_command_does_not_finish(tmp_path: Path) -> None:
    # the command would "publish" once its input ends; it is ended before that
    out, done = tmp_path / "out.tar", tmp_path / "published"
    with pytest.raises(RuntimeError), open_url(f"pipe:cat > '{out}' && touch '{done}'", "wb") as s:
        s.write(DATA)
        s.flush()
        raise RuntimeError("the source failed")
    assert not done.exists()


# --- fsspec filesystems -----------------------------------------------------------------------


@pytest.fixture
def memory() -> Iterator[Any]:
    fs = fsspec.filesystem("memory")
    yield fs
    if fs.exists("/wds-sinks"):
        fs.rm("/wds-sinks", recursive=True)


def test_a_memory_file_appears_only_when_complete(memory: Any) -> None:
    sink = open_url("memory://wds-sinks/a.tar", "wb")
    assert sink.atomic
    sink.write(DATA)
    (temporary,) = memory.ls("/wds-sinks", detail=False)
    assert re.fullmatch(r"/wds-sinks/\.a\.tar\.partial-[a-z0-9]{8}", temporary)
    sink.close()
    assert memory.ls("/wds-sinks", detail=False) == ["/wds-sinks/a.tar"]
    assert memory.cat("/wds-sinks/a.tar") == DATA
    stream = open_url("memory://wds-sinks/a.tar")
    try:
        assert stream.read() == DATA
    finally:
        stream.close()


def test_an_aborted_memory_file_leaves_nothing(memory: Any) -> None:
    memory.pipe("/wds-sinks/a.tar", b"before")
    with pytest.raises(RuntimeError), open_url("memory://wds-sinks/a.tar", "wb") as sink:
        sink.write(DATA)
        raise RuntimeError
    assert memory.ls("/wds-sinks", detail=False) == ["/wds-sinks/a.tar"]
    assert memory.cat("/wds-sinks/a.tar") == b"before"


# --- What cannot be written -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("gopher://host/a.tar", "cannot write: unknown URL scheme 'gopher'; writers take paths"),
        ("https://host/a.tar", "https: URLs are read-only here; .* pipe:curl -sf -T - URL"),
        ("ais://bucket/a.tar", "pipe:ais put - ais://BUCKET/OBJECT"),
    ],
)
def test_an_unknown_or_read_only_scheme_is_an_error(
    url: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=problem) as caught:  # as webdataset's gopen
        open_url(url, "wb")
    assert isinstance(caught.value, wds.ShardOpenError) and caught.value.url == url
    assert listing(tmp_path) == []  # no local file named after the URL


def test_s3_without_s3fs_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "s3fs", None)  # importing it fails
    registry = sys.modules["fsspec.registry"]
    monkeypatch.delitem(registry._registry, "s3", raising=False)  # type: ignore[attr-defined]
    with pytest.raises(wds.ShardOpenError, match=re.escape("pip install 'wdspipes[s3]'")):
        wds.ShardWriter("s3://bucket/x-%06d.tar").write({"__key__": "a", "txt": "x"})
    assert listing(tmp_path) == []  # no ./s3:/bucket/...


def test_other_modes_and_types() -> None:
    with pytest.raises(ValueError, match="mode must be 'rb' or 'wb', got 'ab'"):
        open_url("a.tar", "ab")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="must be a string or a path, got int"):
        open_url(3, "wb")  # type: ignore[call-overload]


# --- The same as webdataset's gopen(url, "wb") ------------------------------------------------

Target = Callable[[Path], tuple[str, Callable[[], bytes]]]
TARGETS: dict[str, Target] = {
    "path": lambda d: (str(d / "o.tar"), (d / "o.tar").read_bytes),
    "file: URL": lambda d: ((d / "o.tar").as_uri(), (d / "o.tar").read_bytes),
    "pipe:": lambda d: (f"pipe:gzip -dc > '{d / 'o.tar'}'", (d / "o.tar").read_bytes),
}


@pytest.mark.parametrize("target", list(TARGETS))
def test_the_same_bytes_as_webdataset_gopen(target: str, tmp_path: Path) -> None:
    import gzip

    data = gzip.compress(DATA, mtime=0) if target == "pipe:" else DATA
    results = []
    for name, opener in [("theirs", webdataset().gopen), ("ours", open_url)]:
        directory = tmp_path / name
        directory.mkdir()
        url, written = TARGETS[target](directory)
        stream: Any = opener(url, "wb")
        stream.write(data)
        stream.close()
        results.append(written())
    assert results[0] == results[1] == DATA


def test_the_same_standard_output_as_webdataset_gopen(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = capture_stdout(monkeypatch)
    theirs = webdataset().gopen("-", "wb")
    theirs.write(DATA)
    theirs.flush()
    with open_url("-", "wb") as ours:
        ours.write(DATA)
    assert stdout.getvalue() == DATA + DATA


@pytest.mark.parametrize(
    ("url", "builtin"),
    [
        ("gopher://host/a.tar", ValueError),
        ("{tmp}/missing/a.tar", FileNotFoundError),
        ("pipe:cat > /dev/null; exit 3", OSError),
    ],
)
def test_the_same_builtin_errors_as_webdataset_gopen(
    url: str, builtin: type[Exception], tmp_path: Path
) -> None:
    url = url.format(tmp=tmp_path)
    for opener in (webdataset().gopen, open_url):
        with pytest.raises(builtin):
            stream: Any = opener(url, "wb")
            stream.write(DATA)
            stream.close()


def test_a_sink_is_a_byte_sink(tmp_path: Path) -> None:
    with open_url(str(tmp_path / "a"), "wb") as sink:
        assert isinstance(sink, ByteSink) and sink.writable()
        assert repr(sink) == f"<_FileSink {str(tmp_path / 'a')!r} open>"
