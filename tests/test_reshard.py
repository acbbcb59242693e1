"""reshard: in order (order, bytes and rollover kept), shuffled (an exact, reproducible,
uniform permutation in bounded memory), failures (no temporary files, no truncated shard),
and the ``wdspipes reshard`` command."""

from __future__ import annotations

import collections
import json
import math
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from shardgen import kill_when_ready, write_shards, write_varied_shards

import wdspipes as wds
import wdspipes.tools.buckets as buckets_module
import wdspipes.tools.reshard as reshard_module
from wdspipes.cli.reshard import reshard as reshard_command
from wdspipes.tools.buckets import BucketReader
from wdspipes.tools.reshard import BucketShuffle, reshard

NSHARDS, PER_SHARD = 8, 50
Item = tuple[str, tuple[tuple[str, bytes], ...]]


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    """8 shards of 50 samples, keys unique across shards, fields of varied sizes."""
    return write_varied_shards(tmp_path / "in", [PER_SHARD] * NSHARDS)


def items(urls: list[str]) -> list[Item]:
    """Each sample as (key, its fields sorted by name): what reshard must keep."""
    return [
        (s["__key__"], tuple(sorted((k, v) for k, v in s.items() if not k.startswith("__"))))
        for s in wds.WebDataset(urls)
    ]


def keys(urls: list[str]) -> list[str]:
    return [key for key, _ in items(urls)]


def shard_of(key: str) -> int:
    return int(key.split("-")[0])


def files_under(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


# --- in order -------------------------------------------------------------------------------


def test_in_order_keeps_order_and_bytes_and_rolls_over_by_count(
    inputs: list[str], tmp_path: Path
) -> None:
    report = reshard(inputs, str(tmp_path / "out" / "part-%04d.tar"), maxcount=30)
    assert items(report.shards) == items(inputs)
    assert [os.path.basename(path) for path in report.shards] == [
        f"part-{i:04d}.tar" for i in range(math.ceil(NSHARDS * PER_SHARD / 30))
    ]
    assert [len(keys([path])) for path in report.shards] == [30] * 13 + [10]
    assert report.samples == NSHARDS * PER_SHARD
    assert report.bytes == sum(len(v) for _, fields in items(inputs) for _, v in fields)
    assert report.output_bytes == sum(os.path.getsize(path) for path in report.shards)
    assert report.input_bytes == sum(os.path.getsize(path) for path in inputs)
    assert (report.passes, report.buckets, report.largest_bucket, report.seed) == (1, 0, 0, None)


def test_in_order_rolls_over_by_size(inputs: list[str], tmp_path: Path) -> None:
    maxsize = 40_000
    report = reshard(inputs, str(tmp_path / "out-%03d.tar"), maxsize=maxsize)
    assert items(report.shards) == items(inputs)
    counts = [len(keys([path])) for path in report.shards]
    assert len(report.shards) > 3 and all(count > 1 for count in counts)
    for path in report.shards[:-1]:  # every full shard within the limit, but near it
        assert maxsize / 2 < os.path.getsize(path) <= maxsize


def test_compressed_output_reads_back(inputs: list[str], tmp_path: Path) -> None:
    report = reshard(inputs[:2], str(tmp_path / "out-%03d.tar.gz"), compress="gz")
    assert all(Path(path).read_bytes()[:2] == b"\x1f\x8b" for path in report.shards)
    assert items(report.shards) == items(inputs[:2])


# --- shuffled -------------------------------------------------------------------------------


def test_shuffle_is_a_permutation_mixing_the_input_shards(
    inputs: list[str], tmp_path: Path
) -> None:
    report = reshard(inputs, str(tmp_path / "out-%03d.tar"), maxcount=50, shuffle=True, seed=3)
    before, after = items(inputs), items(report.shards)
    assert sorted(after) == sorted(before) and len(after) == len(before)
    assert [key for key, _ in after] != [key for key, _ in before]
    first = keys(report.shards[:1])
    assert len(first) == 50
    assert len({shard_of(key) for key in first}) >= NSHARDS - 2
    assert report.passes == 2 and report.buckets >= 1 and report.seed == 3


def test_shuffle_is_reproducible_with_a_seed(inputs: list[str], tmp_path: Path) -> None:
    def run(name: str, seed: int) -> list[bytes]:
        pattern = str(tmp_path / name / "o-%02d.tar")
        report = reshard(inputs, pattern, maxcount=64, shuffle=True, seed=seed, memory=8_000)
        return [Path(path).read_bytes() for path in report.shards]

    first, again, other = run("a", 11), run("b", 11), run("c", 12)
    assert first == again
    assert len(other) == len(first) and other != first


def test_small_memory_budget_uses_several_buckets(inputs: list[str], tmp_path: Path) -> None:
    total = sum(os.path.getsize(path) for path in inputs)
    report = reshard(inputs, str(tmp_path / "o-%02d.tar"), shuffle=True, seed=5, memory=total / 20)
    assert report.buckets > 1
    assert report.buckets == reshard_module.bucket_count(total, total / 20)
    assert 0 < report.largest_bucket <= total / 20 * reshard_module.LOAD_LIMIT
    assert sorted(items(report.shards)) == sorted(items(inputs))


def test_oversized_buckets_are_split_again(inputs: list[str], tmp_path: Path) -> None:
    """Unknown input sizes (pipe: URLs) under a budget too small for one bucket: the buckets
    are split in further passes, and the result is still an exact permutation."""
    urls = [f"pipe:cat {path}" for path in inputs]
    report = reshard(urls, str(tmp_path / "o-%02d.tar"), shuffle=True, seed=5, memory=300)
    assert report.input_bytes is None
    assert report.passes > 2
    assert 0 < report.largest_bucket < 2_000  # some samples are alone over budget
    assert sorted(items(report.shards)) == sorted(items(inputs))


def test_shuffle_spreads_one_input_shard_over_the_whole_output(tmp_path: Path) -> None:
    """Uniformity, deterministically (fixed seed): the positions of input shard 0's samples
    are spread like a uniform sample of the output positions, with several buckets."""
    urls = write_shards(tmp_path, 10, 100)
    report = reshard(urls, str(tmp_path / "out-%02d.tar"), shuffle=True, seed=2, memory=30_000)
    assert report.buckets >= 3
    order = keys(report.shards)
    positions = sorted(i for i, key in enumerate(order) if shard_of(key) == 0)
    assert len(positions) == 100
    q10, q50, q90 = positions[10], positions[50], positions[90]
    assert q10 < 250 and 300 < q50 < 700 and q90 > 750
    # and each tenth of the output holds some of them (10 expected in each)
    assert all(count >= 3 for count in collections.Counter(p // 100 for p in positions).values())
    assert len({p // 100 for p in positions}) == 10


def test_bucket_shuffle_puts_an_item_anywhere_with_equal_chance(tmp_path: Path) -> None:
    """Over 1,200 seeds, the position of one item among 12 (split buckets included) is near
    uniform: 100 expected at each position. Fixed seeds: the counts never change."""
    counts: collections.Counter[int] = collections.Counter()
    passes = set()
    for seed in range(1200):
        with BucketShuffle(str(tmp_path), 200, seed=seed, expected_size=50) as shuffle:
            for i in range(12):
                shuffle.add({"__key__": str(i), "txt": b"0123456789"})
            order = [sample["__key__"] for sample in shuffle]
        assert sorted(order, key=int) == [str(i) for i in range(12)]
        assert shuffle.largest <= 200 * reshard_module.LOAD_LIMIT
        counts[order.index("0")] += 1
        passes.add(shuffle.passes)
    assert sorted(counts) == list(range(12))
    assert all(60 <= count <= 140 for count in counts.values()), counts
    assert max(passes) > 2  # buckets were split
    assert os.listdir(tmp_path) == []


def test_bucket_shuffle_keeps_keys_and_bytes_exactly(tmp_path: Path) -> None:
    odd_key = "dir/\udcff-key"  # a tar name that was not UTF-8, read with surrogateescape
    samples = [
        {"__key__": odd_key, "__url__": "x.tar", "jpg": bytes(range(256)), "seg.json": b""},
        {"__key__": "b", "Txt": b"\x00" * 70_000},
    ]
    with BucketShuffle(str(tmp_path), 1e6, seed=0) as shuffle:
        for sample in samples:
            shuffle.add(sample)
        out = sorted(shuffle, key=lambda sample: sample["__key__"])
    assert out == [{k: v for k, v in s.items() if k != "__url__"} for s in samples[::-1]]
    with BucketShuffle(str(tmp_path), 1e6) as shuffle, pytest.raises(TypeError, match="'txt'"):
        shuffle.add({"__key__": "c", "txt": "not bytes"})


def test_bucket_shuffle_removes_its_files_when_closed_early(tmp_path: Path) -> None:
    for consumed in (0, 5):
        with BucketShuffle(str(tmp_path), 100, seed=0, expected_size=1000) as shuffle:
            for i in range(50):
                shuffle.add({"__key__": str(i), "txt": b"0123456789"})
            assert len(os.listdir(tmp_path)) > 1
            if consumed:
                samples = iter(shuffle)
                _ = [next(samples) for _ in range(consumed)]
                samples.close()
        assert os.listdir(tmp_path) == []


# --- failures -------------------------------------------------------------------------------


def truncate(path: str) -> None:
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2 + 100])


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_truncated_input_leaves_no_temporary_files_and_no_truncated_shard(
    inputs: list[str], tmp_path: Path, shuffle: bool
) -> None:
    truncate(inputs[4])
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    with pytest.raises(wds.TruncatedShardError, match=r"shard-004\.tar"):
        reshard(inputs, str(out / "o-%02d.tar"), maxcount=40, shuffle=shuffle, tmpdir=str(scratch))
    assert files_under(scratch) == []
    assert files_under(out) == []  # not even the shards finished before the damage


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_failed_run_leaves_files_under_the_final_names_as_they_were(
    inputs: list[str], tmp_path: Path, shuffle: bool
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    before = {"o-00.tar": b"an older o-00", "o-09.tar": b"an older o-09", "other": b"x"}
    for name, data in before.items():
        (out / name).write_bytes(data)
    truncate(inputs[6])
    with pytest.raises(wds.TruncatedShardError, match=r"shard-006\.tar"):
        reshard(inputs, str(out / "o-%02d.tar"), maxcount=40, shuffle=shuffle)
    assert {name: (out / name).read_bytes() for name in files_under(out)} == before


def test_a_failure_while_writing_removes_the_buckets(
    inputs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unpack, calls = buckets_module._unpack, []

    def failing_unpack(data: Any) -> Any:
        calls.append(1)
        if len(calls) > 130:
            raise OSError("disk on fire")
        return unpack(data)

    monkeypatch.setattr(buckets_module, "_unpack", failing_unpack)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="disk on fire"):
        reshard(inputs, str(out / "o-%02d.tar"), maxcount=60, shuffle=True, memory=5_000)
    assert len(calls) > 130  # shards were finished before the failure
    assert files_under(out) == []  # no shard, no bucket directory, no partial


def test_an_output_name_taken_by_a_directory_fails_before_any_rename(
    inputs: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    (out / "o-02.tar").mkdir(parents=True)
    with pytest.raises(IsADirectoryError, match=r"o-02\.tar"):
        reshard(inputs, str(out / "o-%02d.tar"), maxcount=100)
    assert files_under(out) == ["o-02.tar"]


KILLED_RESHARD = """
import sys, time
import wdspipes.tools.buckets as buckets_module
import wdspipes.tools.reshard as reshard_module
from wdspipes.write import ShardWriter

class Stalling(ShardWriter):
    def write(self, sample):
        if self.count == 130:  # two shards of 60 finished, the third begun
            print("ready", flush=True)
            time.sleep(600)
        super().write(sample)

buckets_module.ShardWriter = Stalling
reshard_module.reshard(sys.argv[3:], sys.argv[1], maxcount=60, shuffle=sys.argv[2] == "1")
"""


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_killed_run_leaves_nothing_under_the_final_names(
    inputs: list[str], tmp_path: Path, shuffle: bool
) -> None:
    out = tmp_path / "out"
    args = [str(out / "o-%02d.tar"), str(int(shuffle)), *inputs]
    kill_when_ready(KILLED_RESHARD, *args)
    assert [p.name for p in out.glob("o-*")] == []
    (staging,) = out.iterdir()  # the finished shards wait in one hidden directory
    assert staging.name.startswith(".reshard-")


def test_a_pattern_with_the_number_in_a_directory(inputs: list[str], tmp_path: Path) -> None:
    report = reshard(inputs, str(tmp_path / "out" / "part-%d" / "s.tar"), maxcount=150)
    assert files_under(tmp_path / "out") == [
        *(name for i in range(3) for name in (f"part-{i}", f"part-{i}/s.tar")),
        "part.json",  # the index, above the numbered directories
    ]
    assert report.shards == [str(tmp_path / "out" / f"part-{i}" / "s.tar") for i in range(3)]
    assert items(report.shards) == items(inputs)


def test_a_lost_sample_is_reported(
    inputs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load = BucketReader._load

    def lossy_load(self: BucketReader, *args: Any) -> Iterator[dict[str, Any]]:
        samples = load(self, *args)
        next(samples)
        return samples

    monkeypatch.setattr(BucketReader, "_load", lossy_load)
    with pytest.raises(RuntimeError, match=r"read 400 samples .* but wrote 39\d"):
        reshard(inputs, str(tmp_path / "o-%02d.tar"), shuffle=True)


def test_temporary_files_go_next_to_the_output_and_are_removed(
    inputs: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    report = reshard(inputs, str(out / "o-%02d.tar"), maxcount=100, shuffle=True, memory=5_000)
    assert report.buckets > 1
    assert files_under(out) == [*(f"o-{i:02d}.tar" for i in range(4)), "o.json"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"maxcount": 0}, "maxcount must be a positive number, got 0"),
        ({"maxcount": 2.5}, "maxcount must be an int, got 2.5"),
        ({"maxsize": -1.0}, "maxsize must be a positive number, got -1.0"),
        ({"memory": 0}, "memory must be a positive number, got 0"),
    ],
)
def test_bad_arguments(
    inputs: list[str], tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        reshard(inputs, str(tmp_path / "o-%02d.tar"), **kwargs)


@pytest.mark.parametrize("pattern", ["s3://bucket/o-%02d.tar", "pipe:cat > o-%02d.tar"])
def test_a_pattern_that_is_a_url_is_refused(
    inputs: list[str], pattern: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="must be a local or shared path, got the URL"):
        reshard(inputs, pattern)
    assert os.listdir(tmp_path) == ["in"]  # the inputs: no ./s3:/bucket, no staging


def test_a_pattern_that_could_overwrite_an_input_is_refused(inputs: list[str]) -> None:
    pattern = os.path.join(os.path.dirname(inputs[0]), "shard-%03d.tar")
    with pytest.raises(ValueError, match=r"could overwrite the input .*shard-000\.tar"):
        reshard(inputs, pattern, shuffle=True)
    assert all(tarfile.is_tarfile(path) for path in inputs)


# --- the command ----------------------------------------------------------------------------


def test_command_with_click_runner(inputs: list[str], tmp_path: Path) -> None:
    pattern = str(tmp_path / "out" / "o-%03d.tar")
    args = [*inputs, "-o", pattern, "--maxsize", "40K", "--shuffle", "--seed", "4"]
    result = CliRunner().invoke(reshard_command, [*args, "--memory", "10K"])
    assert result.exit_code == 0, result.output
    summary = " ".join(result.output.split())
    assert summary.startswith("wrote 400 samples") and "seed 4; their index: " in summary
    assert summary.endswith(os.path.join("out", "o.json"))
    paths = sorted(str(p) for p in (tmp_path / "out").glob("o-*.tar"))
    assert all(os.path.getsize(path) <= 40 * 1024 for path in paths[:-1])
    assert sorted(items(paths)) == sorted(items(inputs))
    usage = CliRunner().invoke(reshard_command, [*inputs, "-o", pattern, "--seed", "4"])
    assert usage.exit_code == 2 and "--seed applies only with --shuffle" in usage.output


def run_wdspipes(*args: str) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).parent / "wdspipes"
    return subprocess.run([str(executable), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_command_through_the_entry_point(inputs: list[str], tmp_path: Path) -> None:
    spec = os.path.join(os.path.dirname(inputs[0]), "shard-{000..007}.tar")
    result = run_wdspipes("reshard", spec, "-o", str(tmp_path / "o-%02d.tar"), "--maxcount", "64")
    assert result.returncode == 0, result.stderr
    summary = " ".join(result.stdout.split())
    assert summary.startswith("wrote 400 samples") and "into 7 shards" in summary
    assert items(sorted(str(p) for p in tmp_path.glob("o-*.tar"))) == items(inputs)


@pytest.mark.slow
def test_command_reports_a_bad_shard_in_one_line(inputs: list[str], tmp_path: Path) -> None:
    truncate(inputs[2])
    args = ["reshard", *inputs, "-o", str(tmp_path / "out" / "o-%02d.tar"), "--shuffle"]
    result = run_wdspipes(*args)
    assert result.returncode == 1
    assert result.stderr.startswith("wdspipes: error: ") and "shard-002.tar" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert files_under(tmp_path / "out") == []


def test_a_run_writes_the_index_of_its_shards(inputs: list[str], tmp_path: Path) -> None:
    """The index beside the shards (wids' shard index): each shard's name relative to it,
    its samples and bytes, in order."""
    report = reshard(inputs, str(tmp_path / "out" / "train-%03d.tar"), maxcount=64, shuffle=True)
    assert report.manifest == str(tmp_path / "out" / "train.json")
    index = json.loads(Path(report.manifest).read_text())
    assert index["__kind__"] == "wids-shard-index-v1" and index["name"] == "train"
    listed = index["shardlist"]
    assert [entry["url"] for entry in listed] == [os.path.basename(p) for p in report.shards]
    assert [entry["nsamples"] for entry in listed] == [len(items([p])) for p in report.shards]
    assert [entry["filesize"] for entry in listed] == [os.path.getsize(p) for p in report.shards]
    assert sum(entry["nsamples"] for entry in listed) == report.samples == 400
