"""Shard fixtures shared by the test modules, each a :class:`~shardgen.Shards`: ``paths`` to
pass as a list, ``spec`` as a brace pattern. A module's own shards (with contents only its tests
need) are fixtures of that module, of the same type.

The tiers: tests that run DataLoader or DataLoader2 worker processes are marked ``loaders``;
those that start other processes (the wdspipes command, scripts, encoders), build the docs
site, or run thousands of cases are marked ``slow``. ``make test-fast`` runs the rest.

No test leaves a process running (tests/no_process_left.py): not its own, nor the workers of a
training process it killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import no_process_left
import pytest
from shardgen import Shards, write_shards
from stage_examples import SHARDS
from stage_examples import write_shards as write_stage_shards


@pytest.fixture(scope="session")
def stage_shards(tmp_path_factory: pytest.TempPathFactory) -> Shards:
    """The shards of the registered stages' examples (tests/stage_examples.py): ``SHARDS`` (4)
    tar shards of ``PER_SHARD`` (3) samples with a decodable ``cls`` and a ``txt``, each also
    written as CBOR and msgpack beside it."""
    directory = tmp_path_factory.mktemp("stages")
    return Shards(write_stage_shards(directory), f"{directory}/shard-{{0..{SHARDS - 1}}}.tar")


@pytest.fixture
def small_shards(tmp_path: Path) -> Shards:
    """4 tar shards of 5 samples (``cls``, ``txt``), keyed ``"{shard:03d}-{sample:05d}"``."""
    return Shards(write_shards(tmp_path, 4, 5), f"{tmp_path}/shard-{{000..003}}.tar")


@pytest.fixture(autouse=True)
def _tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the fast tier fast: a test marked neither ``loaders`` nor ``slow`` that starts a
    worker process, or a Python process (a script, the wdspipes command), fails and says which
    mark it needs. Small commands (``pipe:`` URLs, the tar writers a test is about) may run."""
    if request.node.get_closest_marker("loaders") or request.node.get_closest_marker("slow"):
        return
    test = request.node.nodeid

    def start(process: BaseProcess) -> None:
        raise AssertionError(f"{test} starts a worker process: mark it loaders")

    popen_init = subprocess.Popen.__init__

    def run(popen: subprocess.Popen[Any], args: Any, *more: Any, **options: Any) -> None:
        line = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
        program = os.fsdecode(line[0]).split(maxsplit=1)[0] if line and line[0] else ""
        if Path(program).name in PYTHON_PROGRAMS:
            raise AssertionError(f"{test} starts {program}: mark it slow")
        popen_init(popen, args, *more, **options)

    monkeypatch.setattr(BaseProcess, "start", start)
    monkeypatch.setattr(subprocess.Popen, "__init__", run)


PYTHON_PROGRAMS = {Path(sys.executable).name, "python", "python3", "wdspipes", "torchrun"}
"""Programs that start Python (a script, the wdspipes command): the slow tier's."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where torchdata has no DataLoader2 and DataPipes (0.10 and later: ``make test`` runs the
    loader tests with torchdata 0.11 too), the tests marked ``dataloader2`` are skipped, saying
    why."""
    try:
        if find_spec("torchdata.dataloader2") is not None:
            return
    except ImportError:  # no torchdata at all
        pass
    version = getattr(sys.modules.get("torchdata"), "__version__", "none")
    reason = f"DataLoader2 is in torchdata 0.8 and 0.9 only; this is {version}"
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("dataloader2"):
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    """Fail a test that leaves a process running, whichever the item (tests/no_process_left.py:
    a plugin's fixtures apply to the doctests too)."""
    config.pluginmanager.register(no_process_left, "wdspipes-no-process-left")
