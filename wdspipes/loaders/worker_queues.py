"""The main process's side of DataLoader2's worker processes, mended (see
:mod:`wdspipes.loaders.compat`, which applies these in place of torchdata's own, for the versions
it checked): the round-robin over the workers' queues, which lets workers finish apart, waits
without polling and notices a worker that died; the prefetch buffers, which wait on a condition;
FullSync's thread let go of when collected; and the end of the workers, which never waits for a
dead one and kills one that does not stop.

A loader that finds a worker dead, or ends its workers, calls what :func:`on_workers_gone`
registered: the batch handover lets go of the shared-memory slots of dead workers so (see
:mod:`wdspipes.samples.handover`).
"""

from __future__ import annotations

import importlib
import logging
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from wdspipes.errors import WorkerError
from wdspipes.loaders.loader_state import Tagged

__all__ = [
    "check_alive",
    "end_processes",
    "get_response",
    "on_workers_gone",
    "prefetch",
    "prefetched",
    "release_full_sync",
    "request_terminate",
    "round_robin",
]

log = logging.getLogger(__name__)

QUEUES = "torchdata.dataloader2.communication.iter"
PREFETCHER = "torchdata.datapipes.iter.util.prefetcher"
_WAKE_UP = 0.1  # seconds: how often a wait for a worker looks whether it or the loader ended
_END_WAIT = 5.0  # seconds a worker has to exit once told to, before it is killed


def round_robin(self: Any) -> Iterator[Any]:
    """``_IterateQueueDataPipes.__iter__``, mended: one item from each worker in turn, each
    worker with at most one request outstanding; a worker that stops leaves the turn. The
    turn begins at worker 0, or where a restored state says; an item its worker numbered
    (:class:`~wdspipes.loaders.loader_state.Tagged`) is marked with the worker.

    Keeps the original's contract: responses stored by a pause come first, a request limit
    ends the epoch once the responses already asked for are delivered, termination ends it
    at once, and worker errors are raised here.
    """
    messages = importlib.import_module("torchdata.dataloader2.communication.messages")
    queues = sys.modules[QUEUES]
    active = list(range(len(self.datapipes)))
    for index in active:
        if (
            not self.datapipes[index].protocol.waiting_for_response()
            and not self.res_buffers[index]
        ):
            _request(self, index)
    turn = self.__dict__.pop("_wds_first_turn", 0)
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
        value = response.value
        if isinstance(value, Tagged):
            value.worker = index
        yield value


def prefetched(self: Any) -> Iterator[Any]:
    """``PrefetcherIterDataPipe.__iter__``, waiting on a condition: the items that a thread
    (:func:`_prefetch`) reads ahead into a buffer, in order; its error is raised here."""
    communication = importlib.import_module("torchdata.dataloader2.communication")
    state = importlib.import_module(PREFETCHER)._PrefetchData(
        self.source_datapipe, self.buffer_size
    )
    state.changed = changed = threading.Condition()
    buffer = state.prefetch_buffer
    self.prefetch_data = state
    thread = self.thread = threading.Thread(target=prefetch, args=(state,), daemon=True)
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


def prefetch(state: Any) -> None:
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


def release_full_sync(self: Any) -> None:
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
    """Worker ``index``'s answer to its outstanding request, or None if it has none.

    Raises:
        WorkerError: the worker exited while the loader waited for it.
    """
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
            check_alive(self.datapipes[index], index)
        except (OSError, EOFError) as exn:  # its end of the queue broke as it died
            check_alive(self.datapipes[index], index, _END_WAIT)
            raise WorkerError(f"DataLoader2 worker {index}'s queue broke: {exn}") from exn
    return None


def check_alive(wrapper: Any, index: int, wait: float = 0.0) -> None:
    """Raise a WorkerError if the process behind ``wrapper`` (worker ``index``) has exited, or
    exits within ``wait`` seconds."""
    process = getattr(wrapper, "_wds_process", None)
    if process is None:
        return
    if wait:
        process.join(wait)
    if process.exitcode is None:
        return
    for callback in _WORKERS_GONE:
        callback()
    raise WorkerError(
        f"DataLoader2 worker {index} (pid {process.pid}) exited unexpectedly: "
        f"{_how_it_ended(process.exitcode)}; the loader is shut down (if it was killed for "
        "memory, use fewer workers or smaller prefetch and shuffle buffers)"
    )


def _how_it_ended(exitcode: int) -> str:
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"exit code {exitcode}"


_WORKERS_GONE: list[Callable[[], None]] = []


def on_workers_gone(callback: Callable[[], None]) -> None:
    """Have ``callback`` called when a loader finds that a worker died, or shuts its workers
    down: the batch handover lets go of the slots of dead workers so (see
    :mod:`wdspipes.samples.handover`)."""
    if callback not in _WORKERS_GONE:
        _WORKERS_GONE.append(callback)


def get_response(self: Any, fn_name: str) -> None:
    """``QueueWrapper.get_response``, mended: wait for a worker's answer to a reset, pause,
    resume or limit request, and raise a WorkerError if the worker exited meanwhile."""
    protocol = sys.modules[QUEUES].communication.protocol
    get_response = getattr(self.protocol, fn_name)
    while True:
        try:
            get_response(block=False)  # these take no timeout: a short sleep, as torchdata's
            return
        except protocol.EmptyQueue:
            check_alive(self, getattr(self, "_wds_index", 0))
            time.sleep(0.001)


def request_terminate(self: Any) -> None:
    """``_IterateQueueDataPipes.request_terminate``, mended: an outstanding request is waited
    for a bounded time, and dropped if the worker died. torchdata waited for its answer forever,
    which never came from a dead worker, nor when the main prefetch thread took it first (a
    loader shut down right after the last item of an epoch hung so)."""
    self._terminated = True  # the prefetch thread's round-robin stops waiting
    for wrapper in self.datapipes:
        _discard(wrapper)
    for wrapper in self.datapipes:
        wrapper.protocol.request_terminate()


def _discard(wrapper: Any) -> None:
    """Take the answer to the outstanding request of the worker behind ``wrapper``, if any, by
    :data:`_END_WAIT` seconds; unless another thread takes it, or the worker has died."""
    protocol = wrapper.protocol
    deadline = time.monotonic() + _END_WAIT
    while protocol.waiting_for_response() and time.monotonic() < deadline:
        process = getattr(wrapper, "_wds_process", None)
        if process is not None and process.exitcode is not None:
            break
        try:
            response = protocol.response_queue.get(timeout=_WAKE_UP)
        except queue.Empty:
            continue
        protocol.request_served(response)
    protocol._req_sent = None


def end_processes(processes: list[Any]) -> None:
    """End the worker processes that outlived the loader's shutdown: torchdata joins each for
    20 s and goes on; those still alive then are killed."""
    deadline = time.monotonic() + _END_WAIT
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:
            log.warning("DataLoader2 worker pid %s did not stop: killed", process.pid)
            process.kill()
            process.join(_END_WAIT)
    for callback in _WORKERS_GONE:
        callback()
