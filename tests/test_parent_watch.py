"""A loader's workers end within seconds of their training process's death, whatever killed
it: torch's DataLoader's and StatefulDataLoader's by torch's own watchdog, DataLoader2's by
wdspipes' (wdspipes/loaders/parent_watch.py). torchdata's DataLoader2 workers lived on for
good, parented to init."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import descendants, kill, left_alive
from shardgen import Shards
from torch.utils.data.datapipes.iter import IterableWrapper

from wdspipes.loaders import parent_watch
from wdspipes.loaders.parent_watch import EndWithParent

TRAINING = Path(__file__).with_name("training_process.py")
DEADLINE = 30.0
"""Seconds the workers of a killed training process get to end: generous, as a bound against
workers that never end, not a measure of how fast they do (about 1 s; 5 s under torch's)."""

DL2 = pytest.mark.dataloader2

CASES = {
    "DataLoader2": (["dataloader2", "fork"], "is gone: ending"),
    "DataLoader2, spawned": (["dataloader2", "spawn"], "is gone: ending"),
    "DataLoader2, through a forkserver": (["dataloader2", "forkserver"], "is gone: ending"),
    "DataLoader2, workers stuck in a stage": (["dataloader2", "fork", "--stall"], "exiting"),
    "DataLoader": (["dataloader", "fork"], ""),
    "StatefulDataLoader": (["stateful", "fork"], ""),
}


@pytest.mark.slow
@pytest.mark.loaders
@pytest.mark.parametrize(
    "case",
    [pytest.param(case, marks=DL2) if case.startswith("DataLoader2") else case for case in CASES],
)
def test_workers_end_when_their_training_process_is_killed(
    small_shards: Shards, tmp_path: Path, case: str
) -> None:
    """SIGKILL a training process reading through 2 workers, as a preemption or the
    out-of-memory killer does: its workers (and the processes they need) end."""
    args, said = CASES[case]
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, str(TRAINING), *args[:2], small_shards.spec, *args[2:]],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert child.stdout is not None
        started = child.stdout.readline() == "training\n"
        workers = descendants(child.pid)
        deadline = time.monotonic() + 10
        while started and len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # missed once, on a machine under heavy load
            workers = descendants(child.pid)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert started, log.read_text()
    assert len(workers) >= 2, f"{[w.describe() for w in workers]}: {log.read_text()}"
    left = [worker.describe() for worker in left_alive(workers, within=DEADLINE)]
    kill(workers)  # none left behind, whatever the outcome
    assert not left, f"alive {DEADLINE:.0f} s after the training process was killed: {left}"
    assert said in log.read_text()


@DL2
def test_dataloader2_makes_its_processes_with_the_watchdog() -> None:
    from wdspipes.loaders import dataloader2

    dataloader2()  # mended
    eventloop = importlib.import_module(parent_watch.EVENTLOOP)
    worker_info = importlib.import_module("torchdata.dataloader2.utils").WorkerInfo(1, 0)
    context = multiprocessing.get_context("fork")
    process, requests, responses = eventloop.CreateProcessForDataPipeline(
        context, IterableWrapper(range(3)), "worker process", worker_info
    )
    try:
        target = process._target
        assert isinstance(target, EndWithParent)
        assert (target.requests, target.responses) == ([requests], [responses])
        assert (target.creator, target.served) == (os.getpid(), False)
        assert target.target is eventloop.DataPipeToQueuesLoop
    finally:
        for each in (requests, responses):
            each.close()
            each.join_thread()


def test_a_creator_is_gone_once_the_parent_changes_or_it_has_died() -> None:
    gone = parent_watch._gone
    parent = os.getppid()
    assert not gone(parent, parent, served=False)  # forked or spawned by its living parent
    assert gone(parent, parent + 1, served=False)  # the parent changed: reparented at its death
    assert gone(parent + 1, parent, served=False)  # its creator was gone before it began
    assert not gone(os.getpid(), parent, served=True)  # a forkserver's: its creator lives
    assert gone(2**40, parent, served=True)  # a creator that is no more (no process has this id)
