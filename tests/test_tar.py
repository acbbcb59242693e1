"""The tar reader: formats and extension headers, skipped member kinds, compression, and errors
that name the URL, member and offset for every way a shard can be cut short or damaged."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import pickle
import subprocess
import tarfile
import warnings
from pathlib import Path

import pytest
import zstandard
from shardgen import (
    BLOCK,
    end_marker,
    make_tar,
    pax_member,
    raw_header,
    raw_member,
    require_tool,
    sample_members,
)
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes.io import ShardStream
from wdspipes.read.walk import TarMember, iter_tar

MEMBERS = [
    ("0001.txt", b"hello"),
    ("0001.cls", b"3"),
    ("0002.txt", b""),
    ("0002.bin", bytes(range(256)) * 2),  # exactly one block
    ("0003.bin", b"x" * 513),
    ("0004.big", bytes(200_000)),  # over the one-read limit
]


def read_all(data: bytes, url: str = "mem.tar") -> list[tuple[str, bytes, int]]:
    return [(m.name, m.data, m.offset) for m in iter_tar(io.BytesIO(data), url)]


def tarfile_view(data: bytes) -> list[tuple[str, bytes, int]]:
    """The same archive as Python's tarfile sees it: regular files, data, header offsets."""
    result = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        for info in archive:
            if info.isreg():
                result.append((info.name, archive.extractfile(info).read(), info.offset))
    return result


@pytest.mark.parametrize(
    "fmt",
    [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT],
    ids=["ustar", "gnu", "pax"],
)
def test_reads_what_tarfile_reads(fmt: int) -> None:
    data = make_tar(MEMBERS, format=fmt)
    assert read_all(data) == tarfile_view(data)
    assert [name for name, _, _ in read_all(data)] == [name for name, _ in MEMBERS]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
def test_long_and_unicode_names(fmt: int) -> None:
    members = [
        ("d" * 150 + "/0001.txt", b"a"),  # over 100 characters
        ("/".join(["segment" * 5] * 9) + "/0002.txt", b"b"),  # over 255
        ("données/échantillon.txt", b"c"),
    ]
    data = make_tar(members, format=fmt)
    assert read_all(data) == tarfile_view(data)
    assert [m[0] for m in read_all(data)] == [name for name, _ in members]


def test_ustar_name_prefix() -> None:
    long_name = "p" * 120 + "/0001.txt"  # tarfile splits it into prefix and name
    data = make_tar([(long_name, b"x")], format=tarfile.USTAR_FORMAT)
    assert read_all(data) == [(long_name, b"x", 0)]


def test_offsets_include_extension_headers() -> None:
    data = make_tar([("a" * 120 + ".txt", b"1"), ("b.txt", b"2")], format=tarfile.GNU_FORMAT)
    (_, _, first), (_, _, second) = read_all(data)
    assert first == 0  # the GNU long-name header, not the member's own header
    assert second == 4 * BLOCK  # long-name header + name block + header + data block


def test_pax_path_and_size_override_the_header() -> None:
    data = (
        pax_member({"path": "renamed/0001.txt", "size": "5"})
        + raw_header("short.txt", size=0)  # the PAX size wins over this
        + b"hello"
        + bytes(BLOCK - 5)
        + end_marker()
    )
    assert read_all(data) == [("renamed/0001.txt", b"hello", 0)]


def test_global_pax_headers_apply_to_later_members() -> None:
    data = (
        pax_member({"comment": "made by a test"}, kind=b"g")
        + raw_member("0001.txt", b"a")
        + pax_member({"path": "global.txt"}, kind=b"g")
        + raw_member("ignored.txt", b"b")
        + pax_member({"path": "local.txt"})
        + raw_member("ignored.txt", b"c")
        + end_marker()
    )
    assert [m[:2] for m in read_all(data)] == [
        ("0001.txt", b"a"),
        ("global.txt", b"b"),
        ("local.txt", b"c"),
    ]


def test_first_extension_header_of_an_entry_wins_like_tarfile() -> None:
    long_name = raw_member("././@LongLink", b"from-longname.txt\0", kind=b"L")
    pax = pax_member({"path": "from-pax.txt"})
    for extensions in (long_name + pax, pax + long_name):
        data = extensions + raw_member("plain.txt", b"x") + end_marker()
        assert [m[0] for m in read_all(data)] == [m[0] for m in tarfile_view(data)]


def test_non_regular_members_are_skipped() -> None:
    data = (
        raw_header("dir/", kind=b"5")
        + raw_header("dir/link", kind=b"2")
        + raw_header("dir/hard", kind=b"1")
        + raw_header("fifo", kind=b"6")
        + raw_header("char", kind=b"3")
        + raw_member("././@LongLink", b"target\0", kind=b"K")
        + raw_header("dir/link2", kind=b"2")
        + raw_member("dump", b"unknown kind with data", kind=b"D")
        + raw_header("olddir/", kind=b"\0")  # a v7 directory
        + raw_member("0001.txt", b"kept", kind=b"\0")
        + raw_member("0002.txt", b"kept", kind=b"7")
        + end_marker()
    )
    assert [m[:2] for m in read_all(data)] == [("0001.txt", b"kept"), ("0002.txt", b"kept")]
    assert read_all(data) == tarfile_view(data)


def test_base256_size_and_signed_checksum() -> None:
    size_field = b"\x80" + (5).to_bytes(11, "big")
    data = (
        raw_header("0001.txt", size_field=size_field)
        + b"12345"
        + bytes(BLOCK - 5)
        + raw_member("\xe9t\xe9.txt".encode("latin-1"), b"x", signed_checksum=True)
        + end_marker()
    )
    names = [m[0] for m in read_all(data)]
    assert names[0] == "0001.txt" and read_all(data)[0][1] == b"12345"
    assert names[1] == b"\xe9t\xe9.txt".decode("utf-8", "surrogateescape")


def test_sparse_members_are_an_error() -> None:
    data = raw_member("0001.txt", b"x", kind=b"S") + end_marker()
    with pytest.raises(wds.TarFormatError, match="sparse"):
        read_all(data)


COMPRESSORS = {
    "gzip": gzip.compress,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}


@pytest.mark.parametrize("name", COMPRESSORS)
def test_whole_shard_compression_detected_by_magic(name: str) -> None:
    data = make_tar(MEMBERS)
    assert read_all(COMPRESSORS[name](data)) == read_all(data)


def test_tiny_compressed_shard() -> None:
    empty = gzip.compress(make_tar([]))
    assert len(empty) < BLOCK
    assert read_all(empty) == []


def test_concatenated_gzip_members() -> None:
    data = make_tar([("0001.txt", b"a")])
    assert read_all(gzip.compress(data[:1024]) + gzip.compress(data[1024:])) == read_all(data)


def test_reads_past_the_end_marker_to_the_end_of_the_stream() -> None:
    stream = io.BytesIO(make_tar(MEMBERS))
    list(iter_tar(stream, "mem.tar"))
    assert stream.read() == b""  # so a pipe: command finishes and gzip checks its CRC


def test_short_reads_are_continued() -> None:
    class Trickle(io.RawIOBase):
        """Returns at most 7 bytes per read, like a slow socket."""

        def __init__(self, data: bytes) -> None:
            self.source = io.BytesIO(data)

        def read(self, size: int = -1) -> bytes:
            return self.source.read(min(size, 7) if size >= 0 else 7)

    data = make_tar(MEMBERS)
    assert [m.name for m in iter_tar(Trickle(data), "slow.tar")] == [n for n, _ in MEMBERS]


def cut_points(data: bytes) -> list[int]:
    """Every offset up to the end of the first end-marker block: each cuts the shard somewhere
    that matters (beyond it, the reader has stopped, as tarfile does)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        last = archive.getmembers()[-1]
    end_of_members = last.offset_data + last.size + (-last.size % BLOCK)
    return list(range(0, end_of_members + BLOCK))


def test_truncated_anywhere_is_an_error_that_locates_the_cut() -> None:
    members = sample_members(["a", "b", "c"])
    data = make_tar(members, format=tarfile.GNU_FORMAT)
    full = read_all(data)
    for cut in cut_points(data):
        got = []
        with pytest.raises(wds.TruncatedShardError) as caught:
            # strict_end: a cut right after a member is an error too (by default a warning)
            for member in iter_tar(io.BytesIO(data[:cut]), "cut.tar", strict_end=True):
                got.append((member.name, member.data, member.offset))
        error = caught.value
        assert got == full[: len(got)], cut  # what came out is whole and in order
        assert error.url == "cut.tar" and str(error).startswith("cut.tar")
        assert error.offset is not None and error.offset <= cut
        if error.member is not None:  # cut inside a member's data: the next one due
            assert error.member == full[len(got)][0], cut
        elif got:  # cut at or inside a header: the member before it
            assert f"after member {got[-1][0]!r}" in str(error), cut


def test_a_shard_ending_after_a_member_without_the_marker_is_read_with_a_warning() -> None:
    data = make_tar([("0001.txt", b"a"), ("0002.txt", b"b")])
    cut = 4 * BLOCK  # both members whole, no end-of-archive marker: a writer never closed
    with pytest.warns(wds.NoEndMarkerWarning, match="cut.tar.*byte 2048.*'0002.txt'") as caught:
        assert read_all(data[:cut], "cut.tar") == read_all(data)
    assert len(caught) == 1
    assert issubclass(wds.NoEndMarkerWarning, wds.DataWarning)


def test_strict_end_refuses_a_shard_without_the_marker() -> None:
    data = make_tar([("0001.txt", b"a"), ("0002.txt", b"b")])
    cut = 4 * BLOCK
    with pytest.raises(wds.TruncatedShardError, match="end-of-archive marker") as caught:
        list(iter_tar(io.BytesIO(data[:cut]), "cut.tar", strict_end=True))
    assert caught.value.offset == cut
    assert "0002.txt" in str(caught.value)


@pytest.mark.parametrize("short", [1, 100, BLOCK - 1])
def test_a_cut_in_the_padding_after_the_last_member_stays_an_error(short: int) -> None:
    data = make_tar([("0001.txt", b"a"), ("0002.txt", b"b")])
    with pytest.raises(wds.TruncatedShardError, match="short of the padding"):
        read_all(data[: 4 * BLOCK - short], "cut.tar")


def test_empty_file_is_an_error() -> None:
    with pytest.raises(wds.TruncatedShardError, match="empty"):
        read_all(b"", "empty.tar")


@pytest.mark.parametrize("name", COMPRESSORS)
def test_truncated_compressed_shard(name: str) -> None:
    compressed = COMPRESSORS[name](make_tar(MEMBERS))
    for cut in (len(compressed) // 3, len(compressed) - 4):
        with pytest.raises(wds.ShardError) as caught:
            read_all(compressed[:cut], "cut.tar.x")
        assert caught.value.url == "cut.tar.x"


def test_corrupt_header_is_an_error_with_offset() -> None:
    data = bytearray(make_tar(MEMBERS))
    data[2 * BLOCK + 10] ^= 0x40  # inside the name of the second member's header
    with pytest.raises(wds.TarFormatError, match="checksum") as caught:
        read_all(bytes(data), "bad.tar")
    assert caught.value.offset == 2 * BLOCK
    assert "0001.txt" in str(caught.value)  # the member before the damage


@pytest.mark.parametrize(
    "garbage",
    [b"PK\x03\x04" + bytes(600), bytes(range(256)) * 4, b"\x1f\x8b\x08" + bytes(600)],
    ids=["zip", "binary", "bad-gzip"],
)
def test_not_a_tar_archive(garbage: bytes) -> None:
    with pytest.raises(wds.ShardError) as caught:
        read_all(garbage, "junk.bin")
    assert caught.value.url == "junk.bin"


def test_not_a_tar_archive_says_so() -> None:
    with pytest.raises(wds.TarFormatError, match="not a tar archive"):
        read_all(bytes(range(256)) * 4)


def test_malformed_pax_record() -> None:
    data = raw_member("././@PaxHeader", b"99 path=x\n", kind=b"x") + raw_member("a.txt", b"")
    with pytest.raises(wds.TarFormatError, match="PAX"):
        read_all(data + end_marker())


def test_extension_header_without_member() -> None:
    with pytest.raises(wds.TarFormatError, match="no member after it"):
        read_all(pax_member({"path": "x.txt"}) + end_marker())


def test_zstd_without_zstandard_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "zstandard", None)
    data = zstandard.ZstdCompressor().compress(make_tar(MEMBERS))
    with pytest.raises(wds.TarFormatError, match=r"wdspipes\[zstd\]"):
        read_all(data)


# The load_tar stage


def shard_streams(shards: dict[str, bytes]) -> IterableWrapper:
    streams = [ShardStream(url, io.BytesIO(data)) for url, data in shards.items()]
    return IterableWrapper(streams, deepcopy=False)


def test_load_tar_yields_members_of_each_shard() -> None:
    shards = {"a.tar": make_tar([("0.txt", b"a")]), "b.tar": make_tar([("0.txt", b"b")])}
    members = list(shard_streams(shards).load_tar())
    assert [(m.url, m.name, m.data) for m in members] == [
        ("a.tar", "0.txt", b"a"),
        ("b.tar", "0.txt", b"b"),
    ]
    assert all(isinstance(m, TarMember) for m in members)


def test_load_tar_closes_each_stream() -> None:
    streams = [io.BytesIO(make_tar([("0.txt", b"a")])) for _ in range(3)]
    shards = [ShardStream(f"{i}.tar", s) for i, s in enumerate(streams)]
    list(IterableWrapper(shards, deepcopy=False).load_tar())
    assert all(stream.closed for stream in streams)


def test_load_tar_handler_skips_a_bad_shard_after_its_good_members() -> None:
    good = make_tar([("0.txt", b"a")])
    bad = make_tar([("1.txt", b"b"), ("2.txt", b"c")])[: 3 * BLOCK]
    shards = {"good.tar": good, "bad.tar": bad, "last.tar": good}
    with pytest.warns(wds.DataWarning, match=r"TruncatedShardError: bad\.tar"):
        members = list(shard_streams(shards).load_tar(handler=wds.warn_and_continue))
    assert [(m.url, m.name) for m in members] == [
        ("good.tar", "0.txt"),
        ("bad.tar", "1.txt"),
        ("last.tar", "0.txt"),
    ]
    stopped = list(shard_streams(shards).load_tar(handler=wds.ignore_and_stop))
    assert [(m.url, m.name) for m in stopped] == [("good.tar", "0.txt"), ("bad.tar", "1.txt")]


def test_load_tar_reraises_by_default() -> None:
    shards = {"bad.tar": b"\0" * 100}
    with pytest.raises(wds.TruncatedShardError, match=r"bad\.tar"):
        list(shard_streams(shards).load_tar())


def test_warn_and_continue_does_not_sleep_and_warns_once_per_error() -> None:
    shards = {f"{i}.tar": b"" for i in range(20)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(shard_streams(shards).load_tar(handler=wds.warn_and_continue)) == []
    assert len(caught) == 20


def test_load_tar_pickles() -> None:
    pipe = wds.ShardList(["a.tar"]).open_shards().load_tar(handler=wds.warn_and_continue)
    clone = pickle.loads(pickle.dumps(pipe))
    assert clone.handler is wds.warn_and_continue


def test_gnu_incremental_archive_names_ignore_the_time_fields(tmp_path: Path) -> None:
    """GNU headers keep atime and ctime where ustar keeps a name prefix (tarfile is misled)."""
    tar = require_tool("tar")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "0001.cls").write_bytes(b"1")
    archive = tmp_path / "incremental.tar"
    subprocess.run(
        [
            tar,
            "-c",
            "-f",
            archive,
            "--format=gnu",
            "-g",
            tmp_path / "snapshot",
            "-C",
            tmp_path / "d",
            ".",
        ],
        check=True,
    )
    with archive.open("rb") as stream:
        assert [m.name for m in iter_tar(stream, str(archive))] == ["./0001.cls"]


@pytest.mark.parametrize(
    "member",
    [
        raw_header("0001.txt", size_field=b"\xff" + (5).to_bytes(11, "big")),  # base-256, < 0
        pax_member({"size": "-5"}) + raw_header("0001.txt"),
        pax_member({"size": "five"}) + raw_header("0001.txt"),
    ],
    ids=["base256-negative", "pax-negative", "pax-not-a-number"],
)
def test_impossible_sizes_are_errors(member: bytes) -> None:
    with pytest.raises(wds.TarFormatError, match="size"):
        read_all(member + end_marker())


@pytest.mark.parametrize(
    "entry",
    [
        raw_member("././@LongLink", bytes(40), kind=b"L") + raw_member("", b"data"),
        raw_member("././@LongLink", bytes(40), kind=b"L") + raw_member("0002.txt", b"data"),
        raw_member("", b"data"),
    ],
    ids=["zeroed-long-name", "zeroed-long-name-beside-a-name", "zeroed-name"],
)
def test_a_member_whose_name_comes_out_empty_is_an_error(entry: bytes) -> None:
    """A long-name record zeroed by damage is no name: refused (as bsdtar does), never a
    member skipped in silence or read under the name truncated in its header."""
    good = raw_member("0001.txt", b"ok")
    with pytest.raises(wds.TarFormatError, match="empty name") as caught:
        read_all(good + entry + end_marker(), "damaged.tar")
    error = caught.value
    assert (error.url, error.offset) == ("damaged.tar", 2 * BLOCK)
    assert "after member '0001.txt'" in str(error)


@pytest.mark.parametrize("size", [100, 1000, 70_000])
def test_a_member_over_the_size_limit_is_refused_before_it_is_read(
    size: int, tmp_path: Path
) -> None:
    data = make_tar([("0001.txt", b"ok"), ("0002.bin", bytes(size)), ("0003.txt", b"x")])
    limit = size - 1
    members = iter_tar(io.BytesIO(data), "big.tar", max_member_size=limit)
    assert next(members).name == "0001.txt"
    with pytest.raises(wds.MemberTooLargeError) as caught:
        next(members)
    error = caught.value
    assert (error.url, error.member, error.offset) == ("big.tar", "0002.bin", 2 * BLOCK)
    assert f"declares {size:,} bytes, over the limit of {limit:,} (max_member_size)" in str(error)
    assert len(list(iter_tar(io.BytesIO(data), "big.tar", max_member_size=size))) == 3
    path = tmp_path / "big.tar"
    path.write_bytes(data)
    loaded = wds.WebDataset(str(path), max_member_size=limit, handler=wds.ignore_and_continue)
    assert [sample["__key__"] for sample in loaded] == ["0001"], "the rest skipped"
    with pytest.raises(ValueError, match="max_member_size must be an int >= 1, got 0"):
        wds.WebDataset("a.tar", max_member_size=0)


def test_an_extension_header_over_its_limit_is_refused() -> None:
    huge = raw_header("././@LongLink", size=(1 << 20) + 1, kind=b"L")
    with pytest.raises(wds.MemberTooLargeError, match=r"extension header .* declares 1,048,577"):
        read_all(raw_member("0001.txt", b"ok") + huge + bytes(BLOCK), "ext.tar")
