"""Every script in examples/ runs, as a user would run it.

Each test starts a script in a process of its own, in a scratch directory, and checks what it
reports; the scripts check their own results too and exit with a failure status otherwise.
Scripts that need more than a plain process are run elsewhere: the last test checks that
every script is run by some test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

RUN_HERE = {"remote_cache.py", "write_and_reshard.py"}


def run_example(name: str, directory: Path, *args: str) -> str:
    """Run ``examples/NAME`` with ``args`` in ``directory``; its standard output."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, (
        f"{name} failed with status {result.returncode}:\n{result.stdout}{result.stderr}"
    )
    return result.stdout


@pytest.mark.dataloader2
@pytest.mark.loaders
def test_remote_cache_reads_each_shard_once_over_http(tmp_path: Path) -> None:
    """Shards served on 127.0.0.1: one request per shard, then only the cache, in workers too."""
    output = run_example("remote_cache.py", tmp_path, "--dir", str(tmp_path / "work"))
    assert "epoch 1: 200 samples, 4 requests to the server" in output
    assert "epoch 2: 200 samples, 0 requests to the server" in output
    assert "epoch 3, DataLoader2 with 2 workers: 200 samples, 0 requests" in output
    cached = list((tmp_path / "work" / "cache").glob("*.tar"))
    assert len(cached) == 4


@pytest.mark.slow
def test_write_and_reshard_goes_from_files_to_shuffled_shards(tmp_path: Path) -> None:
    work = tmp_path / "work"
    output = run_example("write_and_reshard.py", tmp_path, "--dir", str(work))
    for command in ("create", "info", "reshard", "show"):
        assert f"$ wdspipes {command} " in output
    assert "read back 90 samples from 4 shards" in output
    assert sorted(path.name for path in (work / "train").iterdir()) == [
        *(f"train-{number:04d}.tar" for number in range(4)),
        "train.json",  # their index
    ]
    assert (work / "train-0000.png").read_bytes().startswith(b"\x89PNG")


def test_every_example_is_run_by_a_test() -> None:
    """A script of examples/ is run here (RUN_HERE) or named by another test module, as
    tests/test_distributed.py runs distributed_training.py under torchrun."""
    others = [
        path.read_text()
        for path in (ROOT / "tests").glob("test_*.py")
        if path.name != Path(__file__).name
    ]
    scripts = sorted(path.name for path in EXAMPLES.glob("*.py"))
    unrun = [s for s in scripts if s not in RUN_HERE and not any(s in text for text in others)]
    assert not unrun, f"examples that no test runs: {unrun}"
    assert set(scripts) >= RUN_HERE
