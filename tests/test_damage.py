"""Damaged shards through the whole read pipeline: a sample is complete or it does not exist,
nothing after an end-of-archive marker is dropped silently, every byte decompressed before a
cut is read, and no file outlives the error that ended a read."""

from __future__ import annotations

import bz2
import gc
import gzip
import lzma
import os
import random
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cbor2
import msgpack
import pytest
import zstandard
from click.testing import CliRunner
from shardgen import BLOCK, make_tar, sample_members

import wdspipes as wds
from wdspipes.cli import cli
from wdspipes.pipes import SampleGrouper
from wdspipes.read.walk import iter_tar
from wdspipes.tools.reshard import reshard

KEYS = ["00", "01", "02"]
GOOD = make_tar(sample_members(KEYS))  # members 00.cls 00.txt 01.cls 01.txt 02.cls 02.txt
OTHER = make_tar(sample_members(["10", "11"]))


def write(directory: Path, name: str, data: bytes) -> str:
    path = directory / name
    path.write_bytes(data)
    return str(path)


def fields_by_key(samples: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    return [(s["__key__"], sorted(k for k in s if not k.startswith("__"))) for s in samples]


def read(urls: list[str], handler: Callable[[Exception], object], **options: Any) -> list[Any]:
    return list(wds.WebDataset(urls, handler=handler, **options))


# --- a sample is complete or it does not exist ----------------------------------------------

CONTINUING = [wds.warn_and_continue, wds.ignore_and_continue]
STOPPING = [wds.warn_and_stop, wds.ignore_and_stop]


@pytest.mark.parametrize("handler", CONTINUING + STOPPING, ids=lambda h: h.__name__)
def test_a_shard_cut_in_a_header_drops_the_sample_being_assembled(
    tmp_path: Path, handler: Callable[[Exception], object]
) -> None:
    cut = write(tmp_path, "cut.tar", GOOD[: 3 * 1024 + 100])  # inside the header of 01.txt
    good = write(tmp_path, "good.tar", OTHER)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        samples = read([cut, good], handler)
    expected = [("00", ["cls", "txt"])]
    if handler in CONTINUING:
        expected += [("10", ["cls", "txt"]), ("11", ["cls", "txt"])]
    assert fields_by_key(samples) == expected  # never 01 with only its cls
    if handler in (wds.warn_and_continue, wds.warn_and_stop):
        (warning,) = [str(w.message) for w in caught if w.category is wds.DataWarning]
        assert "cut.tar, at byte 3072" in warning
        assert "sample '01', read in part, was dropped" in warning


def test_the_error_raised_names_the_dropped_sample(tmp_path: Path) -> None:
    cut = write(tmp_path, "cut.tar", GOOD[: 3 * 1024 + 100])
    with pytest.raises(wds.TruncatedShardError, match="sample '01', read in part, was dropped"):
        read([cut], wds.reraise_exception)


def test_a_sample_known_to_be_whole_is_kept(tmp_path: Path) -> None:
    # Cut in the data of 01.cls: its header was read, so sample 00 before it is whole.
    cut = write(tmp_path, "cut.tar", GOOD[: 2 * 1024 + 512 + 3])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        samples = read([cut], wds.warn_and_continue)
    assert fields_by_key(samples) == [("00", ["cls", "txt"])]
    assert "dropped" not in str(caught[0].message)


def test_a_shard_failing_before_its_first_member_keeps_the_sample_before(tmp_path: Path) -> None:
    good = write(tmp_path, "good.tar", GOOD)
    empty = write(tmp_path, "empty.tar", b"")
    samples = read([good, empty, good], wds.ignore_and_continue)
    assert fields_by_key(samples) == 2 * [(key, ["cls", "txt"]) for key in KEYS]


@pytest.mark.parametrize("handler", CONTINUING + STOPPING, ids=lambda h: h.__name__)
@pytest.mark.parametrize("kind", ["cbor", "msgpack"])
def test_stream_shards_cut_in_an_item_give_only_whole_items(
    tmp_path: Path, kind: str, handler: Callable[[Exception], object]
) -> None:
    dumps = cbor2.dumps if kind == "cbor" else msgpack.packb
    items = [dumps({"__key__": f"{i:02d}", "txt": b"x" * 40, "cls": i}) for i in range(3)]
    data = b"".join(items)
    cut = write(tmp_path, f"cut.{kind}", data[: len(items[0]) + len(items[1]) // 2])
    good = write(tmp_path, f"good.{kind}", items[2])
    to_samples = wds.cbors_to_samples if kind == "cbor" else wds.msgpack_to_samples
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", wds.DataWarning)
        samples = list(wds.DataPipeline(wds.SimpleShardList([cut, good]), to_samples(handler)))
    expected = ["00", "02"] if handler in CONTINUING else ["00"]
    assert [s["__key__"] for s in samples] == expected
    assert all(s["txt"] == b"x" * 40 for s in samples)


# --- nothing after the end-of-archive marker is dropped silently ----------------------------


def zeroed(data: bytes, member: int) -> bytes:
    """``data`` with the header of member number ``member`` (one block of data each) zeroed."""
    damaged = bytearray(data)
    damaged[member * 1024 : member * 1024 + BLOCK] = bytes(BLOCK)
    return bytes(damaged)


def test_a_zero_block_in_the_middle_is_an_error(tmp_path: Path) -> None:
    shard = write(tmp_path, "zero.tar", zeroed(GOOD, 2))  # the header of 01.cls
    with pytest.raises(wds.DataAfterEndError) as caught:
        read([shard], wds.reraise_exception)
    assert caught.value.url == shard
    assert caught.value.offset == 2 * 1024 + BLOCK  # 01.cls's data
    assert "at byte 2048" in str(caught.value)  # the zero block
    assert "ignore_zeros=True" in str(caught.value)


def test_a_zeroed_header_stays_an_error_with_ignore_zeros(tmp_path: Path) -> None:
    shard = write(tmp_path, "zero.tar", zeroed(GOOD, 2))
    with pytest.raises(wds.TarFormatError, match="checksum") as caught:
        read([shard], wds.reraise_exception, ignore_zeros=True)
    assert caught.value.offset == 2 * 1024 + BLOCK


def test_joined_archives_are_an_error_by_default_and_read_whole_with_ignore_zeros(
    tmp_path: Path,
) -> None:
    joined = write(tmp_path, "joined.tar", GOOD + OTHER)
    with pytest.raises(wds.DataAfterEndError) as caught:
        read([joined], wds.reraise_exception)
    assert caught.value.offset == len(GOOD)
    samples = read([joined], wds.reraise_exception, ignore_zeros=True)
    assert [s["__key__"] for s in samples] == [*KEYS, "10", "11"]
    stages = wds.DataPipeline(
        wds.SimpleShardList([joined]), wds.tarfile_to_samples(ignore_zeros=True)
    )
    assert [s["__key__"] for s in stages] == [*KEYS, "10", "11"]
    chained = wds.ShardList([joined]).open_shards().load_tar(ignore_zeros=True).group_samples()
    assert [s["__key__"] for s in chained] == [*KEYS, "10", "11"]


def test_zeros_after_the_marker_are_fine_in_any_amount(tmp_path: Path) -> None:
    padded = write(tmp_path, "padded.tar", GOOD + bytes(3 * 10240 + 100))
    assert [s["__key__"] for s in read([padded], wds.reraise_exception)] == KEYS
    assert [s["__key__"] for s in read([padded], wds.reraise_exception, ignore_zeros=True)] == KEYS


def test_garbage_after_the_marker_is_an_error_naming_where(tmp_path: Path) -> None:
    shard = write(tmp_path, "tail.tar", GOOD + bytes(700) + b"junk")
    with pytest.raises(wds.DataAfterEndError) as caught:
        read([shard], wds.reraise_exception)
    assert caught.value.offset == len(GOOD) + 700


def test_info_and_cat_report_and_read_joined_archives(tmp_path: Path) -> None:
    joined = write(tmp_path, "joined.tar", GOOD + OTHER)
    runner = CliRunner()
    result = runner.invoke(cli, ["info", joined])
    assert result.exit_code == 1
    assert "data-after-end" in result.output
    result = runner.invoke(cli, ["info", "--ignore-zeros", joined])
    assert result.exit_code == 0, result.output
    assert "5 samples" in result.output
    output = tmp_path / "one.tar"
    result = runner.invoke(cli, ["cat", "--ignore-zeros", joined, "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert [s["__key__"] for s in read([str(output)], wds.reraise_exception)] == [*KEYS, "10", "11"]


# --- a shard without the end-of-archive marker (a writer never closed) ------------------------

UNMARKED = GOOD[: 6 * 1024]  # every member whole, no end-of-archive marker


def test_a_shard_without_the_marker_gives_all_its_samples_with_one_warning(
    tmp_path: Path,
) -> None:
    shard = write(tmp_path, "open.tar", UNMARKED)
    with pytest.warns(wds.NoEndMarkerWarning) as caught:
        samples = read([shard], wds.reraise_exception)
    closed = read([write(tmp_path, "closed.tar", GOOD)], wds.reraise_exception)
    assert [{**s, "__url__": shard, "__local_path__": shard} for s in closed] == samples
    assert len(caught) == 1
    assert shard in str(caught[0].message) and "samples were read" in str(caught[0].message)


def test_the_same_samples_as_webdataset(tmp_path: Path) -> None:
    webdataset = pytest.importorskip("webdataset")
    shard = write(tmp_path, "open.tar", UNMARKED)
    with pytest.warns(wds.NoEndMarkerWarning):
        ours = [(s["__key__"], s["cls"], s["txt"]) for s in wds.WebDataset(shard)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # webdataset leaks one open file per shard
        reference = webdataset.WebDataset(shard, shardshuffle=False)
        theirs = [(s["__key__"], s["cls"], s["txt"]) for s in reference]
        del reference
        gc.collect()
    assert ours == theirs and len(ours) == len(KEYS)


def test_a_last_sample_with_fewer_fields_is_dropped_and_named(tmp_path: Path) -> None:
    shard = write(tmp_path, "cut.tar", GOOD[: 5 * 1024])  # after 02.cls, before 02.txt
    with pytest.warns(wds.NoEndMarkerWarning, match="last sample '02' was dropped"):
        samples = read([shard], wds.reraise_exception)
    assert [s["__key__"] for s in samples] == ["00", "01"]


def test_an_only_sample_that_cannot_be_checked_is_dropped(tmp_path: Path) -> None:
    shard = write(tmp_path, "cut.tar", GOOD[:1024])  # 00.cls alone
    with pytest.warns(wds.NoEndMarkerWarning, match="'00' was dropped.*only one"):
        assert read([shard], wds.reraise_exception) == []


def test_strict_end_makes_a_missing_marker_an_error(tmp_path: Path) -> None:
    shard = write(tmp_path, "open.tar", UNMARKED)
    with pytest.raises(wds.TruncatedShardError, match="end-of-archive marker") as caught:
        read([shard], wds.reraise_exception, strict_end=True)
    assert caught.value.url == shard and caught.value.offset == len(UNMARKED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        good = read(
            [shard, write(tmp_path, "good.tar", OTHER)], wds.ignore_and_continue, strict_end=True
        )
    # the samples known whole before the missing marker, then the next shard
    assert [s["__key__"] for s in good] == ["00", "01", "10", "11"]


def test_resume_in_and_after_a_shard_without_the_marker(tmp_path: Path) -> None:
    urls = [write(tmp_path, "open.tar", UNMARKED), write(tmp_path, "good.tar", OTHER)]

    def build() -> Any:
        return wds.WebDataset(urls).buffer_shuffle(3, seed=1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = [s["__key__"] for s in build()]
        assert len(caught) == 1
        for stop in range(1, 5):
            pipe = build()
            items = iter(pipe)
            head = [next(items)["__key__"] for _ in range(stop)]
            again = build()
            again.load_state_dict(pipe.state_dict())
            assert head + [s["__key__"] for s in again] == expected, stop
    assert sorted(expected) == [*KEYS, "10", "11"]


def test_iter_tar_tells_a_callback_of_the_missing_marker_instead_of_warning(
    tmp_path: Path,
) -> None:
    shard = write(tmp_path, "open.tar", UNMARKED)
    problems: list[str] = []
    with warnings.catch_warnings(), open(shard, "rb") as stream:
        warnings.simplefilter("error")
        members = list(iter_tar(stream, shard, unmarked_end=problems.append))
    assert len(members) == 2 * len(KEYS)
    assert len(problems) == 1 and "without the end-of-archive marker" in problems[0]


def test_info_reports_and_cat_mends_a_shard_without_the_marker(tmp_path: Path) -> None:
    shard = write(tmp_path, "open.tar", UNMARKED)
    runner = CliRunner()
    result = runner.invoke(cli, ["info", shard])
    assert result.exit_code == 1, result.output
    assert "no-end-marker" in result.output and "3 samples" in result.output
    output = tmp_path / "mended.tar"
    result = runner.invoke(cli, ["cat", shard, "-o", str(output)])
    assert result.exit_code == 0, result.output
    with output.open("rb") as stream:  # the marker is there: strict_end reads it
        assert len(list(iter_tar(stream, str(output), strict_end=True))) == 2 * len(KEYS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [s["__key__"] for s in read([str(output)], wds.reraise_exception)] == KEYS


# --- a compressed shard cut short gives everything before the cut ---------------------------

COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
}


def test_a_cut_gzip_shard_gives_the_members_before_the_cut() -> None:
    payload = random.Random(7).randbytes(100_000)
    data = make_tar([("a.cls", b"1"), ("a.bin", payload)])
    compressed = gzip.compress(data)[:10_000]
    members = []
    with pytest.raises(wds.TruncatedShardError) as caught:
        for member in iter_tar(_stream(compressed), "cut.tar.gz"):
            members.append(member.name)
    assert members == ["a.cls"]
    error = caught.value
    assert (error.member, error.offset) == ("a.bin", 1024)
    assert "the compressed data ends early, after 10000 bytes" in str(error)


@pytest.mark.parametrize("name", COMPRESSORS)
def test_a_cut_compressed_shard_reads_as_the_same_cut_uncompressed(name: str) -> None:
    rng = random.Random(11)
    data = make_tar(
        [(f"{i:03d}.bin", rng.randbytes(rng.randrange(200, 30_000))) for i in range(60)]
    )
    compressed = COMPRESSORS[name](data)
    for cut in sorted(rng.sample(range(BLOCK, len(compressed) - 1), 8)):
        ours, error = _members_and_error(compressed[:cut])
        assert error is not None
        produced = _produced(error)
        # Everything decompressed before the cut is read: as the tar itself cut there.
        theirs, plain_error = _members_and_error(data[:produced])
        assert ours == theirs
        assert plain_error is not None
        assert (error.member, error.offset) == (plain_error.member, plain_error.offset)
        assert f"after {cut} bytes" in str(error)


def test_a_zstd_shard_cut_short_is_an_error() -> None:
    data = make_tar([(f"{i:03d}.bin", bytes([i]) * 5000) for i in range(40)])
    compressed = zstandard.ZstdCompressor().compress(data)
    for cut in (len(compressed) // 3, len(compressed) - 3):
        _, error = _members_and_error(compressed[:cut])
        assert isinstance(error, wds.ShardError)


def _stream(data: bytes) -> Any:
    import io

    return io.BytesIO(data)


def _members_and_error(data: bytes) -> tuple[list[str], wds.WdsError | None]:
    names: list[str] = []
    try:
        for member in iter_tar(_stream(data), "shard"):
            names.append(member.name)
    except wds.WdsError as exn:
        return names, exn
    return names, None


def _produced(error: Exception) -> int:
    text = str(error)
    return int(text.split("at byte ")[-1].split(" of the tar data")[0])


# --- corrupt compressed data: which samples were delivered -----------------------------------


def test_a_gzip_checksum_error_names_the_members_delivered_before() -> None:
    compressed = bytearray(gzip.compress(GOOD))
    compressed[-8] ^= 0xFF  # the CRC32 of the trailer: found only at the end
    names, error = _members_and_error(bytes(compressed))
    assert names == [f"{key}.{field}" for key in KEYS for field in ("cls", "txt")]
    assert isinstance(error, wds.TarFormatError)
    assert "'02.txt'" in str(error)
    assert "were delivered before the damage was found and may be damaged" in str(error)


def test_a_zstd_checksum_error_names_the_members_delivered_before() -> None:
    rng = random.Random(5)
    data = make_tar([(f"{i:03d}.bin", rng.randbytes(10_000)) for i in range(40)])
    compressed = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(data))
    compressed[-1] ^= 0xFF  # the frame's content checksum: found only at the end
    names, error = _members_and_error(bytes(compressed))
    assert names  # delivered in blocks of 128 KiB before the check
    assert isinstance(error, wds.TarFormatError)
    assert f"up to {names[-1]!r}, were delivered before the damage was found" in str(error)


# --- no file outlives the error -------------------------------------------------------------


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@contextmanager
def no_collection() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _duplicate(tmp_path: Path) -> SampleGrouper:
    return wds.WebDataset(write(tmp_path, "dup.tar", make_tar([("a.cls", b"1"), ("a.cls", b"2")])))


def _truncated(tmp_path: Path) -> SampleGrouper:
    return wds.WebDataset(write(tmp_path, "cut.tar", GOOD[: 3 * 1024 + 100]))


def _undecodable(tmp_path: Path) -> Any:
    shard = write(tmp_path, "bad.tar", make_tar([("a.json", b"{"), ("b.json", b"{}")]))
    return wds.WebDataset(shard).decode()


def _missing_field(tmp_path: Path) -> Any:
    return wds.WebDataset(write(tmp_path, "good.tar", GOOD)).to_tuple("jpg")


@pytest.mark.parametrize(
    "pipeline",
    [_duplicate, _truncated, _undecodable, _missing_field],
    ids=["duplicate", "truncated", "decode", "missing"],
)
def test_no_file_stays_open_after_an_error(tmp_path: Path, pipeline: Callable[[Path], Any]) -> None:
    pipe = pipeline(tmp_path)
    with no_collection():
        before = open_descriptors()
        with pytest.raises(wds.WdsError):
            list(pipe)
        assert open_descriptors() == before


def test_no_file_stays_open_when_a_handler_raises_another_error(tmp_path: Path) -> None:
    def fail(exn: Exception) -> bool:
        raise RuntimeError("stop here") from exn

    pipe = wds.WebDataset(
        write(tmp_path, "dup.tar", make_tar([("a.cls", b"1"), ("a.cls", b"2")])), handler=fail
    )
    with no_collection():
        before = open_descriptors()
        with pytest.raises(RuntimeError):
            list(pipe)
        assert open_descriptors() == before


def test_an_abandoned_iteration_closes_its_shard(tmp_path: Path) -> None:
    pipe = wds.WebDataset(write(tmp_path, "good.tar", GOOD))
    with no_collection():
        before = open_descriptors()
        iterator = iter(pipe)
        next(iterator)
        assert open_descriptors() == before + 1
        iterator.close()  # type: ignore[attr-defined]
        assert open_descriptors() == before


def test_joined_archives_resume_with_ignore_zeros(tmp_path: Path) -> None:
    joined = write(
        tmp_path,
        "joined.tar",
        make_tar(sample_members([f"a{i:02d}" for i in range(20)]))
        + make_tar(sample_members([f"b{i:02d}" for i in range(20)])),
    )

    def build() -> Any:
        return wds.WebDataset([joined], ignore_zeros=True).buffer_shuffle(8, seed=3)

    expected = [s["__key__"] for s in build()]
    assert sorted(expected) == [f"{p}{i:02d}" for p in "ab" for i in range(20)]
    for stop in (1, 15, 25, 39):
        pipe = build()
        items = iter(pipe)
        first = [next(items)["__key__"] for _ in range(stop)]
        again = build()
        again.load_state_dict(pipe.state_dict())
        assert first + [s["__key__"] for s in again] == expected


def test_a_zstd_shard_cut_in_its_checksum_is_an_error() -> None:
    compressed = zstandard.ZstdCompressor(write_checksum=True).compress(GOOD)
    names, error = _members_and_error(compressed[:-4])  # the frame's content checksum
    assert names == [f"{key}.{field}" for key in KEYS for field in ("cls", "txt")]
    assert isinstance(error, wds.TruncatedShardError)
    assert "the compressed data ends early" in str(error)


def test_corrupt_bzip2_data_is_a_format_error() -> None:
    _, error = _members_and_error(b"BZh91AY&SY" + bytes(range(256)) + bytes(600))
    assert isinstance(error, wds.TarFormatError)
    assert "corrupt compressed data" in str(error)


@pytest.mark.parametrize("size", [0o77777777777, 2**40, 2**87])
@pytest.mark.parametrize("limit", [None, 2**90])
def test_a_forged_huge_size_is_a_located_error_and_allocates_nothing_big(
    tmp_path: Path, size: int, limit: int | None
) -> None:
    """Over the member limit (the default), refused before reading; under a limit raised
    beyond it, a cut found after the bytes there are, read without allocating the size."""
    from shardgen import raw_header, raw_member

    field = b"%011o\0" % size if size < 8**11 else bytes([0x80]) + size.to_bytes(11, "big")
    data = raw_member("a.txt", b"a") + raw_header("b.txt", size_field=field) + b"abc"
    names: list[str] = []
    options = {} if limit is None else {"max_member_size": limit}
    expected = wds.MemberTooLargeError if limit is None else wds.TruncatedShardError
    with (
        open(write(tmp_path, "huge.tar", data), "rb") as stream,  # reads allocate what they ask
        pytest.raises(expected) as caught,
    ):
        names.extend(member.name for member in iter_tar(stream, "huge.tar", **options))
    error = caught.value
    assert names == ["a.txt"]
    assert (error.member, error.offset) == ("b.txt", 1024)
    if limit is None:
        assert f"declares {size:,} bytes, over the limit of {4 << 30:,}" in str(error)
    else:
        assert f"after 3 of {size} bytes" in str(error)


def test_a_stream_item_keyed_by_a_number_is_an_error(tmp_path: Path) -> None:
    shard = write(tmp_path, "int.msgpack", msgpack.packb({"__key__": 5, "cls": 1}))
    with pytest.raises(wds.StreamFormatError, match="__key__ must be a string, not int"):
        list(wds.DataPipeline(wds.SimpleShardList([shard]), wds.msgpack_to_samples()))


@pytest.mark.parametrize("shuffle", [False, True])
def test_reshard_reads_joined_archives_with_ignore_zeros(tmp_path: Path, shuffle: bool) -> None:
    joined = write(tmp_path, "joined.tar", GOOD + OTHER)
    pattern = str(tmp_path / "out" / "r-%02d.tar")
    with pytest.raises(wds.DataAfterEndError):
        reshard(joined, pattern, shuffle=shuffle, seed=1)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("r-*"))
    reshard(joined, pattern, shuffle=shuffle, seed=1, ignore_zeros=True)
    keys = [
        s["__key__"]
        for s in read(sorted(map(str, (tmp_path / "out").glob("r-*"))), wds.reraise_exception)
    ]
    assert sorted(keys) == [*KEYS, "10", "11"]
    result = CliRunner().invoke(
        cli, ["reshard", "--ignore-zeros", joined, "-o", str(tmp_path / "cli-%02d.tar")]
    )
    assert result.exit_code == 0, result.output
