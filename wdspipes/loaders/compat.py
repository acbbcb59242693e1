"""torchdata, mended where wdspipes needs it: every change wdspipes makes to torchdata is made
by this module (the main process's side of DataLoader2's workers is written in
:mod:`wdspipes.loaders.worker_queues`, the loaders' states in :mod:`wdspipes.loaders.loader_state`),
each applied only to the torchdata versions it was checked against (DataLoader2's: 0.8 and
0.9, whose code these mends touch is the same, and the last with DataLoader2;
StatefulDataLoader's: 0.8 to 0.11, :data:`STATEFUL_CHECKED`), and each leaves datasets that
are not wdspipes pipelines as torchdata has them (tests/test_compat.py runs them with and
without wdspipes imported).

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

A worker that dies (``kill -9``, the out-of-memory killer) left the main process waiting for
it forever. While it waits for a worker, the mended loader looks every 0.1 s whether the worker
is alive, and raises a :class:`~wdspipes.errors.WorkerError` naming the worker and the signal
that ended it; shutting the loader down then ends the other workers (killing any that does not
stop within a few seconds) and lets go of the shared-memory batch slots of dead workers (see
:mod:`wdspipes.samples.handover`). The other way round, a training process that dies without
shutting its loader down (SIGKILL, the out-of-memory killer) left torchdata's workers running,
parented to init, for good: the mended workers end within a few seconds of it, whatever killed
it, as torch's DataLoader's do (see :mod:`wdspipes.loaders.parent_watch`).

The same fix makes ``FullSync`` (the stage ``DistributedReadingService`` ends every rank's graph
with) let go of its prefetch thread without waiting for it when it is garbage-collected.
torchdata's ``__del__`` joins that thread; a collection can run inside Python's own thread
bookkeeping (while a new thread starts, holding the lock a thread that ends must take), and
there the join waited for itself: the rank hung, and the other ranks with it in their next
collective. An explicit ``shutdown()`` still waits, as torchdata's does.

**DataLoader2's state**, for a wdspipes pipeline: ``state_dict()``, ``load_state_dict()`` and
``DataLoader2.from_state`` save and restore the rest of the epoch exactly, with any reading
service (see :mod:`wdspipes.loaders.loader_state`). The reading services become checkpointable
(their part of the state is empty: the pipeline's is wdspipes'), so that
``SequentialReadingService`` no longer warns at each ``state_dict()``.

**StatefulDataLoader** (:func:`mend_stateful_dataloader`), for a dataset that is a wdspipes
pipeline, and only there:

- it gives the loader the pipeline's ``state_dict`` and ``load_state_dict``: the loader wraps
  a DataPipe in torch's ``_IterDataPipeSerializationWrapper``, which hides them, so wdspipes
  gives such a loader a subclass of that wrapper that has them;
- loading a state saved with another number of workers (where torchdata would fail with a bare
  assertion or a missing key), or merged across ranks (:func:`~wdspipes.loaders.loader_state.
  merge_states`), gives every worker the workers' states merged, of which each takes its share;
- with torchdata 0.11's ``in_order=False`` and workers, whose state cannot say which items
  were delivered, its ``state_dict()`` and ``load_state_dict()`` raise
  :class:`~wdspipes.errors.ResumeError` (torchdata only logs that it promises nothing);
- loading a state primes the main process's copy of the pipeline with the epoch of the state,
  so that the epochs after the restored one are numbered (and so shuffled) as in the run that
  saved it. Without workers the loader restores the pipeline itself; with persistent workers
  the restored workers go on; but workers started afresh for each epoch are copies of the main
  process's pipeline, which never sees the state.

Both are applied when wdspipes is imported.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch.multiprocessing as torch_multiprocessing
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes._hook_iterator import hook_iterator
from torch.utils.data.datapipes.datapipe import _IterDataPipeSerializationWrapper

from wdspipes.core.engine import upstream_of
from wdspipes.core.stage import Stage
from wdspipes.errors import ResumeError
from wdspipes.loaders import loader_state, parent_watch, worker_queues
from wdspipes.loaders.loader_state import KEY, Deliveries, StateChannel, StateTags, Tagged

__all__ = [
    "StatefulPipeline",
    "fix_dataloader2",
    "mend_stateful_dataloader",
    "torchdata_version",
]

log = logging.getLogger(__name__)

_FULL_SYNC = "torchdata.datapipes.iter.util.distributed"
_LOADER = "torchdata.dataloader2.dataloader2"
_SERVICES = "torchdata.dataloader2.reading_service"
_FIXED = "_wdspipes_fixed"

STATEFUL_CHECKED = ("0.8.", "0.9.", "0.10.", "0.11.")
"""The torchdata versions whose StatefulDataLoader :func:`mend_stateful_dataloader` was checked
against: its state's keys (``_snapshot``, ``_main_snapshot``, ``_num_workers``,
``_worker_snapshots``, ``worker_<id>``, ``dataset_state``) and its wrapping of DataPipes. 0.10's
``torchdata.stateful_dataloader`` is 0.9's, file for file; 0.11 adds ``in_order`` (for which
torchdata itself promises no exact resume when it is False) and keeps the rest; the suite runs
on 0.9 and 0.11 (``make test``)."""


def torchdata_version() -> str:
    """The version of the torchdata loaded in this process; "" if it is not loaded."""
    return str(getattr(sys.modules.get("torchdata"), "__version__", ""))


def fix_dataloader2() -> bool:
    """Mend torchdata's DataLoader2 (see the module): its round-robin lets workers finish at
    different times, waits without polling and notices a worker that died; its prefetch
    buffers wait without polling; FullSync lets go of its thread when collected; and the loader
    saves and restores a wdspipes pipeline's state; its workers end with the training process.
    Does nothing unless torchdata 0.8 or 0.9's
    DataLoader2 is loaded; applying it twice changes nothing. Returns whether the fix is in
    place."""
    queues = sys.modules.get(worker_queues.QUEUES)
    if queues is None:
        return False
    consumer = queues._IterateQueueDataPipes
    if getattr(consumer, _FIXED, False):
        return True
    version = torchdata_version()
    if not version.startswith(("0.8.", "0.9.")):
        log.debug("torchdata %s: DataLoader2 left as it is", version)
        return False
    namespace: dict[str, Any] = {"__iter__": worker_queues.round_robin}
    hook_iterator(namespace)  # the per-item bookkeeping torch gives every __iter__
    consumer.__iter__ = namespace["__iter__"]
    consumer.request_terminate = worker_queues.request_terminate
    queues.QueueWrapper._get_response = worker_queues.get_response
    prefetcher = importlib.import_module(worker_queues.PREFETCHER).PrefetcherIterDataPipe
    namespace = {"__iter__": worker_queues.prefetched}
    hook_iterator(namespace)
    prefetcher.__iter__ = namespace["__iter__"]
    prefetcher.thread_worker = staticmethod(worker_queues.prefetch)
    full_sync = importlib.import_module(_FULL_SYNC).FullSyncIterDataPipe
    full_sync.__del__ = worker_queues.release_full_sync
    _mend_services(importlib.import_module(_SERVICES))
    parent_watch.mend(importlib.import_module(parent_watch.EVENTLOOP))
    _mend_loader(importlib.import_module(_LOADER))
    setattr(consumer, _FIXED, True)
    log.debug(
        "mended DataLoader2's round-robin (pytorch/data#1310), prefetch, FullSync, state, "
        "workers' end"
    )
    return True


def _mend_services(services: ModuleType) -> None:
    """The reading services: MultiProcessingReadingService's workers know their numbers (for
    their pipelines' states) and the loader knows their processes (to notice one that died,
    and to end any that does not stop); and the services are checkpointable, with an empty
    part (the pipeline's state is wdspipes')."""
    multiprocessing = services.MultiProcessingReadingService
    initialize, finalize = multiprocessing.initialize, multiprocessing.finalize

    @functools.wraps(initialize)
    def initialize_workers(self: Any, datapipe: Any) -> Any:
        tagged = any(isinstance(stage, StateTags) for stage in (datapipe, *upstream_of(datapipe)))
        if self.num_workers and tagged:
            context = torch_multiprocessing.get_context(self.multiprocessing_context)
            channels = [StateChannel(*context.Pipe()) for _ in range(self.num_workers)]
            self.worker_init_fn = _NumberWorker(self.worker_init_fn, channels)
            self._wds_channels = channels
        end = initialize(self, datapipe)
        for index, (wrapper, (process, _, _)) in enumerate(
            zip(self._worker_datapipes, self._worker_processes, strict=True)
        ):
            wrapper._wds_process, wrapper._wds_index = process, index
        first = self.__dict__.pop("_wds_first_turn", 0)  # a restored state's (see below)
        if first and self._worker_consumer_datapipe is not None:
            self._worker_consumer_datapipe._wds_first_turn = first
        return end

    end_processes = worker_queues.end_processes  # bound now: a loader collected at exit ends

    @functools.wraps(finalize)
    def finalize_workers(self: Any) -> None:
        processes = [process for process, _, _ in self._worker_processes]
        finalize(self)
        if processes:
            end_processes(processes)

    multiprocessing.initialize = initialize_workers
    multiprocessing.finalize = finalize_workers
    for service in (multiprocessing, services.DistributedReadingService):
        service.checkpoint = _checkpoint
        service.restore = _restore


def _checkpoint(self: Any) -> bytes:
    """A reading service's part of DataLoader2's state: none (the pipeline's is wdspipes')."""
    return b""


def _restore(self: Any, datapipe: Any, serialized_state: bytes) -> Any:
    """A reading service restored: set up afresh, as its part of the state is empty."""
    return self.initialize(datapipe)


class _NumberWorker:
    """A worker's init function (MultiProcessingReadingService's ``worker_init_fn``) that tells
    the pipeline's :class:`~wdspipes.loaders.loader_state.StateTags` which worker it runs in and
    has it answer the main process's requests for states on the worker's channel, then calls
    the user's own, if any."""

    def __init__(
        self, init: Callable[[Any, Any], Any] | None, channels: list[StateChannel]
    ) -> None:
        self.init = init
        self.channels = channels

    def __call__(self, datapipe: Any, worker_info: Any) -> Any:
        worker = worker_info.worker_id
        for stage in (datapipe, *upstream_of(datapipe)):
            if isinstance(stage, StateTags):
                stage.worker = worker
                self.channels[worker].serve(stage)
        return datapipe if self.init is None else self.init(datapipe, worker_info)


def _mend_loader(loader: ModuleType) -> None:
    """DataLoader2 saves and restores a wdspipes pipeline's state (see
    :mod:`wdspipes.loaders.loader_state`): as an epoch begins, after the delivery of items and in
    its ``state_dict()``. (A state given to ``load_state_dict`` or ``from_state`` is taken
    back as the first epoch begins: DataLoader2 keeps it.)"""
    cls, iterator = loader.DataLoader2, loader.DataLoader2Iterator
    original_iter, original_next, original_state = cls.__iter__, iterator.__next__, cls.state_dict

    @functools.wraps(original_iter)
    def iterate(self: Any) -> Any:
        if self._reset_iter and self.datapipe is not None:  # an epoch begins
            _begin_epoch(self)
        return original_iter(self)

    @functools.wraps(original_next)
    def next_item(self: Any) -> Any:
        value = original_next(self)
        if isinstance(value, Tagged):
            self.dataloader._wds_deliveries.delivered(value)
            return value.value
        return value

    @functools.wraps(original_state)
    def state_dict(self: Any) -> dict[str, Any]:
        state: dict[str, Any] = original_state(self)
        deliveries = self.__dict__.get("_wds_deliveries")
        if deliveries is not None and KEY not in state:
            state[KEY] = deliveries.to_state(_states_kept(self))
        return state

    cls.__iter__, iterator.__next__, cls.state_dict = iterate, next_item, state_dict


def _begin_epoch(loader: Any) -> None:
    """A DataLoader2's epoch begins. At its first, a wdspipes pipeline gets the stage that tags
    items with its state, which takes the state the loader was given back, if any; its seeds
    are then drawn again from where they were as the saved epoch began, and the worker whose
    turn was next begins. At every epoch, the record of what was delivered moves on."""
    deliveries = loader.__dict__.get("_wds_deliveries")
    if deliveries is not None:
        deliveries.epoch_begins()
        return
    if not loader_state.is_wdspipes_pipeline(loader.datapipe):
        return
    workers, layout = loader_state.dataloader2_layout(loader.reading_service)
    saved = (loader._state_dict or {}).get(KEY)
    restoring = None if saved is None else loader_state.restoring(saved, workers, layout)
    service = _multiprocessing(loader.reading_service)
    ahead = getattr(service, "worker_prefetch_cnt", 0) + getattr(service, "main_prefetch_cnt", 0)
    loader.datapipe = loader._wds_tags = StateTags(loader.datapipe, restoring, ahead + _MARGIN)
    loader._wds_deliveries = Deliveries(workers, layout)
    if saved is None or restoring is None:
        return
    loader._seed_generator = loader._initial_seed_generator
    last = saved.get("last_worker")
    if restoring.readers is not None and last is not None and workers:
        _multiprocessing(loader.reading_service)._wds_first_turn = (last + 1) % workers


_MARGIN = 16
"""Items a worker's StateTags keeps the states of beyond the prefetch buffers' (the queue's
item, FullSync's)."""


def _states_kept(loader: Any) -> Callable[[int, int], Any]:
    """How a DataLoader2's ``state_dict()`` gets the state kept for a worker's item: from its
    StateTags in this process without workers, else on the worker's channel."""
    tags: StateTags = loader._wds_tags
    service = _multiprocessing(loader.reading_service)
    channels: list[StateChannel] | None = getattr(service, "_wds_channels", None)
    if channels is None:
        return lambda worker, number: tags.state_of(number)

    def ask(worker: int, number: int) -> Any:
        wrapper = service._worker_datapipes[worker]
        return channels[worker].ask(number, lambda: worker_queues.check_alive(wrapper, worker))

    return ask


def _multiprocessing(service: Any) -> Any:
    for each in getattr(service, "reading_services", None) or (service,):
        if type(each).__name__ == "MultiProcessingReadingService":
            return each
    return service


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
    original_state = StatefulDataLoader.state_dict

    @functools.wraps(original_init)
    def init(self: Any, dataset: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, dataset, *args, **kwargs)
        if isinstance(dataset, Stage) and isinstance(dataset, IterDataPipe):
            # DataLoader forbids setting its dataset once made; this wrapper is torch's own
            # with two methods more.
            object.__setattr__(self, "dataset", StatefulPipeline(dataset))

    @functools.wraps(original_load)
    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        if isinstance(self.dataset, StatefulPipeline) and state_dict:
            _refuse_out_of_order(self)
            state_dict = _for_workers(self, state_dict)
        original_load(self, state_dict)

    @functools.wraps(original_state)
    def state_dict(self: Any) -> dict[str, Any]:
        if isinstance(self.dataset, StatefulPipeline):
            _refuse_out_of_order(self)
        return original_state(self)  # type: ignore[no-any-return]

    StatefulDataLoader.__init__ = init
    StatefulDataLoader.load_state_dict = load_state_dict
    StatefulDataLoader.state_dict = state_dict
    _mended = True
    return True


def _refuse_out_of_order(loader: Any) -> None:
    """A loader whose workers' items come in the order they are ready (torchdata 0.11's
    ``in_order=False``) keeps no state that says which items were delivered: refused, rather
    than resumed with samples lost or repeated."""
    if loader.num_workers and not getattr(loader, "in_order", True):
        raise ResumeError(
            "StatefulDataLoader(in_order=False) delivers its workers' items as they are ready, "
            "and its state cannot say which were delivered: a wdspipes pipeline cannot "
            "resume exactly from it; use in_order=True (the default) to save or load a state"
        )


def _for_workers(loader: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as ``loader`` takes it: as it is, saved with the same number of workers;
    otherwise (or merged across ranks) with the workers' pipeline states merged and given to
    every worker. The main process's copy of the pipeline gets the epoch of the state."""
    merged = state.get(KEY)
    if merged is None:
        pipelines = loader_state.stateful_pipelines(state)
        if loader_state.stateful_workers(state) == loader.num_workers:
            loader_state.prime(loader.dataset._datapipe, pipelines)
            return state
        try:
            merged = loader_state.merge_states(pipelines)
        except ResumeError as exn:
            raise ResumeError(
                f"the state was saved by a StatefulDataLoader with "
                f"{loader_state.stateful_workers(state)} workers, and this one has "
                f"{loader.num_workers}: with another number of workers or ranks, give every "
                f"rank the states of all ranks merged by wdspipes.merge_states ({exn})"
            ) from exn
    loader_state.prime(loader.dataset._datapipe, [merged])
    return loader_state.stateful_for(state, loader.num_workers, merged)
