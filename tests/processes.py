"""The processes that tests start, seen in /proc (Linux; elsewhere there are none to see): a
pytest process's descendants, and the processes whose parent died, found by a mark in their
environment that they inherit from the pytest process that started them (each pytest process,
an xdist worker too, marks with a token of its own). tests/conftest.py fails a test that
leaves one running (:class:`Watch`); tests/test_parent_watch.py finds the workers of a training
process (:func:`descendants`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["MARK", "Process", "Watch", "descendants", "kill", "left_alive", "ours"]

MARK = "WDSPIPES_TEST_RUN"
"""The environment variable whose value marks the processes a pytest process started."""

PROC = "/proc"


@dataclass(frozen=True)
class Process:
    """One process: its id and its start (clock ticks after boot), which together never name
    another (and compare); its parent's id as it was read."""

    pid: int
    start: int
    ppid: int = field(compare=False)

    def describe(self) -> str:
        """Its id, parent and command line now, e.g. ``pid 12 (parent 1): python train.py``."""
        now = _read(self.pid)
        if now != self or now is None:
            return f"pid {self.pid}: gone"
        try:
            with open(f"{PROC}/{self.pid}/cmdline", "rb") as file:
                line = file.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            line = ""
        return f"pid {self.pid} (parent {now.ppid}): {line}"


def _read(pid: int) -> Process | None:
    """Process ``pid`` as /proc says now; None if it is gone or a zombie (it holds nothing)."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # after "pid (name) "; the name may hold ")"
    if fields[0] in (b"Z", b"X"):
        return None
    return Process(pid, int(fields[19]), int(fields[1]))


def _pids() -> set[int]:
    try:
        return {int(name) for name in os.listdir(PROC) if name.isdigit()}
    except OSError:  # no /proc
        return set()


def _marked(process: Process, token: str) -> bool:
    """Whether ``process`` carries ``MARK=token`` in its environment."""
    try:
        with open(f"{PROC}/{process.pid}/environ", "rb") as file:
            environment = file.read()
    except OSError:  # gone, or another user's
        return False
    return f"{MARK}={token}".encode() in environment.split(b"\0")


def _table() -> dict[int, Process]:
    found = (_read(pid) for pid in _pids())
    return {process.pid: process for process in found if process is not None}


def descendants(pid: int) -> list[Process]:
    """The live descendants of process ``pid``: children, theirs, and so on."""
    children: dict[int, list[Process]] = {}
    for process in _table().values():
        children.setdefault(process.ppid, []).append(process)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def ours(token: str) -> list[Process]:
    """The live processes that this one started (its descendants) or that carry
    ``MARK=token`` in their environment (whose parent died, reparented to init)."""
    me = _read(os.getpid())
    found = descendants(os.getpid())
    for process in _table().values():
        if me is None or process.start < me.start or process in found or process == me:
            continue  # older than this process: not started by it
        if _marked(process, token):
            found.append(process)
    return found


class Watch:
    """The processes that this pytest process started (``MARK=token``), followed from look to
    look: each reads only the processes that /proc shows anew since the last (a full scan of
    /proc costs several milliseconds on a busy machine, too much for every test)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.pids = _pids()
        self.known = ours(token)

    def look(self) -> list[Process]:
        """The live processes of ours that began since the last look, now :attr:`known` too;
        the known ones that have ended are forgotten."""
        pids = _pids()
        new = sorted(filter(None, map(_read, pids - self.pids)), key=lambda p: (p.start, p.pid))
        self.pids = pids
        self.known = [process for process in self.known if _read(process.pid) == process]
        mine = {os.getpid(), *(process.pid for process in self.known)}
        found = []
        for process in new:  # a parent began before its children
            if process.ppid in mine or _marked(process, self.token):
                mine.add(process.pid)
                found.append(process)
        self.known += found
        return found


def left_alive(processes: Iterable[Process], within: float) -> list[Process]:
    """Those of ``processes`` still alive after up to ``within`` seconds of waiting for them
    to end (looking every 0.1 s)."""
    deadline = time.monotonic() + within
    left = list(processes)
    while True:
        left = [process for process in left if _read(process.pid) == process]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def kill(processes: Iterable[Process]) -> None:
    """SIGKILL those of ``processes`` still alive."""
    for process in processes:
        if _read(process.pid) == process:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(process.pid, signal.SIGKILL)
