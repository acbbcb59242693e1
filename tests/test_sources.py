"""tools/sources.py and ``wdspipes create`` with an output pattern: files and class archives
(a tar of per-class tars, ImageNet's layout) as reshard inputs, in order and shuffled."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from shardgen import make_tar

import wdspipes as wds
from wdspipes.cli.create import create
from wdspipes.tools.reshard import reshard_sources
from wdspipes.tools.sources import class_sources, file_sources

CLASSES = ["n01440764", "n01443537", "n01484850"]


@pytest.fixture
def class_archive(tmp_path: Path) -> Path:
    """ImageNet's layout: a tar of class tars (written in an order other than sorted), each
    with 7 JPEG files named WNID_N.JPEG."""
    inner = [
        (f"{wnid}.tar", make_tar([(f"{wnid}_{n}.JPEG", f"{wnid}/{n}".encode()) for n in range(7)]))
        for wnid in reversed(CLASSES)
    ]
    path = tmp_path / "train.tar"
    path.write_bytes(make_tar(inner))
    return path


def labels(paths: list[str]) -> dict[str, bytes]:
    return {s["__key__"]: s["cls"] for s in wds.WebDataset(paths)}


def test_class_archive_gives_each_image_its_class_number(class_archive: Path) -> None:
    sources = class_sources(str(class_archive))
    assert [source.member for source in sources] == [f"{wnid}.tar" for wnid in CLASSES]
    samples = [sample for source in sources for sample in source.samples()]
    assert len(samples) == 21
    assert samples[8] == {"__key__": "n01443537_1", "cls": b"1", "jpg": b"n01443537/1"}


def test_create_writes_shuffled_shards_with_cls_from_a_class_archive(
    class_archive: Path, tmp_path: Path
) -> None:
    pattern = str(tmp_path / "out" / "in1k-%02d.tar")
    args = [pattern, str(class_archive), "--classes", "--maxcount", "5", "--shuffle"]
    result = CliRunner().invoke(create, [*args, "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("create: wrote 21 samples")
    shards = sorted(str(p) for p in (tmp_path / "out").glob("in1k-*.tar"))
    assert len(shards) == 5 and (tmp_path / "out" / "in1k.json").is_file()
    found = labels(shards)
    assert found == {f"{w}_{n}": b"%d" % CLASSES.index(w) for w in CLASSES for n in range(7)}
    assert list(found) != sorted(found)  # shuffled


def test_a_class_archive_with_another_member_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.tar"
    path.write_bytes(make_tar([("n01.tar", make_tar([("a.jpg", b"")])), ("README", b"x")]))
    result = CliRunner().invoke(create, [str(tmp_path / "o-%d.tar"), str(path), "--classes"])
    assert result.exit_code == 1
    assert "'README' is not a class tar (NAME.tar)" in result.output


def test_create_writes_a_series_from_a_directory_in_order(tmp_path: Path) -> None:
    root = tmp_path / "images"
    root.mkdir()
    for n in range(12):
        (root / f"{n:03d}.jpg").write_bytes(b"j%d" % n)
        (root / f"{n:03d}.cls").write_bytes(b"%d" % (n % 3))
    pattern = str(tmp_path / "out" / "s-%d.tar")
    result = CliRunner().invoke(create, [pattern, str(root), "--maxcount", "5"])
    assert result.exit_code == 0, result.output
    shards = [pattern % i for i in range(3)]
    assert sorted(os.listdir(tmp_path / "out")) == ["s-0.tar", "s-1.tar", "s-2.tar", "s.json"]
    samples = list(wds.WebDataset(shards))
    assert [s["__key__"] for s in samples] == [f"{n:03d}" for n in range(12)]
    assert samples[4]["jpg"] == b"j4" and samples[4]["cls"] == b"1"


def test_files_are_cut_into_sources_between_samples_each_sample_written_once(
    tmp_path: Path,
) -> None:
    files = []
    for n in range(30):
        for field in ("a", "b"):
            path = tmp_path / f"{n:02d}.{field}"
            path.write_bytes(b"%d%s" % (n, field.encode()))
            files.append((path.name, str(path)))
    small = file_sources(files, per_source=7)
    assert [len(source.files) for source in small] == [8] * 7 + [4]  # never a sample apart
    one = file_sources(files)
    assert len(one) == 1
    kept = [
        list(
            wds.WebDataset(
                reshard_sources(
                    sources, str(tmp_path / name / "o-%d.tar"), shuffle=True, seed=1, maxcount=7
                ).shards
            )
        )
        for name, sources in (("small", small), ("one", one))
    ]
    assert sorted(s["__key__"] for s in kept[0]) == [f"{n:02d}" for n in range(30)]
    assert sorted(s["__key__"] for s in kept[1]) == [f"{n:02d}" for n in range(30)]


def test_job_options_need_a_pattern(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    for option in (["--shuffle"], ["--maxcount", "3"], ["--classes"]):
        result = CliRunner().invoke(create, [str(tmp_path / "o.tar"), str(tmp_path), *option])
        assert result.exit_code == 2
        assert f"{option[0]} applies only when OUT is a pattern" in result.output
