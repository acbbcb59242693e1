"""torchdata, mended where wdspipes needs it: every change wdspipes makes to torchdata is in this
module, each applied only to the torchdata versions it was checked against (0.8 and 0.9, whose
code these mends touch is the same), and each leaves datasets that are not wdspipes pipelines
as torchdata has them (tests/test_compat.py runs them with and without wdspipes imported).

**DataLoader2** (:func:`fix_dataloader2`). With ``MultiProcessingReadingService``, as soon as
one worker runs out of items before another (3 shards on 2 workers, or fewer shards than
workers), the main process asks the finished worker for more and waits on one it never asked,
failing with "Can not expect any response without submitted request" (pytorch/data#1310,
#1228; DataLoader2 is no longer maintained). Shards rarely split evenly among workers, so every
wdspipes pipeline needs the fix: it is applied when wdspipes is imported after torchdata's
DataLoader2, and whenever a wdspipes graph is pickled in a process where DataLoader2 is loaded,
which DataLoader2 always does before it starts its workers. It also waits by polling: its
prefetch buffers (``worker_prefetch_cnt``, ``main_prefetch_cnt``, 10 by default) wake every
0.1 ms to look for an item or for room, and its main process polled the worker queues, sleeping
1 ms between looks. On a machine with few cores those threads take the CPU from the ones
decoding images. The mend waits on a condition (the prefetch buffers) and on the queue itself
(the round-robin) instead, woken by the item that arrives. These are changes of torchdata's
classes, for every DataLoader2 in the process: the items and their order are the same as
torchdata's wherever torchdata's own code does not fail.

The same fix makes ``FullSync`` (the stage ``DistributedReadingService`` ends every rank's graph
with) let go of its prefetch thread without waiting for it when it is garbage-collected.
torchdata's ``__del__`` joins that thread; a collection can run inside Python's own thread
bookkeeping (while a new thread starts, holding the lock a thread that ends must take), and
there the join waited for itself: the rank hung, and the other ranks with it in their next
collective. An explicit ``shutdown()`` still waits, as torchdata's does.

**StatefulDataLoader** (:func:`mend_stateful_dataloader`), for a dataset that is a wdspipes
pipeline, and only there:

- it gives the loader the pipeline's ``state_dict`` and ``load_state_dict``: the loader wraps
  a DataPipe in torch's ``_IterDataPipeSerializationWrapper``, which hides them, so wdspipes
  gives such a loader a subclass of that wrapper that has them;
- loading a state refuses, naming both counts, a state saved with another number of workers
  (torchdata would fail later with a bare assertion or a missing key);
- loading a state primes the main process's copy of the pipeline with the epoch numbers of the
  state, so that the epochs after the restored one are numbered (and so shuffled) as in the
  run that saved it. Without workers the loader restores the pipeline itself; with persistent
  workers the restored workers go on; but workers started afresh for each epoch are copies of
  the main process's pipeline, which never sees the state.

Both are applied when wdspipes is imported.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes._hook_iterator import hook_iterator
from torch.utils.data.datapipes.datapipe import _IterDataPipeSerializationWrapper

from wdspipes.core.resumable import Resumable
from wdspipes.core.resume import prime_pipeline
from wdspipes.errors import ResumeError

__all__ = ["StatefulPipeline", "fix_dataloader2", "mend_stateful_dataloader", "torchdata_version"]

log = logging.getLogger(__name__)

_QUEUES = "torchdata.dataloader2.communication.iter"
_PREFETCHER = "torchdata.datapipes.iter.util.prefetcher"
_FULL_SYNC = "torchdata.datapipes.iter.util.distributed"
_FIXED = "_wdspipes_fixed"
_WAKE_UP = 0.1  # seconds: how often a wait for a worker looks whether the loader was shut down

STATEFUL_CHECKED = ("0.8.", "0.9.")
"""The torchdata versions whose StatefulDataLoader :func:`mend_stateful_dataloader` was checked
against: its state's keys (``_snapshot``, ``_main_snapshot``, ``_num_workers``,
``_worker_snapshots``, ``worker_<id>``, ``dataset_state``) and its wrapping of DataPipes."""


def torchdata_version() -> str:
    """The version of the torchdata loaded in this process; "" if it is not loaded."""
    return str(getattr(sys.modules.get("torchdata"), "__version__", ""))


def fix_dataloader2() -> bool:
    """Replace the round-robin of ``MultiProcessingReadingService`` with one that lets workers
    finish at different times and waits without polling, and make the prefetch buffers wait
    without polling. Does nothing unless torchdata 0.8 or 0.9's DataLoader2 is loaded; applying
    it twice changes nothing. Returns whether the fix is in place."""
    queues = sys.modules.get(_QUEUES)
    if queues is None:
        return False
    consumer = queues._IterateQueueDataPipes
    if getattr(consumer, _FIXED, False):
        return True
    version = getattr(sys.modules.get("torchdata"), "__version__", "")
    if not version.startswith(("0.8.", "0.9.")):
        log.debug("torchdata %s: DataLoader2 left as it is", version)
        return False
    namespace: dict[str, Any] = {"__iter__": _round_robin}
    hook_iterator(namespace)  # the per-item bookkeeping torch gives every __iter__
    consumer.__iter__ = namespace["__iter__"]
    prefetcher = importlib.import_module(_PREFETCHER).PrefetcherIterDataPipe
    namespace = {"__iter__": _prefetched}
    hook_iterator(namespace)
    prefetcher.__iter__ = namespace["__iter__"]
    prefetcher.thread_worker = staticmethod(_prefetch)
    importlib.import_module(_FULL_SYNC).FullSyncIterDataPipe.__del__ = _release_full_sync
    setattr(consumer, _FIXED, True)
    log.debug("mended DataLoader2's round-robin (pytorch/data#1310), prefetch buffers, FullSync")
    return True


def _round_robin(self: Any) -> Iterator[Any]:
    """``_IterateQueueDataPipes.__iter__``, mended: one item from each worker in turn, each
    worker with at most one request outstanding; a worker that stops leaves the turn.

    Keeps the original's contract: responses stored by a pause come first, a request limit
    ends the epoch once the responses already asked for are delivered, termination ends it
    at once, and worker errors are raised here.
    """
    messages = importlib.import_module("torchdata.dataloader2.communication.messages")
    queues = sys.modules[_QUEUES]
    active = list(range(len(self.datapipes)))
    for index in active:
        if (
            not self.datapipes[index].protocol.waiting_for_response()
            and not self.res_buffers[index]
        ):
            _request(self, index)
    turn = 0
    while active and not self._terminated:
        turn %= len(active)
        index = active[turn]
        response = _response(self, index, queues)
        if response is None:  # terminated, or no request left to wait for (limit reached)
            del active[turn]
            continue
        if isinstance(response, messages.InvalidStateResponse):
            raise queues.InvalidStateResetRequired
        if isinstance(response, messages.TerminateResponse):
            raise queues.TerminateRequired
        if isinstance(response, messages.WorkerExceptionResponse):
            response.exc.reraise()
        if isinstance(response, messages.StopIterationResponse):
            del active[turn]
            continue
        _request(self, index)
        turn += 1
        yield response.value


def _prefetched(self: Any) -> Iterator[Any]:
    """``PrefetcherIterDataPipe.__iter__``, waiting on a condition: the items that a thread
    (:func:`_prefetch`) reads ahead into a buffer, in order; its error is raised here."""
    communication = importlib.import_module("torchdata.dataloader2.communication")
    state = importlib.import_module(_PREFETCHER)._PrefetchData(
        self.source_datapipe, self.buffer_size
    )
    state.changed = changed = threading.Condition()
    buffer = state.prefetch_buffer
    self.prefetch_data = state
    thread = self.thread = threading.Thread(target=_prefetch, args=(state,), daemon=True)
    thread.start()
    try:
        while True:
            with changed:
                changed.wait_for(lambda: buffer or state.stop_iteration, _WAKE_UP)
                if not buffer:
                    if state.stop_iteration:
                        return
                    continue
                item = buffer.popleft()
                changed.notify_all()
            if isinstance(item, Exception):
                if isinstance(item, StopIteration | communication.iter.TerminateRequired):
                    return
                raise item
            yield item
    finally:
        state.run_prefetcher = False
        state.stop_iteration = True
        state.paused = False
        with changed:
            changed.notify_all()
        thread.join()


def _prefetch(state: Any) -> None:
    """``PrefetcherIterDataPipe.thread_worker``, waiting on a condition: read the source into
    the buffer while there is room, until the source ends or fails (the error goes into the
    buffer) or the reader stops. Pausing (torchdata's ``pause()`` clears ``run_prefetcher``
    and waits for ``paused``) works as before."""
    changed: threading.Condition = state.changed
    buffer = state.prefetch_buffer
    items = iter(state.source_datapipe)
    while not state.stop_iteration:
        if not state.run_prefetcher:
            state.paused = True
            time.sleep(0.001)  # paused: torchdata's resume() sets run_prefetcher again
            continue
        with changed:
            if len(buffer) >= state.buffer_size:
                changed.wait_for(
                    lambda: len(buffer) < state.buffer_size or not state.run_prefetcher,
                    _WAKE_UP,
                )
                continue
        try:
            item = next(items)
        except Exception as exn:
            item = exn
            state.run_prefetcher = False
            state.stop_iteration = True
        with changed:
            buffer.append(item)
            changed.notify_all()


def _release_full_sync(self: Any) -> None:
    """``FullSyncIterDataPipe.__del__``, mended: stop its prefetch thread without joining it.

    A garbage collection may run this on any thread at any allocation, including inside
    ``threading``'s bookkeeping of a thread that starts, which holds the lock that a joined
    thread takes as it ends: torchdata's join there never returned. The thread, told to stop,
    ends by itself once its current item is read."""
    prefetch = getattr(self, "_executor", None)
    if prefetch is None:
        return
    self._executor = None
    prefetch._paused = False
    prefetch._is_shutdown = True
    while prefetch._futures:
        prefetch._futures.popleft().cancel()
    prefetch._executor.shutdown(wait=False)


def _request(self: Any, index: int) -> None:
    """Ask worker ``index`` for its next item, unless the request limit is reached."""
    if self._limit is not None and self._request_cnt >= self._limit:
        return
    self.datapipes[index].protocol.request_next()
    self._request_cnt += 1


def _response(self: Any, index: int, queues: ModuleType) -> Any:
    """Worker ``index``'s answer to its outstanding request, or None if it has none."""
    if self.res_buffers[index]:
        return self.res_buffers[index].popleft()
    protocol = self.datapipes[index].protocol
    if not protocol.waiting_for_response():
        return None
    while not self._terminated:
        try:
            # A blocking wait, woken by the worker's answer: polling with sleeps (as torchdata
            # does) cost the main process over 100 µs of CPU per batch of images.
            return protocol.get_response_next(block=True, timeout=_WAKE_UP)
        except queues.communication.protocol.EmptyQueue:
            continue
    return None


class StatefulPipeline(_IterDataPipeSerializationWrapper):
    """torch's wrapper of a DataPipe for a loader, for a wdspipes pipeline: with the pipeline's
    ``state_dict`` and ``load_state_dict``, which torch's wrapper hides."""

    def __init__(self, datapipe: IterDataPipe[Any]) -> None:
        super().__init__(datapipe)  # type: ignore[no-untyped-call]

    def state_dict(self) -> dict[str, Any]:
        return self._datapipe.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._datapipe.load_state_dict(state_dict)


_mended = False


def mend_stateful_dataloader() -> bool:
    """Make torchdata's ``StatefulDataLoader`` ready for wdspipes pipelines (see the module).
    Does nothing unless torchdata's version is one of :data:`STATEFUL_CHECKED`; applying it
    twice changes nothing. Returns whether the mend is in place."""
    global _mended
    if _mended:
        return True
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:  # pragma: no cover - torchdata < 0.8, or none (Python 3.13+)
        return False
    version = torchdata_version()
    if not version.startswith(STATEFUL_CHECKED):
        log.debug("torchdata %s: StatefulDataLoader left as it is", version)
        return False
    original_init = StatefulDataLoader.__init__
    original_load = StatefulDataLoader.load_state_dict

    @functools.wraps(original_init)
    def init(self: Any, dataset: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, dataset, *args, **kwargs)
        if isinstance(dataset, Resumable) and isinstance(dataset, IterDataPipe):
            # DataLoader forbids setting its dataset once made; this wrapper is torch's own
            # with two methods more.
            object.__setattr__(self, "dataset", StatefulPipeline(dataset))

    @functools.wraps(original_load)
    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        if isinstance(self.dataset, StatefulPipeline) and state_dict:
            pipeline = _check_workers(self, state_dict)
            if pipeline is not None:
                prime_pipeline(self.dataset._datapipe, pipeline)
        original_load(self, state_dict)

    StatefulDataLoader.__init__ = init
    StatefulDataLoader.load_state_dict = load_state_dict
    _mended = True
    return True


def _check_workers(loader: Any, state: dict[str, Any]) -> dict[str, Any] | None:
    """Refuse a loader state of another worker count; return one worker's pipeline state.
    The keys are torchdata's (see :data:`STATEFUL_CHECKED`)."""
    if "_snapshot" in state:
        snapshot = state["_snapshot"]
        saved = snapshot["_main_snapshot"]["_num_workers"]
        workers = snapshot.get("_worker_snapshots", {})
        first = workers.get("worker_0") or {}
        pipeline = first.get("dataset_state")
    else:
        saved = 0
        pipeline = state.get("dataset_state")
    if saved != loader.num_workers:
        raise ResumeError(
            f"the state was saved by a StatefulDataLoader with {saved} workers, and this one has "
            f"{loader.num_workers}: wdspipes resumes only with the same number of workers, "
            "since each worker reads its own shards. Keep the count, or start the epoch afresh "
            "without the state."
        )
    return pipeline if isinstance(pipeline, dict) else None
