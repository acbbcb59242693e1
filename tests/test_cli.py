"""The ``wdspipes`` command, run as installed (a subprocess of the entry point), on shards written
by tarfile and GNU tar. Each subprocess imports torch (2 to 3 s), so tests that need several
runs start them together."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from shardgen import make_tar, require_tool, sample_members, write_shards

import wdspipes
from wdspipes.cli import cli, main
from wdspipes.cli.cat import slice_items
from wdspipes.cli.common import parse_size
from wdspipes.cli.show import PAD
from wdspipes.read.grouping import SampleGrouper
from wdspipes.read.opener import ShardOpener
from wdspipes.read.shards import ShardList
from wdspipes.read.tar import TarLoader

WDSPIPES = Path(sys.executable).parent / "wdspipes"
pytestmark = pytest.mark.slow  # nearly every test runs the wdspipes command in a new process


@dataclass
class Result:
    returncode: int
    stdout: bytes
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout.decode()

    @property
    def error_lines(self) -> list[str]:
        return self.stderr.splitlines()


def start(*args: str | Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(WDSPIPES), *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
    )


def finish(process: subprocess.Popen[bytes]) -> Result:
    stdout, stderr = process.communicate(timeout=120)
    result = Result(process.returncode, stdout, stderr.decode())
    assert "Traceback" not in result.stderr, result.stderr
    assert b"Traceback" not in result.stdout
    return result


def run(*args: str | Path, cwd: Path | None = None) -> Result:
    return finish(start(*args, cwd=cwd))


def read_back(url: str | Path) -> list[dict[str, object]]:
    """The samples of a shard as wdspipes reads them, without ``__url__``."""
    pipe = SampleGrouper(TarLoader(ShardOpener(ShardList([str(url)]))))
    return [{k: v for k, v in sample.items() if k != "__url__"} for sample in pipe]


def samples_of(members: list[tuple[str, bytes]]) -> list[dict[str, object]]:
    """The samples that members in sorted order give (one field per member)."""
    samples: list[dict[str, object]] = []
    for name, data in members:
        key, field = name.split(".", 1)
        if not samples or samples[-1]["__key__"] != key:
            samples.append({"__key__": key})
        samples[-1][field] = data
    return samples


def assert_one_error_line(result: Result, *names: str) -> str:
    assert result.returncode == 1, result
    lines = result.error_lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("wdspipes: error: "), lines
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


# --- the command itself ---------------------------------------------------------------------


def test_version_from_the_installed_entry_point() -> None:
    result = run("--version")
    assert result.returncode == 0
    assert result.text.strip() == f"wdspipes, version {wdspipes.__version__}"


@pytest.mark.parametrize("command", ["create", "info", "cat", "show"])
def test_each_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Usage: wdspipes {command} ")
    assert "Options:" in out
    assert main(["--help"]) == 0
    assert f"  {command} " in capsys.readouterr().out


def test_bad_arguments_exit_2_with_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cat", "a.tar"]) == 2
    err = capsys.readouterr().err
    assert "Usage: wdspipes cat" in err and "Missing option '-o'" in err
    assert main(["cat", "a.tar", "-o", "b.tar", "--slice", "1:2:3"]) == 2
    assert "a slice is START:STOP" in capsys.readouterr().err
    assert main(["nosuchcommand"]) == 2


# --- create ---------------------------------------------------------------------------------


def write_tree(root: Path) -> dict[str, bytes]:
    """A source tree whose tar order differs from a plain sort of the paths (b/1.txt before
    b.txt), with spaces, non-ASCII, empty and binary files; returns name -> contents."""
    files = {
        "0001.cls": b"3",
        "0001.jpg": bytes(range(256)) * 5,
        "0002.cls": b"",
        "0002.jpg": b"\xff\xd8 not really a jpeg",
        "a-1.txt": b"dash",
        "b/1.txt": b"in a directory",
        "b/c/2.seg.png": b"deeper",
        "b.txt": b"next to the directory",
        "sub dir/x y.txt": b"spaces",
        "\u00e9t\u00e9.txt": b"accents",
    }
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def test_create_from_a_directory_matches_gnu_tar(tmp_path: Path) -> None:
    tar = require_tool("tar")
    source = tmp_path / "src"
    files = write_tree(source)
    (source / "link.txt").symlink_to("b.txt")
    (source / "b" / "linked").symlink_to("c")

    result = run("create", tmp_path / "ours.tar", source)

    assert result.returncode == 0, result.stderr
    warnings = result.error_lines
    assert len(warnings) == 2 and all("symbolic link" in line for line in warnings), warnings
    assert "10 members in 8 samples" in result.text and "ours.tar" in result.text
    theirs = tmp_path / "theirs.tar"
    subprocess.run([tar, "--sort=name", "-C", source, "-cf", theirs, "."], check=True)
    listed = subprocess.run(
        [tar, "--quoting-style=literal", "-tf", tmp_path / "ours.tar"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    with tarfile.open(theirs) as archive:
        gnu = [m.name.removeprefix("./") for m in archive if m.isreg()]
    assert listed == gnu
    assert listed != sorted(files)  # the tree is one where the two orders differ
    with tarfile.open(tmp_path / "ours.tar") as archive:
        contents = {m.name: archive.extractfile(m).read() for m in archive}
    assert contents == files
    samples = read_back(tmp_path / "ours.tar")
    keys = ["0001", "0002", "a-1", "b/1", "b/c/2", "b", "sub dir/x y", "\u00e9t\u00e9"]
    assert [s["__key__"] for s in samples] == keys
    assert samples[0] == {"__key__": "0001", "cls": b"3", "jpg": files["0001.jpg"]}
    assert samples[1]["cls"] == b""
    assert samples[4] == {"__key__": "b/c/2", "seg.png": b"deeper"}


def test_create_from_a_recipe_in_its_order(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "one.bin").write_bytes(b"\x00\x01")
    (tmp_path / "data" / "label one.txt").write_bytes(b"1")
    (tmp_path / "data" / "two.bin").write_bytes(b"two")
    recipe = tmp_path / "recipe.txt"
    recipe.write_text(
        "# archive-name  source-path (relative to this file)\n"
        "\n"
        "k2.bin      data/two.bin\n"
        "k1.bin      data/one.bin   # trailing comment\n"
        "k1.cls      'data/label one.txt'\n"
    )

    result = run("create", tmp_path / "out.tar.gz", recipe)

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "3 members in 2 samples" in result.text and "gz-compressed" in result.text
    assert (tmp_path / "out.tar.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert read_back(tmp_path / "out.tar.gz") == [
        {"__key__": "k2", "bin": b"two"},
        {"__key__": "k1", "bin": b"\x00\x01", "cls": b"1"},
    ]


@pytest.mark.parametrize(
    ("recipe", "problem"),
    [
        ("# fine so far\na.txt a.txt\n\nb.txt\n", "line 4: expected 'archive-name source-path'"),
        ("a.txt missing.bin\n", "line 1: source"),
        ("a.txt a.txt\na.txt a.txt\n", "line 2: archive name 'a.txt' is already on line 1"),
        ("a.txt 'a.txt\n", "line 1: no closing quotation"),
    ],
)
def test_create_reports_the_bad_recipe_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], recipe: str, problem: str
) -> None:
    (tmp_path / "a.txt").write_bytes(b"a")
    (tmp_path / "recipe.txt").write_text(recipe)
    assert main(["create", str(tmp_path / "out.tar"), str(tmp_path / "recipe.txt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("wdspipes: error: ") and err.count("\n") == 1
    assert f"recipe.txt, {problem}" in err
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "recipe.txt"]  # no output, no temporary


def test_create_refuses_a_missing_source_an_empty_tree_and_a_binary_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["create", str(tmp_path / "o.tar"), str(tmp_path / "nothing")]) == 1
    assert "nothing: no such file or directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["create", str(tmp_path / "o.tar"), str(tmp_path / "empty")]) == 1
    assert "holds no regular files" in capsys.readouterr().err
    (tmp_path / "s.tar").write_bytes(make_tar(sample_members(["a"])))
    assert main(["create", str(tmp_path / "o.tar"), str(tmp_path / "s.tar")]) == 1
    assert "s.tar: not a recipe" in capsys.readouterr().err
    assert not (tmp_path / "o.tar").exists()


# --- info -----------------------------------------------------------------------------------


KNOWN_MEMBERS = [
    ("0.cls", b"7"),
    ("0.jpg", b"J" * 1000),
    ("1.cls", b"8"),
    ("1.jpg", b"K" * 700),
    ("1.seg.png", b"P" * 30),
    ("2.cls", b"9"),
]


def test_info_counts_fields_and_bytes_and_detects_compression(tmp_path: Path) -> None:
    plain = make_tar(KNOWN_MEMBERS)
    (tmp_path / "s.tar").write_bytes(plain)
    (tmp_path / "s.tar.gz").write_bytes(gzip.compress(plain))
    (tmp_path / "s.tar.bz2").write_bytes(bz2.compress(plain))
    (tmp_path / "s.xz").write_bytes(lzma.compress(plain))  # by magic bytes, not by name

    result = run("info", "--json", "s.tar{,.gz,.bz2}::s.xz", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    shards = report["shards"]
    assert [s["url"] for s in shards] == ["s.tar", "s.tar.gz", "s.tar.bz2", "s.xz"]
    assert [s["compression"] for s in shards] == [None, "gzip", "bzip2", "xz"]
    for shard in shards:
        assert shard["samples"] == 3 and shard["members"] == 6
        assert shard["data_bytes"] == 1733
        assert shard["fields"] == {
            "cls": {"samples": 3, "bytes": 3},
            "jpg": {"samples": 2, "bytes": 1700},
            "seg.png": {"samples": 1, "bytes": 30},
        }
        assert shard["problems"] == []
        assert shard["size"] == (tmp_path / shard["url"]).stat().st_size
    total = report["total"]
    assert total["shards"] == 4 and total["samples"] == 12 and total["members"] == 24
    assert total["fields"]["jpg"] == {"samples": 8, "bytes": 6800}
    assert total["shards_with_problems"] == 0 and total["problems"] == 0


def test_info_reports_every_problem_and_goes_on(tmp_path: Path) -> None:
    good = make_tar(sample_members(["a", "b"]))
    write = {
        "good.tar": good,
        "unsorted.tar": make_tar([("a.cls", b"1"), ("b.cls", b"2"), ("a.txt", b"x")]),
        "duplicate.tar": make_tar([("a.cls", b"1"), ("a.txt", b"x"), ("a.cls", b"2")]),
        "nofield.tar": make_tar([("a.cls", b"1"), ("README", b"hello")]),
        "truncated.tar": make_tar([("a.cls", b"1"), ("a.bin", b"z" * 2000)])[: 1024 + 700],
        "notatar.tar": b"this is not a tar archive\n" * 40,
        "good2.tar": good,
    }
    for name, data in write.items():
        (tmp_path / name).write_bytes(data)

    result = run("info", "--json", *write, "missing.tar", cwd=tmp_path)

    assert result.returncode == 1
    line = assert_one_error_line(result, "6 of 8 shards")
    for name in ("unsorted.tar", "duplicate.tar", "nofield.tar", "truncated.tar", "notatar.tar"):
        assert name in line
    report = json.loads(result.stdout)
    shards = {shard["url"]: shard for shard in report["shards"]}
    assert list(shards) == [*write, "missing.tar"]
    kinds = {url: [p["kind"] for p in shard["problems"]] for url, shard in shards.items()}
    assert kinds == {
        "good.tar": [],
        "unsorted.tar": ["unsorted-keys"],
        "duplicate.tar": ["duplicate-field"],
        "nofield.tar": ["no-field"],
        "truncated.tar": ["read-error"],
        "notatar.tar": ["read-error"],
        "good2.tar": [],
        "missing.tar": ["read-error"],
    }
    unsorted = shards["unsorted.tar"]["problems"][0]
    assert (unsorted["member"], unsorted["offset"], unsorted["count"]) == ("a.txt", 2048, 1)
    assert shards["unsorted.tar"]["samples"] == 3
    duplicate = shards["duplicate.tar"]["problems"][0]
    assert (duplicate["member"], duplicate["offset"]) == ("a.cls", 2048)
    assert shards["nofield.tar"]["problems"][0]["member"] == "README"
    truncated = shards["truncated.tar"]["problems"][0]
    assert truncated["member"] == "a.bin" and truncated["offset"] is not None
    assert "truncated.tar" in truncated["message"] and "ends" in truncated["message"]
    assert shards["truncated.tar"]["members"] == 1  # the member before the damage
    notatar = shards["notatar.tar"]["problems"][0]
    assert notatar["offset"] == 0 and "not a tar archive" in notatar["message"]
    assert "no such file" in shards["missing.tar"]["problems"][0]["message"]
    assert shards["good2.tar"]["samples"] == 2 and shards["good2.tar"]["fields"]["txt"] == {
        "samples": 2,
        "bytes": 10,
    }
    assert report["total"]["shards_with_problems"] == 6


def test_info_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.tar").write_bytes(make_tar(KNOWN_MEMBERS))
    (tmp_path / "bad.tar").write_bytes(make_tar([("a.cls", b"1"), ("b.cls", b"2"), ("a.txt", b"")]))
    assert main(["info", str(tmp_path / "s.tar"), str(tmp_path / "bad.tar")]) == 1
    out, err = capsys.readouterr()
    assert "s.tar: 3 samples, 6 members, 1.7 KiB of data; 10.0 KiB, uncompressed" in out
    assert re.search(r"^  jpg +2 +1,700$", out, re.M)
    assert "PROBLEM unsorted-keys: key 'a' comes again" in out
    assert "total: 2 shards, 6 samples, 9 members" in out
    assert err == f"wdspipes: error: 1 of 2 shards with problems: {tmp_path / 'bad.tar'}\n"


def test_info_bench_times_reading_and_says_where_the_time_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write_shards(tmp_path, nshards=3, samples_per_shard=4)
    spec = f"pipe:cat {tmp_path}/shard-{{000..002}}.tar"
    assert main(["info", "--bench", "--json", spec]) == 0
    report = json.loads(capsys.readouterr().out)["bench"]
    assert report["shards"] == 3 and report["samples"] == 12 and report["members"] == 24
    assert report["bytes"] == sum(os.path.getsize(p) for p in paths)
    assert 0 <= report["waited"] <= report["seconds"] and report["first_sample"] > 0
    assert report["verdict"].startswith(("I/O bound", "not I/O bound"))
    stages = report["stages"]["stages"]
    assert [(stage["stage"], stage["items"]) for stage in stages] == [
        ("ShardList", 3),
        ("open_shards", 3),
        ("MeasuredShards", 3),
        ("load_tar + group_samples", 12),
    ]
    assert report["stages"]["bottleneck"] in {"consumer", *(stage["stage"] for stage in stages)}
    assert main(["info", "--bench", "--connections", "0", spec]) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"read 3 shards, 0\.0 MB, 12 samples in .* s: .* MB/s, .*", out[0])
    assert re.fullmatch(r"first sample after .* s", out[1])
    assert out[2] == "read-ahead off: waits not measured"
    assert out[3].split() == [
        "stage",
        "items",
        "busy",
        "s",
        "waiting",
        "s",
        "threads",
        "s",
        "in",
        "flight",
    ]
    assert out[7].split()[:2] == ["load_tar", "+"] and out[-1].startswith("bottleneck: ")
    assert main(["info", "--connections", "2", spec]) == 2  # a usage error
    assert "--connections goes with --bench" in capsys.readouterr().err
    assert main(["info", "--threads", "2", spec]) == 2
    assert "--decode and --threads go with --bench" in capsys.readouterr().err


def test_info_bench_decodes_in_threads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(tmp_path / "s.tar")
    with wdspipes.TarWriter(spec) as writer:
        for index in range(6):
            picture = np.full((8, 8, 3), index, dtype=np.uint8)
            writer.write({"__key__": f"{index:02d}", "png": picture, "cls": index})
    assert main(["info", "--bench", "--json", "--decode", "rgb8", "--threads", "2", spec]) == 0
    stages = json.loads(capsys.readouterr().out)["bench"]["stages"]["stages"]
    assert stages[-1]["stage"] == "decode" and stages[-1]["items"] == 6
    assert stages[-1]["threads"] == 2 and stages[-1]["thread_work_seconds"] > 0


# --- start-up ----------------------------------------------------------------------------

# Runs the command as the entry point does, then says whether torch was loaded.
WITHOUT_TORCH = """
import sys
from wdspipes_command import main  # as the console script launches the command
code = main(sys.argv[1:])
print("torch loaded" if "torch" in sys.modules else "no torch", file=sys.stderr)
sys.exit(code)
"""


def run_watched(*args: str | Path, cwd: Path) -> Result:
    command = [sys.executable, "-c", WITHOUT_TORCH, *map(str, args)]
    done = subprocess.run(command, capture_output=True, cwd=cwd, timeout=120)
    return Result(done.returncode, done.stdout, done.stderr.decode())


LONG_NAME = "a-shard-with-a-name-long-enough-that-the-summary-runs-past-a-hundred-columns.tar"
TEXTS = "texts.tar"
"""A shard of text fields alone: ``show`` reads it and finds no image to decode."""
PICTURES = "pictures.tar"
"""A shard of two PNG images, which ``show`` decodes with Pillow and numpy, without torch."""


@pytest.mark.parametrize(
    ("args", "status"),
    [
        pytest.param(["--help"], 0, id="--help"),
        pytest.param(["--version"], 0, id="--version"),
        *(pytest.param([name, "--help"], 0, id=f"{name} --help") for name in sorted(cli.commands)),
        pytest.param(["create", "new.tar", "src"], 0, id="create"),
        pytest.param(["info", LONG_NAME], 0, id="info"),
        pytest.param(["info", "--bench", f"pipe:cat {LONG_NAME}"], 0, id="info --bench"),
        pytest.param(
            ["info", "--bench", "--decode", "rgb8", "--threads", "2", PICTURES],
            0,
            id="info --bench --decode",
        ),
        pytest.param(["index", LONG_NAME, "-o", "index.json"], 0, id="index"),
        pytest.param(
            ["create", "series-%02d.tar", "src", "--maxcount", "3"],
            0,
            id="create a series",
        ),
        pytest.param(["cat", LONG_NAME, "-o", "copy.tar"], 0, id="cat"),
        pytest.param(
            ["cat", LONG_NAME, "--shuffle", "4", "-o", "shuffled.tar"],
            0,
            id="cat --shuffle",
        ),
        pytest.param(
            ["reshard", LONG_NAME, "-o", "re-%02d.tar", "--maxcount", "3"],
            0,
            id="reshard",
        ),
        pytest.param(["show", TEXTS, "-o", "sheet.png"], 1, id="show"),
        pytest.param(["show", PICTURES, "-o", "sheet.png"], 0, id="show decoding"),
    ],
)
def test_commands_start_without_torch(args: list[str], status: int, tmp_path: Path) -> None:
    """Each command in a new process, which says whether torch was loaded: none needs it,
    ``show`` decoding images included."""
    write_tree(tmp_path / "src")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("no image here")
    (tmp_path / "pictures").mkdir()
    for number in range(2):
        image = Image.new("RGB", (16, 16), (number * 100, 50, 200))
        image.save(tmp_path / "pictures" / f"{number:04d}.png")
    for shard, tree in ((LONG_NAME, "src"), (TEXTS, "texts"), (PICTURES, "pictures")):
        assert main(["create", str(tmp_path / shard), str(tmp_path / tree)]) == 0
    result = run_watched(*args, cwd=tmp_path)
    assert result.returncode == status, (args, result.stderr)
    assert result.error_lines[-1] == "no torch", (args, result.stderr)


def test_create_prints_one_line_when_piped(tmp_path: Path) -> None:
    write_tree(tmp_path / "src")
    created = run("create", LONG_NAME, "src", cwd=tmp_path)
    summary = created.text
    assert len(summary) > 100 and summary.count("\n") == 1, summary  # piped: one line


# --- cat ------------------------------------------------------------------------------------


def test_cat_concatenates_in_order(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, nshards=3, samples_per_shard=4, fields=("cls", "txt", "bin"))
    expected = [s for shard in shards for s in read_back(shard)]

    result = run("cat", "shard-{000..002}.tar", "-o", "all.tar", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert "12 samples (36 members" in result.text and "3 shards to all.tar" in result.text
    assert read_back(tmp_path / "all.tar") == expected
    assert sorted(os.listdir(tmp_path)) == ["all.tar", *(Path(s).name for s in shards)]


def test_cat_writes_to_any_url_the_writers_take(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, nshards=2, samples_per_shard=3)
    expected = [s for shard in shards for s in read_back(shard)]

    result = run("cat", *shards, "-o", "pipe:cat > piped.tar", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert read_back(tmp_path / "piped.tar") == expected
    refused = run("cat", *shards, "-o", "gopher://host/x.tar", cwd=tmp_path)
    assert_one_error_line(refused, "gopher://host/x.tar", "unknown URL scheme")
    assert sorted(os.listdir(tmp_path)) == sorted(["piped.tar", *(Path(s).name for s in shards)])


def test_cat_shuffle_is_a_reproducible_permutation(tmp_path: Path) -> None:
    write_shards(tmp_path, nshards=3, samples_per_shard=10)
    inputs = ["shard-000.tar", "shard-001.tar", "shard-002.tar"]
    ordered = [s for shard in inputs for s in read_back(tmp_path / shard)]
    options = ["--shuffle", "8", "--seed", "5"]

    first = start("cat", *inputs, *options, "-o", "one.tar.gz", cwd=tmp_path)
    second = start("cat", *inputs, *options, "--compress", "gz", "-o", "two.tgz", cwd=tmp_path)
    for result in (finish(first), finish(second)):
        assert result.returncode == 0, result.stderr

    one, two = read_back(tmp_path / "one.tar.gz"), read_back(tmp_path / "two.tgz")
    assert (tmp_path / "one.tar.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert one == two
    assert one != ordered
    assert sorted(one, key=lambda s: str(s["__key__"])) == ordered


def test_cat_slice_to_stdout(tmp_path: Path) -> None:
    shards = write_shards(tmp_path, nshards=2, samples_per_shard=5)
    ordered = [s for shard in shards for s in read_back(shard)]

    result = run("cat", *shards, "--slice", "2:-3", "-o", "-")

    assert result.returncode == 0, result.stderr
    assert "cat: wrote 5 samples" in result.stderr and "standard output" in result.stderr
    (tmp_path / "out.tar").write_bytes(result.stdout)
    assert read_back(tmp_path / "out.tar") == ordered[2:-3]


@pytest.mark.parametrize("length", range(7))
def test_slice_items_is_list_slicing(length: int) -> None:
    bounds = [None, *range(-8, 9)]
    for start_ in bounds:
        for stop in bounds:
            items = list(range(length))
            assert list(slice_items(iter(items), start_, stop)) == items[start_:stop]


# --- show -----------------------------------------------------------------------------------


def png(colour: tuple[int, int, int], size: tuple[int, int] = (40, 20)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, "PNG")
    return buffer.getvalue()


COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30), (30, 200, 200), (9, 9, 9)]


def test_show_draws_a_grid_of_tiles(tmp_path: Path) -> None:
    members = []
    for index, colour in enumerate(COLOURS):
        members += [(f"{index:03d}.cls", str(index).encode()), (f"{index:03d}.png", png(colour))]
    (tmp_path / "images.tar").write_bytes(make_tar(members))

    result = run(
        "show",
        "images.tar",
        "-o",
        "grid.png",
        "--count",
        "5",
        "--columns",
        "2",
        "--size",
        "32",
        cwd=tmp_path,
    )

    assert result.returncode == 0, result.stderr
    assert "5 images from 5 samples of images.tar" in result.text and "grid.png" in result.text
    with Image.open(tmp_path / "grid.png") as sheet:
        assert sheet.format == "PNG"
        sheet = sheet.convert("RGB")
    cell_width, rows = 32 + 2 * PAD, 3
    assert sheet.width == 2 * cell_width
    assert sheet.height % rows == 0
    cell_height = sheet.height // rows
    assert cell_height > 32 + 2 * PAD  # room for the key and the label
    for index, colour in enumerate(COLOURS[:5]):
        left, top = (index % 2) * cell_width, (index // 2) * cell_height
        centre = sheet.getpixel((left + PAD + 16, top + PAD + 16))
        assert all(abs(a - b) <= 2 for a, b in zip(centre, colour, strict=True)), (index, centre)
        text = sheet.crop((left, top + PAD + 32, left + cell_width, top + cell_height))
        assert text.convert("L").getextrema()[0] < 128, f"no text under tile {index}"
    empty = sheet.crop((cell_width, 2 * cell_height, 2 * cell_width, 3 * cell_height))
    assert empty.getextrema() == ((255, 255),) * 3  # the sixth image is not drawn


def test_show_without_images_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "labels.tar").write_bytes(make_tar(sample_members(["a", "b"])))
    output = tmp_path / "grid.png"

    assert main(["show", str(tmp_path / "labels.tar"), "-o", str(output)]) == 1

    err = capsys.readouterr().err
    assert err.startswith("wdspipes: error: ") and err.count("\n") == 1
    assert "labels.tar: no images in 2 samples" in err and "png" in err
    assert not output.exists()


# --- errors ---------------------------------------------------------------------------------


def test_bad_input_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    good = make_tar(sample_members(["a", "b"]))
    (tmp_path / "good.tar").write_bytes(good)
    (tmp_path / "notatar.tar").write_bytes(b"PNG? no, nothing of the sort\n" * 40)
    (tmp_path / "cut.tar").write_bytes(good[:1500])
    cases = {
        ("cat", "missing.tar"): start("cat", "missing.tar", "-o", "out1.tar", cwd=tmp_path),
        ("show", "notatar.tar"): start("show", "notatar.tar", "-o", "grid.png", cwd=tmp_path),
        ("cat", "cut.tar"): start("cat", "good.tar", "cut.tar", "-o", "out2.tar", cwd=tmp_path),
    }
    lines = {
        case: assert_one_error_line(finish(process), case[1]) for case, process in cases.items()
    }

    assert "no such file" in lines["cat", "missing.tar"]
    assert "not a tar archive" in lines["show", "notatar.tar"]
    assert "at byte 1024" in lines["cat", "cut.tar"]
    assert "thrown by __iter__" not in lines["cat", "cut.tar"]
    # nothing written, not even a partial shard or a temporary file
    assert sorted(os.listdir(tmp_path)) == ["cut.tar", "good.tar", "notatar.tar"]


def test_a_failed_reshard_writes_nothing_and_says_so(tmp_path: Path) -> None:
    good = make_tar(sample_members(["a", "b", "c", "d", "e"]))
    (tmp_path / "good.tar").write_bytes(good)
    (tmp_path / "cut.tar").write_bytes(good[:1500])
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "r-000.tar").write_bytes(b"an older r-000.tar")
    runs = {
        out: start(
            "reshard", "good.tar", "cut.tar", "-o", f"{out}/r-%03d.tar", *flags, cwd=tmp_path
        )
        for out, flags in [
            ("ordered", ["--maxcount", "2"]),  # two shards finished before cut.tar fails
            ("shuffled", ["--maxcount", "2", "--shuffle"]),
            ("kept", ["--maxcount", "2"]),
        ]
    }
    for process in runs.values():
        line = assert_one_error_line(finish(process), "cut.tar", "at byte 1024")
        assert line.endswith("; nothing was written")
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["cut.tar", "good.tar", "kept/r-000.tar"]
    assert (tmp_path / "kept" / "r-000.tar").read_bytes() == b"an older r-000.tar"


def test_parse_size_rejects_what_is_not_a_size() -> None:
    with pytest.raises(ValueError, match="not a size: '3X'"):
        parse_size("3X")
    assert parse_size("2 MiB") == 2 << 20 and parse_size("2MB") == 2_000_000
