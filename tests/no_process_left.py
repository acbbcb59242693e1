"""A pytest plugin (tests/conftest.py registers it): a test that leaves a process running fails.

After each test's teardown, the processes it started that still run, directly or not, or whose
parent it started and that died (a worker of a training process it killed), have
:data:`LEFT_WAIT` seconds to end; those still running then fail the test, named, and are
killed. Processes started by one that was running before the test (the workers that Ray's
raylet, started by a module's fixture, starts) are that process's; multiprocessing's resource
tracker and forkserver, which serve the pytest process to its end, are left. Processes still
running at the end of the session (started by a fixture that did not end them) fail the last
test, each named with the test (or the setup of the test) in which it started. Each pytest
process (each xdist worker) watches the processes it started, marked with its own :data:`RUN`
(tests/processes.py).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from processes import MARK, Process, Watch, kill, left_alive, ours

RUN = secrets.token_hex(8)
"""This pytest process's mark (``processes.MARK``) on the processes its tests start, which
they inherit through the environment."""

LEFT_WAIT = 10.0
"""Seconds a process that a test started has, after the test, to end by itself (the workers
of a killed training process end within a few)."""

_seen: dict[Process, str] = {}  # the processes of ours seen so far: where each started


def pytest_configure(config: pytest.Config) -> None:
    os.environ[MARK] = RUN
    config.stash[_WATCH] = Watch(RUN)


_WATCH = pytest.StashKey[Watch]()


@pytest.fixture(autouse=True)
def _no_process_left(request: pytest.FixtureRequest) -> Iterator[None]:
    watch = request.config.stash[_WATCH]
    for process in watch.look():  # those of fixtures of wider scope, set up for this test
        _seen.setdefault(process, f"the setup of {request.node.nodeid}")
    owners = {process.pid for process in watch.known} - _multiprocessing_helpers()
    yield
    helpers = _multiprocessing_helpers()  # started by this test, maybe
    started = []
    for process in watch.look():
        if process.ppid in owners:
            owners.add(process.pid)
        elif process.pid not in helpers:
            started.append(process)
        _seen.setdefault(process, request.node.nodeid)
    left = [process.describe() for process in left_alive(started, LEFT_WAIT)]
    if left:
        kill(started)
        pytest.fail(
            f"{request.node.nodeid} left processes running {LEFT_WAIT:.0f} s after it ended "
            "(now killed): " + "; ".join(left),
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def _no_process_left_at_the_end() -> Iterator[None]:
    yield
    helpers = _multiprocessing_helpers()
    left = left_alive([p for p in ours(RUN) if p.pid not in helpers], LEFT_WAIT)
    if left:
        named = [f"{p.describe()}, started in {_seen.get(p, 'no test')}" for p in left]
        kill(left)
        pytest.fail(
            "processes still running at the end of the session (now killed): " + "; ".join(named),
            pytrace=False,
        )


def _multiprocessing_helpers() -> set[int]:
    """multiprocessing's resource tracker and forkserver, if this process started them."""
    from multiprocessing import forkserver, resource_tracker

    pids = (resource_tracker._resource_tracker._pid, forkserver._forkserver._forkserver_pid)
    return {pid for pid in pids if pid is not None}
