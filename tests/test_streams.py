"""Stream shards (FORMAT.md section 9): files of concatenated CBOR or msgpack items.

Round trips through CborWriter / MsgpackWriter and the loaders, over several shards and every
local URL form; damaged shards (a truncated last item at every cut, garbage, an item that is
not a map) as errors naming the URL and the item's byte offset; handlers that skip the rest
of a damaged shard and read on; the writers' own errors."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import msgpack
import numpy as np
import pytest
from PIL import Image
from shardgen import kill_when_ready
from torch.utils.data import DataLoader
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes.io import ShardStream

KINDS = {
    "cbor": (wds.CborWriter, wds.cbors_to_samples, "load_cbor", cbor2.dumps),
    "msgpack": (wds.MsgpackWriter, wds.msgpack_to_samples, "load_msgpack", msgpack.packb),
}


def png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((4, 5, 3), value, np.uint8)).save(buffer, format="png")
    return buffer.getvalue()


def make_samples(shard: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "__key__": f"{shard:02d}-{index:03d}",
            "png": png(index),
            "cls": index % 3,
            "txt": f"sample {index}",
            "json": {"a": [1, 2.5, None], "b": "x"},
        }
        for index in range(count)
    ]


def write(kind: str, path: Path | str, samples: list[dict[str, Any]]) -> str:
    writer_class = KINDS[kind][0]
    with writer_class(path) as writer:
        for sample in samples:
            writer.write({**sample, "__url__": "dropped"})
        assert writer.count == len(samples)
    return str(path)


def without_url(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if k != "__url__"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_round_trip_over_shards_and_url_forms(kind: str, tmp_path: Path) -> None:
    shards = [make_samples(shard, 4 + shard) for shard in range(3)]
    paths = [write(kind, tmp_path / f"s{i}.{kind}", s) for i, s in enumerate(shards)]
    urls = [paths[0], f"file:{paths[1]}", f"pipe:cat {paths[2]}"]
    factory, name = KINDS[kind][1], KINDS[kind][2]
    for pipe in (
        wds.DataPipeline(urls, factory()),
        getattr(wds.ShardList(urls).open_shards(), name)(),
    ):
        read = list(pipe)
        assert [without_url(s) for s in read] == [s for shard in shards for s in shard]
        assert [s["__url__"] for s in read] == [
            u for u, s in zip(urls, shards, strict=True) for _ in s
        ]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_samples_decode_with_partial(kind: str, tmp_path: Path) -> None:
    path = write(kind, tmp_path / f"a.{kind}", make_samples(0, 2))
    (first, second) = wds.DataPipeline([path], KINDS[kind][1](), wds.decode("rgb8", partial=True))
    assert first["png"].shape == (4, 5, 3) and int(second["png"][0, 0, 0]) == 1
    assert second["cls"] == 1 and second["txt"] == "sample 1"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_items_without_a_key_are_numbered(kind: str, tmp_path: Path) -> None:
    encode = KINDS[kind][3]
    path = tmp_path / f"a.{kind}"
    path.write_bytes(b"".join(encode({"cls": i}) for i in range(3)))
    read = list(wds.DataPipeline([str(path)], KINDS[kind][1]()))
    assert [s["__key__"] for s in read] == ["000000", "000001", "000002"]


def item_offsets(kind: str, items: list[dict[str, Any]]) -> tuple[bytes, list[int]]:
    encode = KINDS[kind][3]
    chunks = [encode(item) for item in items]
    offsets = [sum(len(c) for c in chunks[:i]) for i in range(len(chunks))]
    return b"".join(chunks), offsets


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_truncated_item_is_an_error_at_its_offset_for_every_cut(
    kind: str, tmp_path: Path
) -> None:
    items = [{"__key__": f"k{i}", "bin": bytes(range(i * 7 % 256)) * 3} for i in range(4)]
    data, offsets = item_offsets(kind, items)
    path = tmp_path / f"cut.{kind}"
    for cut in range(1, len(data)):
        path.write_bytes(data[:cut])
        whole = sum(1 for offset in [*offsets[1:], len(data)] if offset <= cut)
        pipe = wds.DataPipeline([str(path)], KINDS[kind][1]())
        if cut in [*offsets, len(data)]:
            assert len(list(pipe)) == whole
            continue
        read: list[Any] = []
        with pytest.raises(wds.StreamFormatError) as caught:
            read.extend(pipe)
        assert len(read) == whole
        assert caught.value.url == str(path) and caught.value.offset == offsets[whole]
        assert f"at byte {offsets[whole]}: the stream ends inside a" in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "garbage", "problem"),
    [
        ("msgpack", b"\xc1", "not a msgpack item (FormatError)"),
        ("cbor", b"\xff", "not a CBOR item (CBORDecodeError: break code"),
        ("msgpack", msgpack.packb([1, 2]), "a msgpack item must be a map (a sample), got list"),
        ("cbor", cbor2.dumps("text"), "a CBOR item must be a map (a sample), got str"),
        # a map key that is an array or a map: msgpack cannot make it a dict key (TypeError),
        # cbor2 makes it a tuple or a frozendict, which cannot name a field
        ("msgpack", b"\x81\x91\x01\x01", "a msgpack map has a key that is an array or a map"),
        ("msgpack", b"\x81\x80\x01", "a msgpack map has a key that is an array or a map"),
        ("msgpack", b"\x81\xa1a\x81\x91\x01\x01", "a msgpack map has a key that is an array"),
        (
            "cbor",
            b"\xa1\x81\x01\x01",
            "a CBOR item's keys must be strings (field names), not tuple",
        ),
        (
            "cbor",
            b"\xa1\xa0\x01",
            "a CBOR item's keys must be strings (field names), not frozendict",
        ),
        (
            "msgpack",
            b"\x81\x01\x01",
            "a msgpack item's keys must be strings (field names), not int",
        ),
        (
            "cbor",
            b"\xa1\x01\x01",
            "a CBOR item's keys must be strings (field names), not int",
        ),
        # every other way the libraries find bytes malformed
        ("msgpack", b"\x81\xa1\xff\x01", "not a msgpack item (UnicodeDecodeError: 'utf-8' codec"),
        ("msgpack", b"\xd4\xff\x00", "not a msgpack item (ValueError: invalid timestamp data"),
        ("msgpack", b"\xd4\x80\x00", "not a msgpack item (ValueError: code must be 0~127"),
        ("msgpack", b"\xdd\xff\xff\xff\xff", "not a msgpack item (ValueError: 4294967295 exceeds"),
        ("msgpack", b"\x91" * 2000 + b"\x01", "not a msgpack item (StackError)"),
        ("cbor", b"\xa1\x61\xff\x01", "not a CBOR item (CBORDecodeError: error decoding text"),
        ("cbor", b"\x81" * 1000 + b"\x00", "not a CBOR item (CBORDecodeError: maximum container"),
        ("cbor", b"\xc1\x61a", "not a CBOR item (CBORDecodeError: error decoding epoch-form"),
        ("cbor", b"\xd8\x1e\x82\x01\x00", "not a CBOR item (CBORDecodeError: error decoding rat"),
    ],
)
def test_garbage_is_an_error_and_a_handler_skips_the_rest_of_the_shard(
    kind: str, garbage: bytes, problem: str, tmp_path: Path
) -> None:
    good, _ = item_offsets(kind, [{"__key__": "a"}, {"__key__": "b"}])
    bad = tmp_path / f"bad.{kind}"
    bad.write_bytes(good + garbage + good)
    after = write(kind, tmp_path / f"after.{kind}", [{"__key__": "c"}])
    urls = [str(bad), after]
    with pytest.raises(wds.StreamFormatError, match=re.escape(f"at byte {len(good)}: {problem}")):
        list(wds.DataPipeline(urls, KINDS[kind][1]()))
    with pytest.warns(wds.DataWarning, match=problem.split(" (")[0]):
        read = list(wds.DataPipeline(urls, KINDS[kind][1](handler=wds.warn_and_continue)))
    assert [s["__key__"] for s in read] == ["a", "b", "c"]
    stopped = wds.DataPipeline(urls, KINDS[kind][1](handler=wds.ignore_and_stop))
    assert [s["__key__"] for s in stopped] == ["a", "b"]


class _FailingUnpacker:
    """Stands in for msgpack.Unpacker: any bytes fed make ``unpack`` raise ``error``."""

    error: BaseException

    def __init__(self, **options: Any) -> None:
        self.fed = False

    def feed(self, data: bytes) -> None:
        self.fed = True

    def unpack(self) -> Any:
        if self.fed:
            raise self.error
        raise msgpack.OutOfData


class _FailingDecoder:
    """Stands in for cbor2.CBORDecoder: ``decode`` reads a byte, then raises ``error``."""

    error: BaseException

    def __init__(self, fp: Any) -> None:
        self.fp = fp

    def decode(self) -> Any:
        self.fp.read(1)
        raise self.error


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(
    "error",
    [
        TypeError("unhashable type: 'list'"),
        ValueError("bad"),
        OverflowError("too large"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        RecursionError("maximum recursion depth exceeded"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_any_decoding_failure_is_a_located_stream_format_error(
    kind: str, error: BaseException, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the library raises on bytes it cannot decode (the exception types the bytes
    of test_garbage_... provoke, and those a version or a pure-Python build may raise)."""
    path = write(kind, tmp_path / f"a.{kind}", [{"__key__": "a"}])
    if kind == "msgpack":
        monkeypatch.setattr(_FailingUnpacker, "error", error, raising=False)
        monkeypatch.setattr(msgpack, "Unpacker", _FailingUnpacker)
    else:
        monkeypatch.setattr(_FailingDecoder, "error", error, raising=False)
        monkeypatch.setattr(cbor2, "CBORDecoder", _FailingDecoder)
    with pytest.raises(
        wds.StreamFormatError, match=f"at byte 0: .*{type(error).__name__}"
    ) as caught:
        list(wds.DataPipeline([path], KINDS[kind][1]()))
    assert caught.value.url == path and caught.value.offset == 0
    assert caught.value.__cause__ is error


class _BrokenStream(io.RawIOBase):
    """A shard stream whose reads raise ``error`` after ``good`` bytes."""

    def __init__(self, data: bytes, good: int, error: Exception) -> None:
        self.data, self.good, self.error, self.position = data, good, error, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1, /) -> bytes:
        if self.position >= self.good:
            raise self.error
        chunk = self.data[self.position : min(self.good, self.position + max(size, 0))]
        self.position += len(chunk)
        return chunk


@pytest.mark.parametrize(
    ("error", "reported"),
    [
        (ValueError("read of a closed stream"), "mem.cbor: reading failed: read of a closed"),
        (wds.ShardError("connection reset", url="mem.cbor", offset=10), "at byte 10: connection"),
    ],
)
def test_a_failing_read_is_not_taken_for_malformed_cbor(error: Exception, reported: str) -> None:
    """The CBOR decoder reads the stream itself (and cbor2 wraps some errors of the read in a
    CBORDecodeError): a failure of the stream is reported as such, not as bytes that are no
    item."""
    data = cbor2.dumps({"__key__": "a", "bin": bytes(100)})
    stream = ShardStream("mem.cbor", _BrokenStream(data, 10, error))
    with pytest.raises(wds.ShardError, match=re.escape(reported)) as caught:
        list(IterableWrapper([stream], deepcopy=False).load_cbor())
    assert not isinstance(caught.value, wds.StreamFormatError)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_failing_pipe_command_is_reported_with_its_status(kind: str, tmp_path: Path) -> None:
    path = write(kind, tmp_path / f"a.{kind}", make_samples(0, 2))
    with pytest.raises(wds.CommandError, match="command exited with status 3"):
        list(wds.DataPipeline([f"pipe:cat {path}; exit 3"], KINDS[kind][1]()))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_writers_name_the_sample_they_cannot_encode(kind: str, tmp_path: Path) -> None:
    with KINDS[kind][0](tmp_path / f"a.{kind}") as writer:
        with pytest.raises(wds.EncodeError, match="key 'k1': cannot encode the sample as"):
            writer.write({"__key__": "k1", "obj": object()})
        writer.write({"__key__": "k2"})
    with pytest.raises(ValueError, match="closed"):
        writer.write({"__key__": "k3"})
    assert [
        s["__key__"] for s in wds.DataPipeline([str(tmp_path / f"a.{kind}")], KINDS[kind][1]())
    ] == ["k2"]


def test_a_writer_on_a_stream_leaves_it_open() -> None:
    buffer = io.BytesIO()
    with wds.MsgpackWriter(buffer) as writer:
        writer.write({"__key__": "a", "cls": 1})
    assert not buffer.closed
    assert msgpack.unpackb(buffer.getvalue()) == {"__key__": "a", "cls": 1}


KILLED_WRITER = """
import sys, time
import wdspipes as wds

writer = getattr(wds, sys.argv[1])(sys.argv[2])
for index in range(2000):
    writer.write({"__key__": f"{index:05d}", "bin": bytes([index % 256]) * 1000})
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_killed_writer_leaves_nothing_under_the_final_name(kind: str, tmp_path: Path) -> None:
    """A stream cut between two items reads as a shorter valid shard, so the file must not
    appear under its name before it is complete: a writer killed mid-way leaves at most its
    hidden temporary file."""
    path = tmp_path / f"killed.{kind}"
    kill_when_ready(KILLED_WRITER, KINDS[kind][0].__name__, str(path))
    assert not path.exists()
    (partial,) = os.listdir(tmp_path)
    assert re.fullmatch(rf"\.killed\.{kind}\.partial-[a-z0-9]{{8}}", partial)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_exception_in_the_with_block_leaves_nothing_and_an_older_file_intact(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / f"a.{kind}"
    with pytest.raises(RuntimeError, match="mid-way"), KINDS[kind][0](path) as writer:
        writer.write({"__key__": "a", "cls": 1})
        raise RuntimeError("mid-way")
    assert os.listdir(tmp_path) == []
    write(kind, path, make_samples(0, 2))
    with pytest.raises(wds.EncodeError), KINDS[kind][0](path) as writer:
        writer.write({"__key__": "new", "cls": 1})
        writer.write({"__key__": "bad", "obj": object()})
    assert os.listdir(tmp_path) == [path.name]
    read = list(wds.DataPipeline([str(path)], KINDS[kind][1]()))
    assert [without_url(s) for s in read] == make_samples(0, 2)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_writers_write_to_urls(kind: str, tmp_path: Path) -> None:
    import fsspec

    samples = make_samples(0, 3)
    memory = fsspec.filesystem("memory")
    urls = {
        "memory://": f"memory://wds-streams/a.{kind}",
        "pipe:": f"pipe:cat > '{tmp_path}/a.{kind}'",
        "file:": (tmp_path / f"b.{kind}").as_uri(),
    }
    try:
        for target, url in urls.items():
            write(kind, url, samples)
            read_from = {"pipe:": str(tmp_path / f"a.{kind}")}.get(target, url)
            read = list(wds.DataPipeline([read_from], KINDS[kind][1]()))
            assert [without_url(s) for s in read] == samples, target
        with pytest.raises(RuntimeError), KINDS[kind][0](f"memory://wds-streams/c.{kind}") as w:
            w.write(samples[0])
            raise RuntimeError("mid-way")
        assert not memory.exists(f"/wds-streams/c.{kind}")
        assert memory.ls("/wds-streams", detail=False) == [f"/wds-streams/a.{kind}"]
    finally:
        memory.rm("/wds-streams", recursive=True)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_closed_writer_leaves_the_whole_file_and_nothing_else(kind: str, tmp_path: Path) -> None:
    samples = make_samples(0, 50)
    path = write(kind, tmp_path / f"a.{kind}", samples)
    assert os.listdir(tmp_path) == [f"a.{kind}"]
    writer = KINDS[kind][0](tmp_path / f"b.{kind}")
    writer.write(samples[0])
    assert not (tmp_path / f"b.{kind}").exists()  # not before close()
    writer.close()
    writer.close()
    for url, expected in ((path, samples), (str(tmp_path / f"b.{kind}"), samples[:1])):
        read = list(wds.DataPipeline([url], KINDS[kind][1]()))
        assert [without_url(s) for s in read] == expected


@pytest.mark.loaders
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_workers_read_every_stream_sample_once(kind: str, tmp_path: Path) -> None:
    paths = [write(kind, tmp_path / f"s{i}.{kind}", make_samples(i, 5)) for i in range(4)]
    pipe: Callable[[], Any] = lambda: wds.DataPipeline(  # noqa: E731
        wds.ShardList(paths), wds.split_by_worker, KINDS[kind][1](), wds.to_tuple("__key__")
    )
    loader = DataLoader(pipe(), batch_size=None, num_workers=2, multiprocessing_context="fork")
    keys = sorted(key for (key,) in loader)
    assert keys == sorted(f"{i:02d}-{j:03d}" for i in range(4) for j in range(5))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_stream_shards_go_through_the_shard_cache(kind: str, tmp_path: Path) -> None:
    """A good shard is cached and its samples carry ``__local_path__``; a damaged one, skipped
    by the handler, leaves no cache entry."""
    good = write(kind, tmp_path / f"good.{kind}", make_samples(0, 3))
    bad = tmp_path / f"bad.{kind}"
    bad.write_bytes(Path(good).read_bytes()[:-5])
    cache = tmp_path / "cache"
    urls = [f"pipe:cat {good}", f"pipe:cat {bad}"]
    load = KINDS[kind][2]
    pipe = getattr(wds.ShardList(urls).open_shards(cache_dir=str(cache)), load)(
        handler=wds.warn_and_continue
    )
    with pytest.warns(wds.DataWarning, match="ends inside"):
        read = list(pipe)
    assert len(read) == 3 + 2
    (entry,) = [path for path in cache.iterdir() if not path.name.startswith(".")]
    assert entry.read_bytes() == Path(good).read_bytes()
    assert {s["__local_path__"] for s in read[:3]} == {str(entry)}
