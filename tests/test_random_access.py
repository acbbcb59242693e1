"""Random access (wdspipes/read/random_access.py, indexed.py, offsets.py, index_file.py):
``ShardListDataset`` against wids 0.1.11 (a test-only oracle) and against the streaming
readers on the same bytes, the offsets' sidecars, damaged shards, the index's checks, remote
shards through the cache and by ranges, and decoding."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import pickle
import random
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
import PIL.Image
import pytest
from shardgen import BLOCK, make_tar

import wdspipes as wds
from wdspipes.io import cache as cache_module
from wdspipes.io.cache import CacheWriter, ShardCache
from wdspipes.io.http import close_connections
from wdspipes.read import indexed, offsets, shard_reader
from wdspipes.read.index_file import load_index
from wdspipes.read.offsets import read_sidecar, sidecar_path
from wdspipes.read.shard_reader import UNPLAIN, ShardReader

wids = pytest.importorskip("wids")

Sample = dict[str, Any]


def write_shards(directory: Path, counts: list[int], fields: int = 2) -> list[Path]:
    """Shards ``s-0.tar``, ... with ``counts[i]`` samples each, written by ShardWriter: keys
    ``"{shard}-{index:04d}"``, a ``bin`` of varying size, a ``cls`` and (with 3 fields) a
    ``json``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    rng = random.Random(len(counts))
    for shard, count in enumerate(counts):
        path = directory / f"s-{shard}.tar"
        with wds.TarWriter(str(path)) as sink:
            for index in range(count):
                sample: Sample = {
                    "__key__": f"{shard}-{index:04d}",
                    "bin": rng.randbytes(rng.randrange(0, 3000)),
                    "cls": index % 7,
                }
                if fields > 2:
                    sample["json"] = {"i": index}
                sink.write(sample)
        paths.append(path)
    return paths


def items(shards: list[Path], counts: list[int]) -> list[dict[str, Any]]:
    """The shard list of wids' form: ``{"url", "nsamples"}`` dicts."""
    return [{"url": str(p), "nsamples": c} for p, c in zip(shards, counts, strict=True)]


def write_index(path: Path, shards: list[Path], counts: list[int], **extra: Any) -> Path:
    entries = [
        {"url": os.path.relpath(shard, path.parent), "nsamples": count, **extra}
        for shard, count in zip(shards, counts, strict=True)
    ]
    path.write_text(json.dumps({"wids_version": 1, "shardlist": entries}))
    return path


def streamed(paths: list[Path]) -> list[Sample]:
    """The samples the streaming reader gives, in order (without ``__local_path__``, which
    WebDataset adds for local shards)."""
    samples = wds.WebDataset([str(p) for p in paths], shardshuffle=False)
    return [{k: v for k, v in s.items() if k != "__local_path__"} for s in samples]


def plain(sample: Sample) -> Sample:
    """A sample without the entries only one reader gives."""
    return {k: v for k, v in sample.items() if k not in ("__index__", "__shardindex__")}


def wids_plain(sample: Sample) -> Sample:
    return {k: v.read() if isinstance(v, io.BytesIO) else v for k, v in sample.items()}


@pytest.fixture
def dataset_dir(tmp_path: Path) -> tuple[Path, list[Path], list[int]]:
    counts = [5, 1, 8, 3]
    shards = write_shards(tmp_path / "data", counts, fields=3)
    return tmp_path / "data", shards, counts


# --- the same samples as wids and as the streaming readers ----------------------------------


def test_every_index_gives_what_wids_gives(
    dataset_dir: tuple[Path, list[Path], list[int]], tmp_path: Path
) -> None:
    directory, shards, counts = dataset_dir
    index = write_index(directory / "index.json", shards, counts)
    ours = wds.ShardListDataset(str(index))
    theirs = wids.ShardListDataset(str(index), transformations=[], cache_dir=str(tmp_path / "w"))
    assert len(ours) == len(theirs) == sum(counts)
    for _ in range(2):  # parsed, then by the layouts kept
        for i in range(len(ours)):
            assert wids_plain(wds.wids_sample(ours[i])) == wids_plain(theirs[i])
    assert all(reader_of(ours, n).members(0) == 3 for n in range(len(counts)))
    theirs.close()


def test_sub_datasets_give_what_wids_gives(tmp_path: Path) -> None:
    shards = write_shards(tmp_path / "data", [3, 2, 4])
    index = tmp_path / "data" / "index.json"
    index.write_text(
        json.dumps(
            {
                "wids_version": 1,
                "shardlist": [{"url": "s-0.tar", "nsamples": 3}],
                "datasets": [
                    {"name": "extra", "shardlist": [{"url": str(shards[1]), "nsamples": 2}]},
                    {"shardlist": [{"url": str(shards[2]), "nsamples": 4}]},
                ],
            }
        )
    )
    ours = wds.ShardListDataset(str(index))
    theirs = wids.ShardListDataset(str(index), transformations=[], cache_dir=str(tmp_path / "w"))
    assert len(ours) == len(theirs) == 9
    for i in range(9):
        assert wids_plain(wds.wids_sample(ours[i])) == wids_plain(theirs[i])
    assert [ours[i].get("__dataset__") for i in (0, 3, 8)] == [None, "extra", None]
    theirs.close()


def test_samples_are_the_streaming_readers_in_shard_order(
    dataset_dir: tuple[Path, list[Path], list[int]],
) -> None:
    _, shards, counts = dataset_dir
    ds = wds.ShardListDataset(items(shards, counts))
    got = [ds[i] for i in range(len(ds))]
    assert [plain(s) for s in got] == streamed(shards)
    assert [ds[i] for i in range(len(ds))] == got  # by the layouts kept
    assert [s["__index__"] for s in got] == list(range(len(ds)))
    assert [s["__shardindex__"] for s in got] == [i for c in counts for i in range(c)]
    assert list(got[0])[:4] == ["__key__", "__url__", "__index__", "__shardindex__"]


def test_archives_of_every_kind_read_as_streamed(tmp_path: Path) -> None:
    """Long names (GNU and PAX), PAX records, meta files, names without a field, directories,
    a global PAX header, and archives joined with cat (ignore_zeros)."""
    long_key = "d/" + "k" * 150
    members = [
        ("__meta__", b"m"),
        ("a.txt", b"1"),
        ("a.cls", b"2"),
        ("noext", b"skipped"),
        (long_key + ".txt", b"long"),
        (long_key + ".seg.png", b"seg"),
        ("b.TXT", b"upper"),
    ]
    gnu = make_tar(members, format=tarfile.GNU_FORMAT)
    pax = make_tar([*members, ("ü.txt", b"unicode")], format=tarfile.PAX_FORMAT)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        archive.pax_headers = {"comment": "global"}
        directory = tarfile.TarInfo("dir")
        directory.type = tarfile.DIRTYPE
        archive.addfile(directory)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    joined = make_tar([("x.txt", b"x")]) + make_tar([("y.txt", b"y")])
    cases = {"gnu": gnu, "pax": pax, "global": buffer.getvalue(), "joined": joined}
    for label, data in cases.items():
        path = tmp_path / f"{label}.tar"
        path.write_bytes(data)
        ignore = label == "joined"
        expected = list(
            wds.ShardList([str(path)]).open_shards().load_tar(ignore_zeros=ignore).group_samples()
        )
        ds = wds.ShardListDataset(
            [{"url": str(path), "nsamples": len(expected)}], ignore_zeros=ignore
        )
        assert [plain(ds[i]) for i in range(len(ds))] == expected, label


def test_indices_past_the_end_and_negative(
    dataset_dir: tuple[Path, list[Path], list[int]],
) -> None:
    _, shards, counts = dataset_dir
    ds = wds.ShardListDataset(items(shards, counts))
    total = sum(counts)
    assert ds[-1]["__index__"] == total - 1 and ds[-total]["__index__"] == 0
    assert ds[np.int64(2)]["__index__"] == 2
    for bad in (total, -total - 1, 10**12):
        with pytest.raises(IndexError, match=f"sample index {bad} out of range"):
            ds[bad]
    with pytest.raises(TypeError):
        ds["0"]  # type: ignore[index]
    assert ds.lengths == counts


# --- the index --------------------------------------------------------------------------------


def test_urls_resolve_as_wids_resolves_them() -> None:
    cases = [
        ("/data/i.json", "a.tar"),
        ("/data/i.json", "./sub/../a.tar"),
        ("/data/i.json", "/abs/a.tar"),
        ("i.json", "a.tar"),
        ("http://host/d/i.json", "a.tar"),
        ("http://host/d/i.json", "../e/a.tar"),
        ("s3://bucket/d/i.json", "https://other/x.tar"),
        ("file:///data/i.json", "a.tar"),
    ]
    for source, url in cases:
        base = wids.wids_specs.urldir(source)
        expected = wids.wids_specs.urlmerge(base, url)
        assert load_index([{"url": url, "nsamples": 1}], base=base)[0].url == expected


def test_an_index_file_resolves_against_its_directory_and_base(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    index = tmp_path / "d" / "i.json"
    index.write_text(
        json.dumps(
            {
                "wids_version": 1,
                "shardlist": [{"url": "a.tar", "nsamples": 2, "filesize": 10240}],
                "datasets": [{"name": "extra", "shardlist": [{"url": "b.tar", "nsamples": 1}]}],
            }
        )
    )
    entries = load_index(str(index))
    assert [(e.url, e.samples, e.size, e.dataset) for e in entries] == [
        (f"{tmp_path}/d/a.tar", 2, 10240, None),
        (f"{tmp_path}/d/b.tar", 1, None, "extra"),
    ]
    assert load_index(str(index), base="/elsewhere")[0].url == "/elsewhere/a.tar"
    index.write_text(
        json.dumps(
            {"wids_version": 1, "base": "../s", "shardlist": [{"url": "a.tar", "nsamples": 2}]}
        )
    )
    assert load_index(str(index))[0].url == f"{tmp_path}/s/a.tar"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON"),
        ("[]", "not a shards' index"),
        ('{"shardlist": []}', "not a wids index"),
        ('{"wids_version": 1, "shardlist": []}', "names no shards"),
        ('{"wids_version": 1, "shardlist": [{"url": "a.tar"}]}', "'nsamples' must be"),
        ('{"wids_version": 1, "shardlist": [{"url": "a.tar", "nsamples": -1}]}', "must be"),
        ('{"wids_version": 1, "shardlist": [{"url": 3, "nsamples": 1}]}', "no URL string"),
        (
            '{"wids_version": 1, "shardlist": [{"url": "a", "nsamples": 3, "filesize": 1024}]}',
            "3 samples cannot fit in 1024 bytes",
        ),
        (
            '{"wids_version": 1, "shardlist": [{"url": "a", "nsamples": 1, "filesize": "9"}]}',
            "'filesize'",
        ),
        (
            '{"wids_version": 1, "shardlist": [{"url": "pipe:touch x", "nsamples": 1}]}',
            "do not run",
        ),
    ],
)
def test_bad_indexes_are_refused_naming_them(tmp_path: Path, content: str, message: str) -> None:
    index = tmp_path / "index.json"
    index.write_text(content)
    with pytest.raises(wds.ShardIndexError, match=message) as caught:
        wds.ShardListDataset(str(index))
    assert str(index) in str(caught.value)
    assert not (tmp_path / "x").exists()


def test_commands_in_an_index_run_only_when_allowed(tmp_path: Path) -> None:
    shard = write_shards(tmp_path / "data", [3])[0]
    index = tmp_path / "index.json"
    index.write_text(
        json.dumps({"wids_version": 1, "shardlist": [{"url": f"pipe:cat {shard}", "nsamples": 3}]})
    )
    ds = wds.ShardListDataset(str(index), commands="any", cache_dir=str(tmp_path / "c"))
    assert [plain(ds[i]) for i in range(3)] == [
        {**s, "__url__": f"pipe:cat {shard}"} for s in streamed([shard])
    ]


# --- sidecars -----------------------------------------------------------------------------


def test_offsets_are_found_once_and_kept_beside_the_shard(
    dataset_dir: tuple[Path, list[Path], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, shards, counts = dataset_dir
    shard_list = items(shards, counts)
    first = [wds.ShardListDataset(shard_list)[i] for i in range(sum(counts))]
    assert all(Path(sidecar_path(str(p))).is_file() for p in shards)

    def no_walk(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("walked a shard with a valid sidecar")

    monkeypatch.setattr(indexed, "scan_offsets", no_walk)
    ds = wds.ShardListDataset(shard_list)
    assert [ds[i] for i in range(len(ds))] == first


def test_a_sidecar_that_does_not_fit_the_shard_is_rebuilt(tmp_path: Path) -> None:
    shard = write_shards(tmp_path, [6])[0]
    item = [{"url": str(shard), "nsamples": 6}]
    expected = [wds.ShardListDataset(item)[i] for i in range(6)]
    sidecar = Path(sidecar_path(str(shard)))
    good = sidecar.read_bytes()
    info = shard.stat()
    magic, header, body = good.split(b"\n", 2)
    starts = np.frombuffer(body, dtype="<i8").copy()
    shifted = starts.copy()
    shifted[1:-1] += 512  # still increasing whole blocks: caught by the checksum
    swapped = starts[::-1].copy()
    meta = json.loads(header)
    forged = [
        b"garbage",
        magic + b"\n{not json\n" + body,
        magic + b"\n" + json.dumps({**meta, "samples": 10**15}).encode() + b"\n" + body,
        magic + b"\n" + json.dumps({**meta, "size": meta["size"] + 1}).encode() + b"\n" + body,
        magic + b"\n" + json.dumps({**meta, "mtime_ns": 1}).encode() + b"\n" + body,
        magic + b"\n" + header + b"\n" + shifted.tobytes(),
        magic
        + b"\n"
        + json.dumps({**meta, "crc32": __import__("zlib").crc32(swapped.tobytes())}).encode()
        + b"\n"
        + swapped.tobytes(),
        magic + b"\n" + header + b"\n" + body[:-8],
        good + bytes(8 * 10**6),  # more entries than the shard has room for: not read
    ]
    for data in forged:
        sidecar.write_bytes(data)
        assert read_sidecar(str(sidecar), info.st_size, info.st_mtime_ns, 6) is None
        ds = wds.ShardListDataset(item)
        assert [ds[i] for i in range(6)] == expected
        assert sidecar.read_bytes() == good  # rewritten
    # A shard changed after its sidecar was written: rebuilt, never trusted.
    write_shards(tmp_path, [4])
    os.utime(shard, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    ds = wds.ShardListDataset([{"url": str(shard), "nsamples": 4}])
    assert [plain(ds[i]) for i in range(4)] == streamed([shard])


def test_sidecars_go_to_the_cache_where_they_cannot_be_written_beside_the_shard(
    tmp_path: Path,
) -> None:
    shard = write_shards(tmp_path / "data", [3])[0]
    Path(sidecar_path(str(shard))).mkdir()  # in the way, as a read-only directory would be
    ds = wds.ShardListDataset([{"url": str(shard), "nsamples": 3}], cache_dir=tmp_path / "c")
    assert ds[2]["__key__"] == "0-0002"
    cached = [p for p in (tmp_path / "c").iterdir() if p.name.endswith(".offsets")]
    assert len(cached) == 1
    info = shard.stat()
    assert read_sidecar(str(cached[0]), info.st_size, info.st_mtime_ns, 3) is not None


def test_no_sidecars_when_asked(tmp_path: Path) -> None:
    shard = write_shards(tmp_path, [3])[0]
    ds = wds.ShardListDataset([{"url": str(shard), "nsamples": 3}], sidecars=False)
    assert ds[1]["__key__"] == "0-0001"
    assert not Path(sidecar_path(str(shard))).exists()


def test_offsets_take_8_bytes_a_sample(tmp_path: Path) -> None:
    shard = write_shards(tmp_path, [50])[0]
    ds = wds.ShardListDataset([{"url": str(shard), "nsamples": 50}])
    assert ds.shards.offsets(0).nbytes() == 8 * 51


# --- damage and mismatches --------------------------------------------------------------------


def test_a_cut_shard_serves_the_samples_before_the_cut(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, [4, 6])
    whole = shards[1].read_bytes()
    expected = streamed(shards)
    offsets_whole = offsets.scan_offsets(io.BytesIO(whole), "x", size=len(whole))
    cut = offsets_whole.starts[3] + 700  # inside sample 3 of shard 1
    shards[1].write_bytes(whole[:cut])
    ds = wds.ShardListDataset(items(shards, [4, 6]))
    for i in range(4 + 2):  # shard 0, and samples 0 and 1 of shard 1
        assert plain(ds[i]) == expected[i]
    for inner in (2, 3, 5):  # sample 2 may lack members: not served either
        with pytest.raises(wds.TruncatedShardError) as caught:
            ds[4 + inner]
        message = str(caught.value)
        assert str(shards[1]) in message and f"sample {4 + inner}" in message
        assert caught.value.offset is not None and f"byte {caught.value.offset}" in message


def test_a_corrupt_header_is_an_error_for_the_samples_after_it(tmp_path: Path) -> None:
    shard = write_shards(tmp_path, [6])[0]
    data = bytearray(shard.read_bytes())
    starts = offsets.scan_offsets(io.BytesIO(bytes(data)), "x", size=len(data)).starts
    data[starts[4] + 10] ^= 0xFF  # a byte of sample 4's first header
    shard.write_bytes(bytes(data))
    ds = wds.ShardListDataset([{"url": str(shard), "nsamples": 6}])
    assert [ds[i]["__key__"] for i in range(3)] == ["0-0000", "0-0001", "0-0002"]
    for i in (3, 4, 5):
        with pytest.raises(wds.TarFormatError, match=f"sample {i} .*damaged at byte {starts[4]}"):
            ds[i]


def test_a_shard_damaged_after_its_offsets_were_found_is_an_error_not_a_sample(
    tmp_path: Path,
) -> None:
    shard = write_shards(tmp_path, [6])[0]
    ds = wds.ShardListDataset([{"url": str(shard), "nsamples": 6}], sidecars=False)
    starts = ds.shards.offsets(0).starts
    with open(shard, "r+b") as file:  # the file changes under an open dataset
        file.seek(starts[2] + 148)
        file.write(b"9999999")
    with pytest.raises(wds.TarFormatError) as caught:
        ds[2]
    assert f"at byte {starts[2]}" in str(caught.value) and "sample 2" in str(caught.value)
    assert ds[1]["__key__"] == "0-0001"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"nsamples": 5}, "6 samples where the index says 5"),
        ({"nsamples": 6, "filesize": 10**6}, "bytes where the index says 1000000"),
    ],
)
def test_a_shard_that_differs_from_its_index_entry_is_refused(
    tmp_path: Path, entry: dict[str, int], message: str
) -> None:
    shard = write_shards(tmp_path, [6])[0]
    ds = wds.ShardListDataset([{"url": str(shard), **entry}])
    for i in (0, 4):
        with pytest.raises(wds.IndexMismatchError, match=message) as caught:
            ds[i]
        assert str(shard) in str(caught.value) and f"sample {i}" in str(caught.value)


def test_a_compressed_shard_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "a.tar.gz"
    with wds.TarWriter(str(path), compress="gz") as sink:
        sink.write({"__key__": "a", "txt": "x"})
    ds = wds.ShardListDataset([{"url": str(path), "nsamples": 1}])
    with pytest.raises(wds.ShardError, match="compressed as a whole") as caught:
        ds[0]
    assert str(path) in str(caught.value)


# --- layouts: samples read again without a parse ---------------------------------------------


def reader_of(ds: wds.ShardListDataset, shard: int = 0) -> ShardReader:
    return ds.shards.shard(shard)


def as_parsed(path: Path, found: offsets.ShardOffsets, inner: int) -> Any:
    """What a parse of the bytes now at the place of sample ``inner`` of the shard ``path``
    gives (as sample ``inner`` of a dataset): the sample, or the type of the error."""
    start, end = found.span(inner)
    chunk = path.read_bytes()[start:end]
    try:
        if len(chunk) != end - start:
            raise offsets.short_read(str(path), start, len(chunk), end)
        return offsets.parse_sample(chunk, start, found, str(path), inner, inner)
    except wds.WdsError as exn:
        return type(exn)


def served(ds: wds.ShardListDataset, index: int) -> Any:
    """``ds[index]``, or the type of its error."""
    try:
        return ds[index]
    except wds.WdsError as exn:
        return type(exn)


def test_samples_read_again_are_made_by_their_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = [
        (name, data)
        for key in ("0001", "ü-2", "k\udcff", "d/x.y/0004")  # UTF-8, undecodable, dots
        for name, data in (
            (f"{key}.txt", key.encode("utf-8", "surrogateescape")),
            (f"{key}.SEG.png", b"x" * 700),
        )
    ]
    path = tmp_path / "s.tar"
    path.write_bytes(make_tar(members))
    expected = streamed([path])
    ds = wds.ShardListDataset([{"url": str(path), "nsamples": 4}], sidecars=False)
    assert [plain(ds[i]) for i in (2, 0, 3, 1)] == [expected[i] for i in (2, 0, 3, 1)]
    reader = reader_of(ds)
    assert [reader.members(i) for i in range(4)] == [2, 2, 2, 2]
    parsed = [as_parsed(path, ds.shards.offsets(0), i) for i in range(4)]

    def no_parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed a sample that has a layout")

    monkeypatch.setattr(shard_reader, "parse_sample", no_parse)
    monkeypatch.setattr(shard_reader, "_plain_sample", no_parse)
    again = [ds[i] for i in range(4)]
    assert again == parsed and [list(s) for s in again] == [list(s) for s in parsed]


def test_samples_that_are_not_plain_are_parsed_at_every_read(tmp_path: Path) -> None:
    long_key = "d/" + "k" * 150
    cases = {
        "long": make_tar(
            [("a.txt", b"1"), (long_key + ".txt", b"2"), ("c.txt", b"3")], format=tarfile.GNU_FORMAT
        ),
        "meta": make_tar([("a.txt", b"1"), ("__meta__", b"m"), ("b.txt", b"2")]),
        "nofield": make_tar([("a.txt", b"1"), ("noext", b"n"), ("b.txt", b"2")]),
        "twice": make_tar([("a.txt", b"1"), ("a.TXT", b"2"), ("b.txt", b"3")]),
    }
    layouts = {
        "long": [1, UNPLAIN, 1],
        "meta": [UNPLAIN, 1],
        "nofield": [UNPLAIN, 1],
        "twice": [UNPLAIN, 1],
    }
    for label, data in cases.items():
        path = tmp_path / f"{label}.tar"
        path.write_bytes(data)
        count = len(layouts[label])
        ds = wds.ShardListDataset([{"url": str(path), "nsamples": count}], sidecars=False)
        for _ in range(2):
            got = [served(ds, i) for i in range(count)]
            assert got == [as_parsed(path, ds.shards.offsets(0), i) for i in range(count)]
        assert [reader_of(ds).members(i) for i in range(count)] == layouts[label], label
    assert got[0] is wds.DuplicateFieldError  # "twice": the parse reports it at every read


def shard_of(sizes: list[int], keys: list[str] | None = None) -> bytes:
    """A tar shard of samples with a ``bin`` of each size and a ``cls``."""
    keys = keys or [f"{i:04d}" for i in range(len(sizes))]
    return make_tar(
        (name, data)
        for key, size in zip(keys, sizes, strict=True)
        for name, data in ((f"{key}.bin", bytes([len(key)]) * size), (f"{key}.cls", b"7"))
    )


def header_at(data: bytes, name: bytes) -> int:
    """The offset of the header of the member ``name``."""
    at = data.find(name + b"\0")
    assert at % BLOCK == 0
    return at


def same_sum_rewrites(data: bytes) -> dict[str, bytes]:
    """Shards of the same size as ``data`` (see :func:`shard_of`, sizes ``[10, 1000, 600,
    300, 20, 1500]``): each header changed keeps its checksum field, whose byte sum it keeps."""
    rewrites = {}
    changed = bytearray(data)  # the data of every member, headers alike
    for key in (b"0000", b"0001", b"0002", b"0003", b"0004", b"0005"):
        start = header_at(data, key + b".bin") + BLOCK
        changed[start] ^= 0xFF
    rewrites["data"] = bytes(changed)
    changed = bytearray(data)  # a key with two characters swapped: "0003" -> "0030"
    at = header_at(data, b"0003.bin")
    changed[at : at + 4] = b"0030"
    rewrites["key"] = bytes(changed)
    changed = bytearray(data)  # a field renamed: "bin" -> "cim"
    at = header_at(data, b"0004.bin")
    changed[at + 5 : at + 8] = b"cim"
    rewrites["field"] = bytes(changed)
    changed = bytearray(data)  # the size's octal digits swapped: 1750 (1000) -> 1570 (888)
    at = header_at(data, b"0001.bin")
    assert changed[at + 124 : at + 135] == b"00000001750"
    changed[at + 124 : at + 135] = b"00000001570"
    rewrites["size"] = bytes(changed)
    # a name prefix "0", the byte sum kept by the version field: "00" -> "0\0"
    changed = bytearray(data)
    at = header_at(data, b"0002.bin")
    assert changed[at + 263 : at + 265] == b"00" and not changed[at + 345]
    changed[at + 345] = ord("0")
    changed[at + 264] = 0
    rewrites["prefix"] = bytes(changed)
    rewrites["other"] = shard_of([1000, 10, 300, 600, 1500, 20], ["a", "b", "c", "d", "e", "f"])
    return rewrites


@pytest.mark.parametrize("change", ["data", "key", "field", "size", "prefix", "other"])
def test_a_shard_rewritten_in_place_is_read_as_it_now_is_never_as_it_was(
    tmp_path: Path, change: str
) -> None:
    """Rewritten with its size and modification time restored, so that its offsets are
    trusted still: each sample is what a parse of the bytes now at its place gives (the new
    sample, or an error), whether it had a layout or not."""
    path = tmp_path / "s.tar"
    data = shard_of([10, 1000, 600, 300, 20, 1500])
    path.write_bytes(data)
    new = same_sum_rewrites(data)[change]
    assert len(new) == len(data) and new != data
    ds = wds.ShardListDataset([{"url": str(path), "nsamples": 6}])
    before = streamed([path])
    for i in range(6):  # every sample read, its layout kept, and read again by it
        assert plain(ds[i]) == plain(ds[i]) == before[i]
    assert [reader_of(ds).members(i) for i in range(6)] == [2] * 6
    info = path.stat()
    with open(path, "r+b") as file:
        file.write(new)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    fresh = wds.ShardListDataset([{"url": str(path), "nsamples": 6}])  # its sidecar trusted
    for dataset in (ds, fresh, ds):
        for i in random.Random(change).sample(range(6), 6):
            expected = as_parsed(path, ds.shards.offsets(0), i)
            got = served(dataset, i)
            assert (got if isinstance(got, type) else plain(got)) == (
                expected if isinstance(expected, type) else plain(expected)
            ), (change, i)
    if change == "data":  # headers alike: still read by the layouts, the new bytes served
        assert [reader_of(ds).members(i) for i in range(6)] == [2] * 6
        assert ds[0]["bin"] == new[BLOCK : BLOCK + 10] != data[BLOCK : BLOCK + 10]
    else:
        changed = {"key": [3], "field": [4], "size": [1], "prefix": [2], "other": range(6)}[change]
        assert all(reader_of(ds).members(i) == UNPLAIN for i in changed)
    if change == "size":  # the served field is the 888 bytes the header now says
        assert len(ds[1]["bin"]) == 888


def test_a_shard_cut_under_an_open_dataset_is_an_error_after_its_layouts(tmp_path: Path) -> None:
    path = tmp_path / "s.tar"
    data = shard_of([10, 1000, 600])
    path.write_bytes(data)
    ds = wds.ShardListDataset([{"url": str(path), "nsamples": 3}], sidecars=False)
    before = [ds[i] for i in range(3)]
    start, _ = ds.shards.offsets(0).span(2)
    with open(path, "r+b") as file:
        file.truncate(start + 700)
    assert ds[0] == before[0]
    with pytest.raises(wds.TruncatedShardError, match=f"ends at byte {start + 700}.*sample 2"):
        ds[2]


def test_threads_learn_each_layout_once(tmp_path: Path) -> None:
    shard = write_shards(tmp_path, [300], fields=3)[0]
    ds = wds.ShardListDataset([{"url": str(shard), "nsamples": 300}], sidecars=False)
    expected = streamed([shard])
    results: list[bool] = []

    def read(seed: int) -> None:
        order = random.Random(seed).sample(range(300), 300)
        results.append(all(plain(ds[i]) == expected[i] for i in order * 2))

    threads = [threading.Thread(target=read, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 4
    reader = reader_of(ds)
    assert [reader.members(i) for i in range(300)] == [3] * 300
    assert len(reader.begins) == 900  # learned once each


def test_layouts_take_8_bytes_a_sample_and_14_a_member_of_an_open_shard(tmp_path: Path) -> None:
    shard = write_shards(tmp_path, [1500])[0]
    ds = wds.ShardListDataset([{"url": str(shard), "nsamples": 1500}], lru_size=1)
    reader = reader_of(ds)
    assert reader.layout_bytes() == 8 * 2  # nothing a sample until one is read
    ds[1200]
    assert reader.layout_bytes() == 8 * 2 + 8 * 1024 + 14 * 2  # its block of 1,024 samples
    for i in range(1500):
        ds[i]
    assert reader.layout_bytes() == 8 * 2 + 8 * 2048 + 14 * 3000
    assert reader.names == ["bin", "cls"]
    other = write_shards(tmp_path / "other", [2])[0]
    ds = wds.ShardListDataset(
        [{"url": str(shard), "nsamples": 1500}, {"url": str(other), "nsamples": 2}], lru_size=1
    )
    ds[0]
    first = reader_of(ds, 0)
    ds[1500]  # the first shard is closed, its layouts let go
    assert reader_of(ds, 0) is not first and reader_of(ds, 0).members(0) == 0


# --- decoding, pickling ---------------------------------------------------------------------


def test_decoding_is_the_streams_decoding(tmp_path: Path) -> None:
    path = tmp_path / "img.tar"
    with wds.TarWriter(str(path)) as sink:
        for i in range(3):
            image = np.full((4, 5, 3), i * 40, dtype=np.uint8)
            sink.write({"__key__": f"{i}", "png": PIL.Image.fromarray(image), "cls": i})
    item = [{"url": str(path), "nsamples": 3}]
    streams = list(wds.WebDataset([str(path)], shardshuffle=False).decode("rgb8"))
    for ds in (
        wds.ShardListDataset(item, decode=wds.Decoder("rgb8")),
        wds.ShardListDataset(item).map(wds.Decoder("rgb8")),
        wds.ShardListDataset(item).map(wds.Decoder(["rgb8"])),
    ):
        for i in range(3):
            got = ds[i]
            assert got["cls"] == streams[i]["cls"] == i
            assert np.array_equal(got["png"], streams[i]["png"])


def test_a_dataset_pickles_without_its_open_files(
    dataset_dir: tuple[Path, list[Path], list[int]],
) -> None:
    directory, shards, counts = dataset_dir
    index = write_index(directory / "index.json", shards, counts)
    ds = wds.ShardListDataset(str(index), decode=wds.Decoder())
    before = [ds[i] for i in range(len(ds))]
    copy = pickle.loads(pickle.dumps(ds))
    assert [copy[i] for i in range(len(copy))] == before


def test_few_shards_are_open_at_once(dataset_dir: tuple[Path, list[Path], list[int]]) -> None:
    _, shards, counts = dataset_dir
    ds = wds.ShardListDataset(items(shards, counts), lru_size=2)
    opened = set(os.listdir("/proc/self/fd"))
    for i in range(len(ds)):
        ds[i]
    assert len(ds.shards._open) == 2
    assert len(set(os.listdir("/proc/self/fd")) - opened) <= 2
    ds.close()


# --- remote shards ----------------------------------------------------------------------------


class RangeServer(ThreadingHTTPServer):
    """Serves files under ``root`` with closed and open byte ranges; counts requests."""

    daemon_threads = True

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), RangeHandler)
        self.root = root
        self.requests: list[tuple[str, str | None]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class RangeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: RangeServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.server.root / unquote(urlsplit(self.path).path).lstrip("/")
        requested = self.headers.get("Range")
        self.server.requests.append((path.name, requested))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        if requested:
            first, _, last = requested.removeprefix("bytes=").partition("-")
            start, stop = int(first), min(int(last) + 1 if last else len(data), len(data))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
            data = data[start:stop]
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def range_server(tmp_path: Path) -> Iterator[RangeServer]:
    root = tmp_path / "www"
    root.mkdir()
    server = RangeServer(root)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        close_connections()
        server.shutdown()
        server.server_close()
        thread.join()


def remote_dataset(server: RangeServer, counts: list[int]) -> tuple[str, list[Path]]:
    shards = write_shards(server.root, counts)
    index = write_index(server.root / "index.json", shards, counts)
    return f"{server.url}/{index.name}", shards


def test_remote_shards_are_fetched_into_the_cache_once(
    range_server: RangeServer, tmp_path: Path
) -> None:
    counts = [4, 3]
    index_url, shards = remote_dataset(range_server, counts)
    expected = streamed(shards)
    ds = wds.ShardListDataset(index_url, cache_dir=tmp_path / "cache")
    order = random.Random(1).sample(range(7), 7)
    got = {i: ds[i] for i in order}
    for i, sample in got.items():
        assert sample["__url__"] == f"{range_server.url}/s-{0 if i < 4 else 1}.tar"
        assert {k: v for k, v in sample.items() if not k.startswith("__")} == {
            k: v for k, v in expected[i].items() if not k.startswith("__")
        }
    fetched = [name for name, _ in range_server.requests if name.endswith(".tar")]
    assert sorted(fetched) == ["s-0.tar", "s-1.tar"]
    cache = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert sum(name.endswith(".offsets") for name in cache) == 2
    range_server.requests.clear()
    again = wds.ShardListDataset(index_url, cache_dir=tmp_path / "cache")
    assert [again[i] for i in order] == [got[i] for i in order]
    assert [name for name, _ in range_server.requests] == ["index.json"]


def test_cached_shards_are_evicted_least_recently_used_with_their_offsets(
    range_server: RangeServer, tmp_path: Path
) -> None:
    index_url, _ = remote_dataset(range_server, [3, 3, 3])
    cache = tmp_path / "cache"
    ds = wds.ShardListDataset(index_url, cache_dir=cache, cache_size=1, lru_size=1)
    for i in (0, 3, 6):  # shard 0, then 1, then 2; one open at a time
        ds[i]

    def entries() -> list[str]:
        return sorted(p.name for p in cache.iterdir())

    names = entries()
    assert [n for n in names if not n.startswith(".")] == sorted(
        [n for n in names if n.endswith(("s-1.tar", "s-2.tar"))]
    )
    assert not any("s-0.tar" in name for name in names)  # its offsets went with it
    assert sum(name.endswith(".offsets") for name in names) == 2
    assert ds[1]["__key__"] == "0-0001"  # fetched again


@pytest.mark.loaders
def test_dataloader_workers_fetch_each_remote_shard_once(
    range_server: RangeServer, tmp_path: Path
) -> None:
    from torch.utils.data import DataLoader

    index_url, shards = remote_dataset(range_server, [6, 6])
    ds = wds.ShardListDataset(index_url, cache_dir=tmp_path / "cache")
    loader = DataLoader(
        ds,
        batch_size=None,
        sampler=wds.ChunkedSampler(ds, chunksize=12, seed=0, shufflefirst=True),
        num_workers=2,
        multiprocessing_context="fork",
    )
    keys = sorted(sample["__key__"] for sample in loader)
    assert keys == sorted(s["__key__"] for s in streamed(shards))
    fetched = sorted(name for name, _ in range_server.requests if name.endswith(".tar"))
    assert fetched == ["s-0.tar", "s-1.tar"]


def read_in_step(ds: wds.ShardListDataset, indices: list[int], barrier: Any) -> None:
    """Read ``ds[i]`` for each of ``indices``, every read started together with the other
    processes at ``barrier``."""
    for index in indices:
        barrier.wait(timeout=60)  # a bound if another process died, not a pace
        ds[index]


def shard_requests(server: RangeServer) -> dict[str, int]:
    """Requests of each shard: in the cache's path every one is a download from byte 0 (no
    range is asked for there: a resumed range would start at a later byte)."""
    counts: dict[str, int] = {}
    for name, requested in server.requests:
        if name.endswith(".tar"):
            assert requested is None or requested.startswith("bytes=0-"), requested
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.loaders
def test_processes_reading_an_uncached_shard_at_once_download_it_once(
    range_server: RangeServer, tmp_path: Path
) -> None:
    """Two processes start reading each of 32 uncached shards at the same moment (a barrier
    before each read): whichever takes a shard's lock fetches it, the other waits for that
    copy. Before the fetch was taken only under the lock, a reader that had looked at a free
    lock a moment before opened the URL and dropped it when the other took the lock first:
    most runs downloaded some shard twice (issue 33)."""
    counts = [2] * 32
    index_url, shards = remote_dataset(range_server, counts)
    ds = wds.ShardListDataset(index_url, cache_dir=tmp_path / "cache")
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    firsts = [2 * n for n in range(len(counts))]
    processes = [context.Process(target=read_in_step, args=(ds, firsts, barrier)) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0, 0]
    assert shard_requests(range_server) == {path.name: 1 for path in shards}
    assert [ds[i]["__key__"] for i in firsts] == [f"{n}-0000" for n in range(len(counts))]
    assert shard_requests(range_server) == {path.name: 1 for path in shards}  # all cached


def hold_entry(cache_dir: Path, url: str, held: Any) -> None:
    """Be another reader fetching ``url`` into the cache: take its entry's lock, say so, and
    keep it until killed (two minutes at most)."""
    writer = ShardCache(cache_dir).claim(url, lambda _: io.BytesIO(b""))
    assert isinstance(writer, CacheWriter)
    held.set()
    threading.Event().wait(120)


@pytest.mark.loaders
def test_a_reader_waiting_for_a_fetcher_that_dies_fetches_the_shard_itself(
    range_server: RangeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_url, shards = remote_dataset(range_server, [3])
    cache_dir = tmp_path / "cache"
    url = f"{range_server.url}/{shards[0].name}"
    context = multiprocessing.get_context("fork")
    held, waiting = context.Event(), threading.Event()
    holder = context.Process(target=hold_entry, args=(cache_dir, url, held))
    holder.start()
    try:
        assert held.wait(60)
        wait = ShardCache.wait

        def waits(cache: ShardCache, url: str, stall: float | None = None) -> None:
            waiting.set()
            wait(cache, url, stall)

        monkeypatch.setattr(ShardCache, "wait", waits)
        ds = wds.ShardListDataset(index_url, cache_dir=cache_dir)
        got: list[Sample] = []
        reader = threading.Thread(target=lambda: got.append(ds[1]))
        reader.start()
        assert waiting.wait(60)
        assert shard_requests(range_server) == {}  # waiting requests nothing
        holder.kill()  # dies holding the lock: the system lets go of it
        reader.join(60)
        assert not reader.is_alive()
    finally:
        holder.kill()
        holder.join(60)
    assert [s["__key__"] for s in got] == ["0-0001"]
    assert shard_requests(range_server) == {"s-0.tar": 1}


def test_a_reader_waiting_for_a_fetch_without_progress_gives_up(
    range_server: RangeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_url, shards = remote_dataset(range_server, [3])
    cache_dir = tmp_path / "cache"
    url = f"{range_server.url}/{shards[0].name}"
    holder = ShardCache(cache_dir).claim(url, lambda _: io.BytesIO(b""))  # writes nothing
    assert isinstance(holder, CacheWriter)
    assert ShardCache(cache_dir).claim(url, pytest.fail) is None  # taken: not opened
    monkeypatch.setattr(cache_module, "FETCH_STALL", 0.0)
    ds = wds.ShardListDataset(index_url, cache_dir=cache_dir)
    with pytest.raises(wds.ShardError, match="without progress for 0 s; reading sample 1"):
        ds[1]
    assert shard_requests(range_server) == {}
    holder.discard()
    holder.close()  # let go, nothing cached: the next read fetches it
    assert ds[1]["__key__"] == "0-0001"
    assert shard_requests(range_server) == {"s-0.tar": 1}


def test_shards_in_an_fsspec_store_by_cache_and_by_ranges(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    shards = write_shards(tmp_path / "data", [4, 3])
    memory = fsspec.filesystem("memory")
    urls = []
    for path in shards:
        url = f"memory://random-access/{path.name}"
        with fsspec.open(url, "wb") as file:
            file.write(path.read_bytes())
        urls.append(url)
    expected = streamed(shards)
    try:
        for options in ({"cache_dir": tmp_path / "cache"}, {"ranged": True}):
            ds = wds.ShardListDataset(
                [{"url": u, "nsamples": c} for u, c in zip(urls, [4, 3], strict=True)], **options
            )
            for i in (6, 0, 4):
                got = ds[i]
                assert got["__url__"] == urls[i >= 4]
                assert got["bin"] == expected[i]["bin"] and got["__key__"] == expected[i]["__key__"]
    finally:
        memory.rm("random-access", recursive=True)


def test_a_shard_that_cannot_be_opened_is_tried_again_at_the_next_read(
    range_server: RangeServer, tmp_path: Path
) -> None:
    index_url, shards = remote_dataset(range_server, [3])
    data = shards[0].read_bytes()
    shards[0].unlink()
    ds = wds.ShardListDataset(index_url, cache_dir=tmp_path / "cache")
    with pytest.raises(wds.ShardOpenError, match="404") as caught:
        ds[1]
    assert f"{range_server.url}/s-0.tar" in str(caught.value) and "sample 1" in str(caught.value)
    shards[0].write_bytes(data)  # the store answers again
    assert ds[1]["__key__"] == "0-0001"


def test_remote_shards_need_a_cache_or_ranges(range_server: RangeServer) -> None:
    index_url, _ = remote_dataset(range_server, [2])
    with pytest.raises(wds.ShardOpenError, match=r"cache_dir=.*ranged=True"):
        wds.ShardListDataset(index_url)[0]


def test_ranged_reads_fetch_one_range_a_sample(range_server: RangeServer, tmp_path: Path) -> None:
    counts = [5]
    index_url, shards = remote_dataset(range_server, counts)
    expected = streamed(shards)
    ds = wds.ShardListDataset(index_url, ranged=True)
    assert [ds[i]["bin"] for i in (3, 0, 4, 3)] == [expected[i]["bin"] for i in (3, 0, 4, 3)]
    shard_requests = [r for name, r in range_server.requests if name == "s-0.tar"]
    # the first block (the size), one streamed walk (no sidecar anywhere), then one range each
    assert shard_requests[0] == "bytes=0-511" and shard_requests[1] is None
    assert len(shard_requests) == 2 + 4 and all(r and r.count("-") for r in shard_requests[2:])
    assert reader_of(ds).members(3) == 2  # read again by its layout
    # With the sidecar uploaded beside the shard, no walk: the sidecar is fetched instead.
    wds.ShardListDataset([{"url": str(shards[0]), "nsamples": 5}])[0]  # writes the sidecar
    range_server.requests.clear()
    ds = wds.ShardListDataset(index_url, ranged=True)
    assert ds[2]["bin"] == expected[2]["bin"]
    assert [name for name, r in range_server.requests if r is None] == [
        "index.json",
        "s-0.tar.wdsidx",
    ]


def test_ranged_reads_go_on_without_sidecars_where_the_cache_cannot_be_made(
    range_server: RangeServer, tmp_path: Path
) -> None:
    """As for local shards, a cache directory that cannot be made keeps no sidecar: it does
    not fail the read."""
    index_url, shards = remote_dataset(range_server, [3])
    expected = streamed(shards)
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    ds = wds.ShardListDataset(index_url, ranged=True, cache_dir=blocker / "cache")
    assert [ds[i]["bin"] for i in (2, 0)] == [expected[i]["bin"] for i in (2, 0)]
    assert not (blocker / "cache").exists()
