"""Differential tests: wdspipes reads what webdataset reads, from shards written by real tools.

The same shard bytes go through ``wdspipes`` and through ``webdataset`` 1.0.2 (which reads with
Python's ``tarfile``); the sample dicts, field order included, must be equal. The shards come from
GNU tar (gnu, posix and ustar formats, uncompressed, gzip, bzip2, xz and zstd; oldgnu and v7),
bsdtar (restricted pax, ustar, pax and gnutar; uncompressed and gzip), Python's ``tarfile`` (ustar,
GNU and PAX; every compression) and webdataset's own ``TarWriter``. The dataset has members of 0,
512, 513, 65536 and 70000 bytes, names of exactly 100 and 101 characters, over 255 characters, a
path component over 100 characters, a 155-character ustar prefix and UTF-8 names.

Agreement alone could hide a shared mistake, so each test also checks wdspipes against what was
written: the samples of the dataset, the key and field of every name in FORMAT.md section 3, the
grouping rules of section 4, and ``TarMember.offset`` against ``tarfile``'s ``TarInfo.offset``.
"""

from __future__ import annotations

import gc
import io
import json
import os
import subprocess
import tarfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import shardgen
import zstandard

import wdspipes as wds

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref

Sample = dict[str, Any]
Fields = dict[str, bytes]

# --- The dataset ---------------------------------------------------------------------------

DEEP = "deep/" + "d" * 60 + "/" + "e" * 40  # names over 100 characters that ustar can still split
HUNDRED = "hundred/" + "h" * 88  # member names of exactly 100 characters (101 for .json)
# A directory of 153 characters whose files must go in ustar's name field whole: a prefix field of
# 153 characters (155, the full field, with "./" before it).
PREFIX = "prefix/" + "p" * 61 + "/" + "q" * 84
VERY_DEEP = "very/" + "/".join(c * 90 for c in "uvw")  # names over 255 characters
LONG_COMPONENT = "long-" + "n" * 120  # a last component over 100 characters


def payload(size: int, seed: int) -> bytes:
    """``size`` bytes of a pattern that differs per ``seed``."""
    pattern = bytes((seed * 7 + i) % 256 for i in range(256))
    return (pattern * (size // 256 + 1))[:size]


def sample_fields(index: int, bin_size: int, txt_ext: str = "txt") -> dict[str, bytes]:
    """File extension -> contents for one sample."""
    return {
        "cls": str(index).encode(),
        txt_ext: f"échantillon {index}: ünïcödé".encode(),
        "json": json.dumps({"index": index}).encode(),
        "bin": payload(bin_size, index),
    }


def dataset(variant: str = "full") -> dict[str, dict[str, bytes]]:
    """Key -> {extension: contents}. The ``"ustar"`` variant leaves out the names ustar cannot
    store (over 255 characters, or a last component over 100), ``"v7"`` all names over 99."""
    samples = {
        "0000": sample_fields(0, 0),
        "0001": sample_fields(1, 512),
        "0002": sample_fields(2, 513),
        "0003": sample_fields(3, 70_000),
        "0004": sample_fields(4, 65_536),
        "données/échantillon-05": sample_fields(5, 1),
        "données/échantillon-06": sample_fields(6, 1023),
        "zz/Mixed-Case-11": sample_fields(11, 7, txt_ext="TXT"),
    }
    if variant != "v7":
        samples[f"{DEEP}/sample-0007"] = sample_fields(7, 100)
        samples[f"{DEEP}/sample-0008"] = sample_fields(8, 70_000)
        samples[HUNDRED] = sample_fields(12, 511)
        samples[f"{PREFIX}/sample-0013"] = sample_fields(13, 70_000)
    if variant == "full":
        samples[f"{VERY_DEEP}/sample-0009"] = sample_fields(9, 70_000)
        samples[f"{LONG_COMPONENT}-0010"] = sample_fields(10, 2048)
    return samples


def variant_for(fmt: str | None) -> str:
    """The dataset variant that an archive format can store."""
    return fmt if fmt in ("ustar", "v7") else "full"


def expected_samples(data: dict[str, dict[str, bytes]], prefix: str = "") -> dict[str, Fields]:
    """What the grouper must make of ``data``: key -> {lower-cased field: contents}."""
    return {
        prefix + key: {ext.lower(): value for ext, value in fields.items()}
        for key, fields in data.items()
    }


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` (relative name -> contents) under ``root``, all with mtime 0."""
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (0, 0))
    return root


def member_files(data: dict[str, dict[str, bytes]]) -> dict[str, bytes]:
    """Member name -> contents, sorted by name (so each sample's members are consecutive)."""
    files = {f"{key}.{ext}": value for key, fields in data.items() for ext, value in fields.items()}
    return dict(sorted(files.items()))


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The dataset on disk, one tree per variant."""
    base = tmp_path_factory.mktemp("trees")
    return {
        variant: write_tree(base / variant, member_files(dataset(variant)))
        for variant in ("full", "ustar", "v7")
    }


# --- Writers -------------------------------------------------------------------------------

COMPRESSION_SUFFIX = {"": "", "gz": ".gz", "bz2": ".bz2", "xz": ".xz", "zst": ".zst"}
GNU_COMPRESSION_FLAG = {"": [], "gz": ["-z"], "bz2": ["-j"], "xz": ["-J"], "zst": ["--zstd"]}
COMPRESSOR_TOOL = {"gz": "gzip", "bz2": "bzip2", "xz": "xz", "zst": "zstd"}


def run_tool(args: Sequence[str], cwd: Path | None = None) -> None:
    """Run a writer in a UTF-8 locale (so non-ASCII names are stored as UTF-8)."""
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True)
    assert result.returncode == 0, f"{args[0]} failed: {result.stderr.decode(errors='replace')}"


def list_file(directory: Path, names: Sequence[str]) -> Path:
    """A ``-T`` file naming ``names``, one per line, in order."""
    path = directory / "names.lst"
    path.write_bytes(b"".join(os.fsencode(name) + b"\n" for name in names))
    return path


def gnu_tar(
    out: Path,
    tree: Path,
    fmt: str = "gnu",
    compression: str = "",
    names: Sequence[str] | None = None,
    options: Sequence[str] = (),
) -> Path:
    """Archive ``tree`` with GNU tar: the whole tree as ``./...`` with ``--sort=name``, or only
    ``names`` (relative, no ``./``), in the order given."""
    tar = shardgen.require_tool("tar")
    if compression:
        shardgen.require_tool(COMPRESSOR_TOOL[compression])
    args = [tar, "-c", "-f", str(out), f"--format={fmt}", *GNU_COMPRESSION_FLAG[compression]]
    args += ["--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "--sort=name", *options]
    if names is None:
        args += ["-C", str(tree), "."]
    else:
        args += ["-C", str(tree), "--no-recursion", "-T", str(list_file(out.parent, names))]
    run_tool(args)
    return out


def bsdtar(
    out: Path, tree: Path, names: Sequence[str], fmt: str | None = None, gzip: bool = False
) -> Path:
    """Archive ``names`` of ``tree`` with bsdtar, in the order given (it has no ``--sort``)."""
    args = [shardgen.require_tool("bsdtar"), "-c", "-f", str(out), "--uid", "0", "--gid", "0"]
    if fmt is not None:
        args += ["--format", fmt]
    if gzip:
        args.append("-z")
    args += ["-T", str(list_file(out.parent, names))]
    run_tool(args, cwd=tree)
    return out


def python_tar(out: Path, files: dict[str, bytes], fmt: int, compression: str = "") -> Path:
    """Archive ``files`` with Python's tarfile: in memory for plain and zstd archives, through
    ``tarfile.open(path, "w:gz")`` and the like for the compressions tarfile knows."""
    members = list(files.items())
    if compression in ("", "zst"):
        data = shardgen.make_tar(members, format=fmt)
        out.write_bytes(zstandard.compress(data) if compression else data)
        return out
    with tarfile.open(out, f"w:{compression}", format=fmt) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out


# --- Readers -------------------------------------------------------------------------------


def ours(urls: str | Sequence[str]) -> list[Sample]:
    """The samples wdspipes reads."""
    samples = list(wds.DataPipeline(wds.SimpleShardList(urls), wds.tarfile_to_samples()))
    for sample in samples:
        for field, value in sample.items():
            if not field.startswith("__"):
                assert type(value) is bytes, f"{field} of {sample['__key__']}: {type(value)}"
    return samples


def theirs(urls: Sequence[str]) -> list[Sample]:
    """The samples webdataset reads. Its tarfile cannot read zstd (before Python 3.14), so those
    shards are given to it decompressed, and their URLs are put back afterwards."""
    readable = {url: _tarfile_readable(url) for url in urls}
    original = {copy: url for url, copy in readable.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # webdataset leaks one open file per shard
        pipeline = wdsref.DataPipeline(
            wdsref.SimpleShardList(list(readable.values())), wdsref.tarfile_to_samples()
        )
        samples = list(pipeline)
        del pipeline
        gc.collect()
    for sample in samples:
        sample["__url__"] = original[sample["__url__"]]
    return samples


def _tarfile_readable(url: str) -> str:
    if not url.endswith(".zst"):
        return url
    copy = Path(url + ".decompressed.tar")
    compressed = io.BytesIO(Path(url).read_bytes())
    copy.write_bytes(zstandard.ZstdDecompressor().stream_reader(compressed).read())
    return str(copy)


def items(samples: list[Sample]) -> list[list[tuple[str, Any]]]:
    """Samples as lists of pairs, so that comparing them compares field order too."""
    return [list(sample.items()) for sample in samples]


def assert_same_as_webdataset(urls: Sequence[str]) -> list[Sample]:
    """Both libraries read ``urls`` to the same non-empty samples; returns wdspipes's."""
    got = ours(urls)
    assert got, "no samples: the comparison would prove nothing"
    assert items(got) == items(theirs(urls))
    return got


def contents(samples: list[Sample]) -> dict[str, Fields]:
    """Key -> fields, asserting that no key appears twice."""
    result = {sample["__key__"]: strip_meta(sample) for sample in samples}
    assert len(result) == len(samples), "a key was split over several samples"
    return result


def strip_meta(sample: Sample) -> Fields:
    return {field: value for field, value in sample.items() if not field.startswith("__")}


def tree_names(tree: Path) -> list[str]:
    """The regular files under ``tree``, relative and sorted."""
    return sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())


# --- The dataset through every writer -------------------------------------------------------

GNU_FORMATS = ["gnu", "posix", "ustar"]
GNU_OLD_FORMATS = ["oldgnu", "v7"]  # v7 marks regular files with a NUL type, as old tars did
COMPRESSIONS = ["", "gz", "bz2", "xz", "zst"]


def compression_id(compression: str) -> str:
    return compression or "plain"


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=compression_id)
@pytest.mark.parametrize("fmt", GNU_FORMATS)
def test_gnu_tar_whole_tree(
    trees: dict[str, Path], tmp_path: Path, fmt: str, compression: str
) -> None:
    """``tar -C dir .``: keys start with ``./``, directory entries come along and are skipped."""
    variant = variant_for(fmt)
    out = tmp_path / f"shard.tar{COMPRESSION_SUFFIX[compression]}"
    gnu_tar(out, trees[variant], fmt, compression)
    got = assert_same_as_webdataset([str(out)])
    assert contents(got) == expected_samples(dataset(variant), prefix="./")


@pytest.mark.parametrize("fmt", GNU_FORMATS + GNU_OLD_FORMATS)
def test_gnu_tar_named_files(trees: dict[str, Path], tmp_path: Path, fmt: str) -> None:
    """``tar -T list``: plain relative names, no directory entries."""
    variant = variant_for(fmt)
    out = gnu_tar(tmp_path / "shard.tar", trees[variant], fmt, names=tree_names(trees[variant]))
    got = assert_same_as_webdataset([str(out)])
    assert contents(got) == expected_samples(dataset(variant))


BSDTAR_FORMATS = [None, "ustar", "pax", "gnutar"]


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("fmt", BSDTAR_FORMATS, ids=lambda fmt: fmt or "default")
def test_bsdtar(trees: dict[str, Path], tmp_path: Path, fmt: str | None, gzip: bool) -> None:
    variant = variant_for(fmt)
    out = tmp_path / ("shard.tar.gz" if gzip else "shard.tar")
    bsdtar(out, trees[variant], tree_names(trees[variant]), fmt, gzip)
    got = assert_same_as_webdataset([str(out)])
    assert contents(got) == expected_samples(dataset(variant))


PYTHON_FORMATS = {
    "ustar": tarfile.USTAR_FORMAT,
    "gnu": tarfile.GNU_FORMAT,
    "pax": tarfile.PAX_FORMAT,
}


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=compression_id)
@pytest.mark.parametrize("fmt", list(PYTHON_FORMATS))
def test_python_tarfile(tmp_path: Path, fmt: str, compression: str) -> None:
    data = dataset(variant_for(fmt))
    out = tmp_path / f"shard.tar{COMPRESSION_SUFFIX[compression]}"
    python_tar(out, member_files(data), PYTHON_FORMATS[fmt], compression)
    got = assert_same_as_webdataset([str(out)])
    assert contents(got) == expected_samples(data)


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"], ids=["plain", "gz"])
def test_webdataset_tarwriter(tmp_path: Path, suffix: str) -> None:
    written = [
        {"__key__": key, "txt": f"texte {index} ü", "cls": index, "bin": fields["bin"]}
        for index, (key, fields) in enumerate(dataset("full").items())
    ]
    out = tmp_path / f"shard{suffix}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with wdsref.TarWriter(str(out), mtime=0) as writer:
            for sample in written:
                writer.write(sample)
    got = assert_same_as_webdataset([str(out)])
    assert contents(got) == {
        sample["__key__"]: {
            "bin": sample["bin"],
            "cls": str(sample["cls"]).encode(),
            "txt": sample["txt"].encode(),
        }
        for sample in written
    }


# --- Names and grouping (FORMAT.md sections 3 and 4) ----------------------------------------

# In archive order. Names with the same key (a.seg.jpg, a., a..b) are kept apart by others, so
# that every kept name is a sample of its own.
EDGE_NAMES: list[tuple[str, tuple[str, str] | None]] = [
    ("a.seg.jpg", ("a", "seg.jpg")),
    ("dir.x/file.jpg", ("dir.x/file", "jpg")),
    ("a.", ("a", "")),
    ("a/b.c/d.e", ("a/b.c/d", "e")),
    ("a..b", ("a", ".b")),
    ("a/b/c.tar.gz", ("a/b/c", "tar.gz")),
    (".hidden", None),
    ("a/.jpg", ("a/", "jpg")),
    (".hidden.jpg", None),
    ("dir/.x.jpg", ("dir/", "x.jpg")),
    ("noext", None),
    ("sample 1.jpg", ("sample 1", "jpg")),
    ("x/y.z/w", None),
    ("A.JPG", ("A", "jpg")),
    ("__meta__", None),
    ("__x__/foo.jpg", None),
    ("données/échantillon-01.txt", ("données/échantillon-01", "txt")),
]


def edge_tar(tmp_path: Path, writer: str) -> Path:
    tree = write_tree(tmp_path / "edge", {name: name.encode() for name, _ in EDGE_NAMES})
    names = [name for name, _ in EDGE_NAMES]
    if writer == "gnu-tar":
        return gnu_tar(tmp_path / "edge.tar", tree, names=names)
    return bsdtar(tmp_path / "edge.tar", tree, names)


@pytest.mark.parametrize("writer", ["gnu-tar", "bsdtar"])
def test_edge_names(tmp_path: Path, writer: str) -> None:
    got = assert_same_as_webdataset([str(edge_tar(tmp_path, writer))])
    expected = [(split[0], {split[1]: name.encode()}) for name, split in EDGE_NAMES if split]
    assert [(sample["__key__"], strip_meta(sample)) for sample in got] == expected


@pytest.mark.parametrize(
    ("second_shard", "expected"),
    [
        (["1.a", "2.a"], [("0", ["a"]), ("1", ["a"]), ("1", ["a"]), ("2", ["a"])]),
        (["1.b", "2.a"], [("0", ["a"]), ("1", ["a"]), ("1", ["b"]), ("2", ["a"])]),
    ],
    ids=["same-field", "other-field"],
)
def test_no_sample_spans_shards(
    tmp_path: Path, second_shard: list[str], expected: list[tuple[str, list[str]]]
) -> None:
    """The last key of one shard equals the first of the next: two samples, not one (and no
    duplicate field error when both have the same field)."""
    first = write_names(tmp_path / "first.tar", ["0.a", "1.a"])
    second = write_names(tmp_path / "second.tar", second_shard)
    got = assert_same_as_webdataset([first, second])
    assert [(s["__key__"], list(strip_meta(s))) for s in got] == expected
    assert [s["__url__"] for s in got] == [first, first, second, second]


def test_interleaved_names_make_separate_samples(tmp_path: Path) -> None:
    shard = write_names(tmp_path / "interleaved.tar", ["0.a", "1.a", "0.b"])
    got = assert_same_as_webdataset([shard])
    assert [(s["__key__"], strip_meta(s)) for s in got] == [
        ("0", {"a": b"0.a"}),
        ("1", {"a": b"1.a"}),
        ("0", {"b": b"0.b"}),
    ]


def write_names(path: Path, names: Sequence[str]) -> str:
    """A tarfile shard of ``names``, in order, each holding its own name."""
    path.write_bytes(shardgen.make_tar((name, name.encode()) for name in names))
    return str(path)


# --- Members that are not sample files --------------------------------------------------------

NOT_UTF8 = os.fsdecode(b"caf\xe9")  # a name that is not UTF-8: kept as a surrogate escape


def special_tree(root: Path) -> Path:
    """Regular files among links, a FIFO and directories; a hard link's first occurrence is the
    regular file, the later one a link entry."""
    write_tree(root, {"0.txt": b"a", "1.txt": b"b", "3.txt": b"c", f"{NOT_UTF8}.txt": b"d"})
    os.link(root / "1.txt", root / "1.hard")  # archived first: "1.hard" < "1.txt"
    os.symlink("0.txt", root / "0.lnk")
    os.symlink("x" * 150 + ".target", root / ("2." + "y" * 120))  # long name and link name
    os.mkfifo(root / "3.fifo")
    return root


SPECIAL_SAMPLES = {
    "0": {"txt": b"a"},
    "1": {"hard": b"b"},
    "3": {"txt": b"c"},
    NOT_UTF8: {"txt": b"d"},
}


def special_tar(tmp_path: Path, writer: str) -> tuple[Path, str]:
    """The special tree archived by ``writer``; returns the shard and the prefix of its names."""
    tree = special_tree(tmp_path / "special")
    names = sorted(p.name for p in tree.iterdir())
    out = tmp_path / "special.tar"
    if writer == "gnu-tar-gnu":
        return gnu_tar(out, tree, "gnu"), "./"
    if writer == "gnu-tar-posix-global":
        return gnu_tar(out, tree, "posix", options=["--pax-option=comment=global"]), "./"
    if writer == "bsdtar-default":
        return bsdtar(out, tree, names), ""
    if writer == "bsdtar-pax":
        return bsdtar(out, tree, names, "pax"), ""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "g"}) as tar:
        for name in names:
            tar.add(tree / name, arcname=name, recursive=False)
    return out, ""


@pytest.mark.parametrize(
    "writer",
    ["gnu-tar-gnu", "gnu-tar-posix-global", "bsdtar-default", "bsdtar-pax", "tarfile-pax-global"],
)
def test_links_fifos_and_directories_are_skipped(tmp_path: Path, writer: str) -> None:
    """Hard and symbolic links (with GNU long-name and long-link headers or PAX records), a FIFO
    and directories are no sample files; global PAX headers change nothing; offsets still match."""
    out, prefix = special_tar(tmp_path, writer)
    got = assert_same_as_webdataset([str(out)])
    assert contents(got) == expected_samples(SPECIAL_SAMPLES, prefix)
    assert list(our_members(out)) == tarfile_members(out)


# --- Several shards in one pipeline ---------------------------------------------------------


@pytest.fixture
def mixed_shards(trees: dict[str, Path], tmp_path: Path) -> list[str]:
    """Three shards by three writers: GNU tar (gzip, ``./`` names), bsdtar (pax), tarfile."""
    return [
        str(gnu_tar(tmp_path / "gnu.tar.gz", trees["full"], "posix", "gz")),
        str(bsdtar(tmp_path / "bsd.tar", trees["full"], tree_names(trees["full"]), "pax")),
        str(python_tar(tmp_path / "py.tar", member_files(dataset("ustar")), tarfile.USTAR_FORMAT)),
    ]


def test_shards_in_one_pipeline_concatenate(mixed_shards: list[str]) -> None:
    got = assert_same_as_webdataset(mixed_shards)
    one_by_one = [sample for url in mixed_shards for sample in ours([url])]
    assert items(got) == items(one_by_one)
    assert len(got) == 2 * len(dataset("full")) + len(dataset("ustar"))
    assert [s["__url__"] for s in got] == [s["__url__"] for s in one_by_one]


def test_brace_spec_reads_the_listed_shards(mixed_shards: list[str]) -> None:
    directory = Path(mixed_shards[0]).parent
    got = ours(f"{directory}/{{gnu.tar.gz,bsd.tar,py.tar}}")
    assert len(got) == 2 * len(dataset("full")) + len(dataset("ustar"))
    assert items(got) == items(ours(mixed_shards))
    assert items(got) == items(theirs(mixed_shards))


# --- Member offsets ------------------------------------------------------------------------


def tarfile_members(path: Path) -> list[tuple[str, bytes, int]]:
    """Regular members as tarfile sees them: name, data, offset of the first header."""
    with tarfile.open(path, "r:*") as archive:
        return [
            (info.name, archive.extractfile(info).read(), info.offset)
            for info in archive
            if info.isreg()
        ]


def our_members(path: Path) -> Iterator[tuple[str, bytes, int]]:
    with path.open("rb") as stream:
        for member in wds.iter_tar(stream, str(path)):
            yield member.name, member.data, member.offset


def extension_headers_before(path: Path) -> int:
    """How many regular members have extension headers (GNU long names, PAX) before them."""
    with tarfile.open(path, "r:*") as archive:
        return sum(info.offset_data - info.offset > shardgen.BLOCK for info in archive)


OFFSET_CASES = {
    "gnu-tar-gnu": ("gnu-tar", "gnu", ""),
    "gnu-tar-posix": ("gnu-tar", "posix", ""),
    "gnu-tar-ustar": ("gnu-tar", "ustar", ""),
    "gnu-tar-oldgnu": ("gnu-tar", "oldgnu", ""),
    "gnu-tar-v7": ("gnu-tar", "v7", ""),
    "gnu-tar-posix-gz": ("gnu-tar", "posix", "gz"),
    "bsdtar-gnutar": ("bsdtar", "gnutar", ""),
    "bsdtar-pax": ("bsdtar", "pax", ""),
    "tarfile-gnu": ("tarfile", "gnu", ""),
    "tarfile-pax": ("tarfile", "pax", ""),
    "tarfile-ustar": ("tarfile", "ustar", ""),
}


@pytest.mark.parametrize("case", list(OFFSET_CASES))
def test_member_offsets_match_tarfile(trees: dict[str, Path], tmp_path: Path, case: str) -> None:
    writer, fmt, compression = OFFSET_CASES[case]
    variant = variant_for(fmt)
    tree = trees[variant]
    out = tmp_path / f"shard.tar{COMPRESSION_SUFFIX[compression]}"
    if writer == "gnu-tar":
        gnu_tar(out, tree, fmt, compression)
    elif writer == "bsdtar":
        bsdtar(out, tree, tree_names(tree), fmt)
    else:
        python_tar(out, member_files(dataset(variant)), PYTHON_FORMATS[fmt])
    got = list(our_members(out))
    assert len(got) == sum(len(fields) for fields in dataset(variant).values())
    assert got == tarfile_members(out)
    if variant == "full":  # the long names really are stored in extension headers
        assert extension_headers_before(out) > 0
