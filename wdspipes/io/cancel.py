"""Stopping blocking reads from another thread: how read-ahead ends a background fetch at once.

A thread that fetches a shard in the background runs inside :func:`cancellable` with a
:class:`Cancel`; the streams it opens there (an HTTP request waiting for its first byte, a
``pipe:`` command) register how to stop themselves with :func:`on_cancel`. Another thread then
calls :meth:`Cancel.cancel`: each registered stream is aborted, and its blocked call returns or
raises in the fetching thread, which sees the cancel and stops. A stream opened outside any
:func:`cancellable` block registers nothing and costs nothing.

>>> cancel = Cancel()
>>> stopped = []
>>> with cancellable(cancel):
...     on_cancel(lambda: stopped.append("request"))
>>> cancel.cancel()
>>> stopped, cancel.cancelled
(['request'], True)
>>> on_cancel(lambda: stopped.append("elsewhere"))  # no cancellable block: nothing to do
>>> stopped
['request']
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

__all__ = ["Cancel", "cancellable", "on_cancel"]

log = logging.getLogger(__name__)

_local = threading.local()


class Cancel:
    """Stops the streams of one background fetch: what they registered runs once, on
    :meth:`cancel`; what registers after the cancel runs at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborts: list[Callable[[], None]] = []
        self.cancelled = False

    def add(self, abort: Callable[[], None]) -> None:
        """Call ``abort`` on cancel (now, if cancelled already)."""
        with self._lock:
            if not self.cancelled:
                self._aborts.append(abort)
                return
        _call(abort)

    def cancel(self) -> None:
        """Abort every stream registered, once; later calls do nothing."""
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
            aborts, self._aborts = self._aborts, []
        for abort in aborts:
            _call(abort)


def _call(abort: Callable[[], None]) -> None:
    try:
        abort()
    except Exception:  # the fetch is being abandoned: its stream's failure can matter to no one
        log.debug("aborting a background fetch failed", exc_info=True)


@contextlib.contextmanager
def cancellable(cancel: Cancel) -> Iterator[None]:
    """Streams opened in this thread inside the block register with ``cancel``."""
    previous = getattr(_local, "cancel", None)
    _local.cancel = cancel
    try:
        yield
    finally:
        _local.cancel = previous


def on_cancel(abort: Callable[[], None]) -> None:
    """Register ``abort`` with the :class:`Cancel` of the current thread's fetch, if any."""
    cancel: Cancel | None = getattr(_local, "cancel", None)
    if cancel is not None:
        cancel.add(abort)
