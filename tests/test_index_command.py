"""``wdspipes index`` (wdspipes/cli/index.py, wdspipes/tools/index.py): the index of existing
shards as wids' ``widsindex create`` writes it (wids 0.1.11 as a test-only oracle for the
counts, sizes and MD5 sums, and as a reader of the index), with the offsets' sidecars."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from shardgen import make_tar

import wdspipes as wds
from wdspipes.cli import main
from wdspipes.read.offsets import read_sidecar, sidecar_path

wids = pytest.importorskip("wids")


def write_shards(directory: Path, counts: list[int]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard, count in enumerate(counts):
        path = directory / f"part-{shard}.tar"
        with wds.TarWriter(str(path)) as sink:
            for index in range(count):
                sink.write({"__key__": f"{shard}-{index}", "txt": "x" * index, "cls": index})
        paths.append(path)
    return paths


def wids_count(path: Path) -> int:
    """What ``widsindex create`` counts (wids' compute_num_samples, closing the shard)."""
    samples = wids.wids.IndexedTarSamples(path=str(path))
    try:
        return len(samples)
    finally:
        samples.close()


def test_index_writes_what_widsindex_create_computes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = write_shards(tmp_path / "data", [4, 7, 2])
    output = tmp_path / "data" / "train.json"
    spec = str(tmp_path / "data" / "part-{0..2}.tar")
    assert main(["index", spec, "-o", str(output), "--name", "train", "--base", "b"]) == 0
    assert capsys.readouterr().out.startswith(f"{output}: 3 shards, 13 samples,")
    index = json.loads(output.read_text())
    assert index["__kind__"] == "wids-shard-index-v1" and index["wids_version"] == 1
    assert (index["name"], index["base"]) == ("train", "b")
    assert index["shardlist"] == [
        {
            "url": path.name,
            "nsamples": wids_count(path),
            "filesize": path.stat().st_size,
            "md5sum": wids.wids.compute_file_md5sum(str(path)),
        }
        for path in shards
    ]
    for path in shards:
        info = path.stat()
        assert read_sidecar(sidecar_path(str(path)), info.st_size, info.st_mtime_ns) is not None


def test_the_index_reads_with_wids_and_wdspipes(tmp_path: Path) -> None:
    shards = write_shards(tmp_path / "data", [3, 5])
    output = tmp_path / "index.json"  # above the shards: URLs relative to it
    assert main(["index", *map(str, shards), "-o", str(output), "--no-md5"]) == 0
    entries = json.loads(output.read_text())["shardlist"]
    assert [e["url"] for e in entries] == ["data/part-0.tar", "data/part-1.tar"]
    assert "md5sum" not in entries[0]
    ours = wds.ShardListDataset(str(output))
    theirs = wids.ShardListDataset(str(output), transformations=[], cache_dir=str(tmp_path / "w"))
    assert len(ours) == len(theirs) == 8
    for i in range(8):
        their = {k: v.read() if hasattr(v, "read") else v for k, v in theirs[i].items()}
        mine = wds.wids_sample(ours[i])
        assert {k: v.read() if hasattr(v, "read") else v for k, v in mine.items()} == their
    theirs.close()


def test_index_to_standard_output_without_sidecars(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_shards(tmp_path, [2])
    monkeypatch.chdir(tmp_path)
    assert main(["index", "part-0.tar", "-o", "-", "--no-sidecars"]) == 0
    index = json.loads(capsys.readouterr().out)
    assert index["shardlist"][0]["url"] == "part-0.tar" and "name" not in index
    assert not os.path.exists(sidecar_path("part-0.tar"))


def test_a_damaged_shard_is_an_error_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_shards(tmp_path, [2])[0]
    bad = tmp_path / "bad.tar"
    bad.write_bytes(make_tar([("a.txt", b"x" * 2000)])[:1500])
    output = tmp_path / "index.json"
    assert main(["index", str(good), str(bad), "-o", str(output)]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"wdspipes: error: {bad}") and "at byte" in error
    assert not output.exists()
