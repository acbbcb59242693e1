"""reshard on Ray (wdspipes/tools/ray_engine.py): the same bytes under the same names as the
local engine for several option sets, a worker killed and its task retried, a bad shard's
error as locally, and bad input refused before any work. The tests that need Ray share one
Ray started on this machine with 2 CPUs (no network beyond 127.0.0.1); CI installs the
``ray`` extra. Those that need no Ray run in the fast tier."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from shardgen import make_tar, write_varied_shards

import wdspipes as wds
from wdspipes.cli.create import create as create_command
from wdspipes.cli.reshard import reshard as reshard_command
from wdspipes.tools.ray_engine import RaySession
from wdspipes.tools.reshard import ReshardReport, reshard


def on_ray(test: Any) -> Any:
    """Marks a test that starts Ray's processes: slow, loaders, and ray (which the torchdata 0.11
    run of `make test` leaves out: Ray is installed in .venv only)."""
    return pytest.mark.slow(pytest.mark.loaders(pytest.mark.ray(test)))


def import_ray() -> Any:
    """The ray module; the test is skipped without it, except in CI, which installs the
    extra (there, its absence fails)."""
    if "CI" in os.environ:
        import ray

        return ray
    return pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_session() -> Iterator[Any]:
    """One Ray for the module: 2 CPUs, on 127.0.0.1, no dashboard; shut down at the end."""
    ray = import_ray()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level="WARNING",
    )
    yield ray
    ray.shutdown()


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    """6 shards of 40 samples with fields of varied sizes, one of them empty."""
    return write_varied_shards(tmp_path / "in", [40, 40, 0, 40, 40, 40])


def contents(paths: list[str]) -> list[tuple[str, bytes]]:
    return [(os.path.basename(path), Path(path).read_bytes()) for path in paths]


def files_under(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def written(report: ReshardReport) -> list[str]:
    """The names a run puts in its output directory: its shards and their index."""
    return sorted(os.path.basename(p) for p in [*report.shards, report.manifest])


OPTION_SETS = {  # 200 samples, 35 kB of fields, 2 kB of tar each
    "one bucket": {"maxcount": 50},
    "many buckets, rolled by count": {"maxcount": 7, "memory": 3_000},
    "rolled by size": {"maxsize": 5_000, "memory": 6_000},
    "gzip": {"maxcount": 30, "memory": 6_000, "compress": "gz"},
    "buckets split again": {"maxcount": 20, "memory": 400},
}


@pytest.mark.parametrize("options", OPTION_SETS.values(), ids=OPTION_SETS.keys())
@pytest.mark.parametrize("seed", [0, 12345])
@on_ray
def test_ray_writes_the_bytes_and_names_of_the_local_engine(
    ray_session: Any, inputs: list[str], tmp_path: Path, options: dict[str, Any], seed: int
) -> None:
    here = reshard(
        inputs, str(tmp_path / "here" / "o-%03d.tar"), shuffle=True, seed=seed, **options
    )
    there = reshard(
        inputs,
        str(tmp_path / "ray" / "o-%03d.tar"),
        shuffle=True,
        seed=seed,
        engine="ray",
        **options,
    )
    assert contents(there.shards) == contents(here.shards)
    assert len(here.shards) > 1 or options == OPTION_SETS["one bucket"]
    assert (there.buckets, there.passes, there.largest_bucket, there.samples) == (
        here.buckets,
        here.passes,
        here.largest_bucket,
        here.samples,
    )
    assert files_under(tmp_path / "ray") == written(there)
    assert Path(there.manifest).read_bytes() == Path(here.manifest).read_bytes()
    assert sorted(s["__key__"] for s in wds.WebDataset(there.shards)) == sorted(
        s["__key__"] for s in wds.WebDataset(inputs)
    )


def truncate(path: str) -> None:
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2 + 100])


@on_ray
def test_a_bad_shard_stops_the_run_with_the_local_error_line_and_a_rerun_finishes(
    ray_session: Any, inputs: list[str], tmp_path: Path
) -> None:
    good = Path(inputs[4]).read_bytes()
    truncate(inputs[4])
    out = tmp_path / "out"
    out.mkdir()
    (out / "o-00.tar").write_bytes(b"older")
    lines = {}
    for engine in ([], ["--ray"]):
        args = [*inputs, "--shuffle", "--seed", "1", *engine, "-o", str(out / "o-%02d.tar")]
        result = CliRunner().invoke(reshard_command, args)
        assert result.exit_code == 1
        lines[bool(engine)] = result.output.strip()
    assert lines[True] == lines[False]
    assert "shard-004.tar" in lines[True] and lines[True].count("\n") == 0
    assert files_under(out) == ["o-00.tar"] and (out / "o-00.tar").read_bytes() == b"older"
    Path(inputs[4]).write_bytes(good)
    report = reshard(inputs, str(out / "o-%02d.tar"), shuffle=True, seed=1, engine="ray")
    assert files_under(out) == written(report)
    assert report.samples == 200


@on_ray
def test_a_task_whose_worker_dies_is_run_again(
    ray_session: Any, inputs: list[str], tmp_path: Path
) -> None:
    """The command of one input kills its worker process the first time (Ray runs the task
    again); the output is that of the local engine."""
    flag = tmp_path / "killed-once"
    dying = f"pipe:test -e {flag} || {{ touch {flag}; kill -9 $PPID; sleep 5; }}; cat {inputs[3]}"
    urls = [*inputs[:3], dying, *inputs[4:]]
    alike = [*inputs[:3], f"pipe:cat {inputs[3]}", *inputs[4:]]  # its size unknown, as there
    here = reshard(alike, str(tmp_path / "here" / "o-%02d.tar"), shuffle=True, seed=4)
    there = reshard(urls, str(tmp_path / "ray" / "o-%02d.tar"), shuffle=True, seed=4, engine="ray")
    assert flag.exists()
    assert contents(there.shards) == contents(here.shards)


@on_ray
def test_create_from_a_class_archive_on_ray_writes_the_local_bytes(
    ray_session: Any, tmp_path: Path
) -> None:
    classes = [f"n{index:08d}" for index in range(4)]
    inner = [
        (
            f"{wnid}.tar",
            make_tar([(f"{wnid}_{n}.JPEG", b"%s/%d" % (wnid.encode(), n) * n) for n in range(30)]),
        )
        for wnid in classes
    ]
    archive = tmp_path / "train.tar"
    archive.write_bytes(make_tar(inner))
    outputs = {}
    for engine in ([], ["--ray"]):
        pattern = str(tmp_path / f"out{len(engine)}" / "in-%03d.tar")
        args = [pattern, str(archive), "--classes", "--maxcount", "9", "--shuffle", "--seed", "3"]
        result = CliRunner().invoke(create_command, [*args, *engine, "--memory", "8000"])
        assert result.exit_code == 0, result.output
        outputs[bool(engine)] = sorted((tmp_path / f"out{len(engine)}").iterdir())
    assert [p.name for p in outputs[True]] == [p.name for p in outputs[False]]
    assert len(outputs[True]) > 4
    assert [p.read_bytes() for p in outputs[True]] == [p.read_bytes() for p in outputs[False]]


@on_ray
def test_a_directory_a_worker_does_not_see_is_refused(ray_session: Any, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"does not see '.*nowhere'.*shared directory"):
        RaySession()._check_reached([str(tmp_path), str(tmp_path / "nowhere")])


@pytest.mark.ray
def test_an_unreachable_cluster_is_one_error_before_any_work(
    inputs: list[str], tmp_path: Path
) -> None:
    import_ray()
    out = tmp_path / "out"
    args = [*inputs, "--shuffle", "--ray", "127.0.0.1:1", "-o", str(out / "o-%02d.tar")]
    result = CliRunner().invoke(reshard_command, args)
    assert result.exit_code == 1
    assert result.output == (
        "Error: cannot reach the Ray cluster at '127.0.0.1:1': Connection refused; "
        "nothing was written\n"
    )
    assert not out.exists()


def test_without_ray_installed_the_error_names_the_extra(
    inputs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'wdspipes\[ray\]'"):
        reshard(inputs, str(tmp_path / "o-%02d.tar"), shuffle=True, engine="ray")
    assert files_under(tmp_path) == ["in", *(f"in/shard-{i:03d}.tar" for i in range(6))]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"engine": "spark"}, "engine must be one of local, ray, got 'spark'"),
        ({"engine": "ray", "shuffle": False}, "engine='ray' runs the shuffle"),
        ({"engine": "local", "address": "auto"}, "address and cpus apply only with engine='ray'"),
        ({"engine": "ray", "cpus": 0}, "cpus must be an int >= 1, got 0"),
        ({"engine": "ray", "address": "auto", "cpus": 2}, "cpus applies only to a Ray started"),
        ({"pattern": "s3://bucket/o-%02d.tar"}, "must be a local or shared path, got the URL"),
        ({"tmpdir": "s3://bucket/tmp"}, "tmpdir must be a local or shared path"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(
    inputs: list[str], tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    arguments = {"pattern": str(tmp_path / "out" / "o-%02d.tar"), "shuffle": True, **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        reshard(inputs, engine=arguments.pop("engine", "ray"), **arguments)
    assert not (tmp_path / "out").exists()


def test_command_refuses_ray_options_that_do_not_apply(inputs: list[str], tmp_path: Path) -> None:
    pattern = str(tmp_path / "o-%02d.tar")
    for args, message in [
        (["--ray"], "--ray applies only with --shuffle"),
        (["--shuffle", "--cpus", "2"], "--cpus applies only with --ray local"),
    ]:
        result = CliRunner().invoke(reshard_command, [*inputs, *args, "-o", pattern])
        assert result.exit_code == 2 and message in result.output
