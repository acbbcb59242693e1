"""Processes of this machine, by id: whether one is still there. No torch."""

from __future__ import annotations

import os

__all__ = ["alive"]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (one of another user counts). A number
    that no process can have (0 or less, which ``kill`` takes for process groups, or one too
    large for the system) is no process: ids may come from file names others wrote.

    >>> alive(os.getpid()), alive(0), alive(2**70)
    (True, False, False)
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True
