"""Processes of this machine, by id: whether one is still there; and the memory allocator of
this one. No torch."""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["alive", "keep_heap_for"]


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


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's largest (64-bit)
_kept: tuple[int, int] = (0, 0)  # (pid, bytes) of the last keep_heap_for that took effect


def keep_heap_for(nbytes: int) -> bool:
    """Have glibc's allocator in this process keep freed memory as it would had it allocated
    and freed a block of ``nbytes`` itself (32 MiB at most, as glibc): smaller blocks come from
    the heap, and up to twice that of freed heap is kept for the next allocations rather than
    given back to the system. Never lowers what an earlier call set in this process.
    Returns whether the allocator is glibc's (elsewhere it does nothing).

    glibc raises these thresholds by itself each time it frees a large block it had mapped
    (its "dynamic threshold"). A worker that stacks its batches into shared memory (see
    :mod:`wdspipes.samples.handover`) never frees one, so its thresholds stay at 128 kB and
    256 kB: the decoded images of each batch, freed together once stacked, were given back to
    the system at every batch and faulted in again at the next, some 40 page faults an image
    of 256 x 256 (benchmarks/README.md, issue 34).

    >>> keep_heap_for(1 << 20) in (True, False)
    True
    """
    global _kept
    size, pid = min(nbytes, _MMAP_THRESHOLD_MAX), os.getpid()
    if _kept[0] == pid and _kept[1] >= size:
        return True
    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt(_M_MMAP_THRESHOLD, size)
    libc.mallopt(_M_TRIM_THRESHOLD, 2 * size)
    _kept = (pid, size)
    return True


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc's own; musl has no such function)
    except (OSError, AttributeError):
        return None
    return libc
