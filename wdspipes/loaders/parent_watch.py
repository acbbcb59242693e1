"""DataLoader2's worker processes end with the process that started them (see
:mod:`wdspipes.loaders.compat`, which applies this for the torchdata versions it checked).

torch's DataLoader workers look every 5 s whether their parent process still lives, and end
when it does not. torchdata 0.9's workers (and its dispatching process) wait for the training
process's next request on their queue without end: a training process that dies without
shutting its loader down (SIGKILL, the out-of-memory killer, a preemption) left them running,
parented to init and holding their memory, until someone killed them. Their queues never
break, as each worker holds both ends of them.

DataLoader2 makes its processes through torchdata's ``CreateProcessForDataPipeline`` (and
``...MultipleDataPipelines``, the dispatching process's); wrapped by :func:`mend`, each process
starts a watchdog thread (:class:`EndWithParent`) before torchdata's loop. It looks every
:data:`LOOK_EVERY` seconds whether the process that started the worker still lives; when it does
not, it asks the worker to end as the loader's own shutdown does (a terminate request, put on
the worker's request queue, taken once the item in hand is sent), and ends the process if it is
still there :data:`GRACE` seconds later (a worker stuck in a stage). The thread is a daemon, so
it never keeps a worker alive at its normal end, and costs nothing per item.

Linux's ``PR_SET_PDEATHSIG`` is not used: it signals a child when the *thread* that started it
ends, and DataLoader2 starts its workers in whichever thread first iterates the loader, so a
loader first iterated in a thread that has since ended would lose its workers while the
training process lives; and its signal ends a worker without its normal end.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from wdspipes.core.processes import alive

__all__ = ["GRACE", "LOOK_EVERY", "EndWithParent", "mend"]

log = logging.getLogger(__name__)

EVENTLOOP = "torchdata.dataloader2.communication.eventloop"
_MESSAGES = "torchdata.dataloader2.communication.messages"
_CREATORS = ("CreateProcessForDataPipeline", "CreateProcessForMultipleDataPipelines")

LOOK_EVERY = 1.0
"""Seconds between a watchdog's looks at whether the worker's training process still lives."""

GRACE = 5.0
"""Seconds a worker whose training process died has to end as told, before it exits."""


def mend(eventloop: ModuleType) -> None:
    """Have every process that torchdata's ``eventloop`` module makes for DataLoader2 (workers
    and the dispatching process) end with the process that made it."""
    for name in _CREATORS:
        setattr(eventloop, name, _watched(getattr(eventloop, name)))


def _watched(create: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(create)
    def create_watched(multiprocessing_ctx: Any, *args: Any, **kwargs: Any) -> Any:
        process, requests, responses = create(multiprocessing_ctx, *args, **kwargs)
        served = multiprocessing_ctx.get_start_method() == "forkserver"
        # Not started yet: its run() calls the target, now torchdata's loop behind a watchdog.
        process._target = EndWithParent(process._target, requests, responses, served)
        return process, requests, responses

    return create_watched


class EndWithParent:
    """A DataLoader2 process's target: torchdata's loop (``target``), run with a watchdog that
    ends the process when the one that made this object has died. Its queues (one or a list
    each) are those the loop takes its requests from and answers on; ``served``: the process is
    started by a forkserver (its parent), not by the process that made this object. It
    pickles, for the ``spawn`` and ``forkserver`` start methods."""

    def __init__(
        self, target: Callable[..., Any], requests: Any, responses: Any, served: bool = False
    ) -> None:
        self.target = target
        self.requests = requests if isinstance(requests, list) else [requests]
        self.responses = responses if isinstance(responses, list) else [responses]
        self.creator = os.getpid()
        self.served = served

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        parent = os.getppid()  # the creator (unless already gone), or the forkserver
        threading.Thread(
            target=self._watch, args=(parent,), name="wdspipes-parent-watch", daemon=True
        ).start()
        return self.target(*args, **kwargs)

    def _watch(self, parent: int) -> None:
        while not _gone(self.creator, parent, self.served):
            time.sleep(LOOK_EVERY)
        log.warning(
            "DataLoader2 worker pid %d: its training process (pid %d) is gone: ending",
            os.getpid(),
            self.creator,
        )
        self._terminate()
        time.sleep(GRACE)
        log.warning("DataLoader2 worker pid %d did not end in %.0f s: exiting", os.getpid(), GRACE)
        os._exit(1)

    def _terminate(self) -> None:
        """Ask the loop to end, as the loader's shutdown does; what is still queued for the
        dead training process is not waited for at exit."""
        request = importlib.import_module(_MESSAGES).TerminateRequest
        for each in (*self.requests, *self.responses):
            each.cancel_join_thread()
        for requests in self.requests:
            try:
                requests.put_nowait(request())
            except (queue.Full, OSError, ValueError) as exn:  # the forced exit follows
                log.debug("could not ask the worker to end: %r", exn)


def _gone(creator: int, parent: int, served: bool) -> bool:
    """Whether process ``creator``, which made this process, has ended: this process's parent
    is no longer ``parent`` (its parent as it began); or, started by the creator itself (not
    ``served`` by a forkserver), that parent was not the creator (it had already ended); or,
    served, the creator is no more (the forkserver ends after it, but need not be waited for).
    """
    if os.getppid() != parent:
        return True
    return not alive(creator) if served else parent != creator
