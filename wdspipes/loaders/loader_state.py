"""The state of a wdspipes pipeline inside torchdata's loaders: DataLoader2's own
``state_dict()``, ``load_state_dict()`` and ``DataLoader2.from_state``, StatefulDataLoader's with
another number of workers, and :func:`merge_states` for another number of ranks. The mends that
install them are in :mod:`wdspipes.loaders.compat`, gated to the torchdata versions they were
checked against.

**DataLoader2.** Workers read ahead of what the training loop has taken: each keeps a prefetch
buffer, and the main process another. So the pipeline's state in a worker is never that of the
last batch delivered. The mended loader ends the pipeline with :class:`StateTags`, which takes
the pipeline's state as each item leaves it (a few kilobytes, in about 20 µs: per batch, a small
share of making it), keeps the states of the items not yet delivered, and sends each item out
numbered (:class:`Tagged`). The main process notes the number of the last item each worker
delivered (:class:`Deliveries`), and ``state_dict()`` asks each worker for the state of that
item (:class:`StateChannel`), holding those states, the worker whose turn is next, and the
epoch. Loaded into a loader with the same
workers (and rank), each worker takes its own state back and the round-robin goes on at the
worker whose turn it was: the batches are those the uninterrupted run would have delivered,
those prefetched but not delivered included. Loaded into a loader with another number of
workers, or merged across ranks (:func:`merge_states`), every worker takes its share of the work
left (see :mod:`wdspipes.core.elastic`).

**StatefulDataLoader** keeps a state per worker itself; with another number of workers, the
mend merges the workers' states and gives every new worker the merged state.

>>> plain = {"format": "wdspipes-state/3", "epoch": 0, "reader": [0, 1], "stages": {}}
>>> merge_states([plain])["readers"]
1
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import IterDataPipe

from wdspipes.core.elastic import merge_pipeline_states
from wdspipes.core.engine import FORMAT, Run, run_of, upstream_of
from wdspipes.core.stage import Stage
from wdspipes.errors import ResumeError

__all__ = [
    "KEY",
    "Deliveries",
    "StateChannel",
    "StateTags",
    "Tagged",
    "is_wdspipes_pipeline",
    "merge_states",
]

log = logging.getLogger(__name__)

KEY = "wdspipes"
"""The entry of a DataLoader2 state, and of a merged StatefulDataLoader state, that holds the
pipeline's states."""

LOADER_FORMAT = "wdspipes-dataloader2/1"


def is_wdspipes_pipeline(pipe: object) -> bool:
    """Whether ``pipe`` is, or reads, a wdspipes stage (whose state the loaders keep)."""
    if not isinstance(pipe, IterDataPipe):
        return False
    return any(isinstance(stage, Stage) for stage in (pipe, *upstream_of(pipe)))


class Tagged:
    """An item on its way from a worker to the training loop, with its number in that worker's
    stream of items (by which the state of the pipeline as the item left it is found: see
    :class:`StateTags`), the epoch it belongs to, and the worker it came from (set in the main
    process)."""

    __slots__ = ("epoch", "number", "value", "worker")

    def __init__(self, value: Any, number: int, epoch: int | None) -> None:
        self.value = value
        self.number = number
        self.epoch = epoch
        self.worker = 0

    def __getstate__(self) -> tuple[Any, int, int | None, int]:
        return self.value, self.number, self.epoch, self.worker

    def __setstate__(self, state: tuple[Any, int, int | None, int]) -> None:
        self.value, self.number, self.epoch, self.worker = state


class StateTags(IterDataPipe[Tagged]):
    """The stage DataLoader2's mend ends a wdspipes pipeline with, in each worker (or in the
    main process without workers): it numbers each item of the pipeline (a :class:`Tagged`,
    which the main process takes off before the training loop sees the item) and keeps, by
    number, the pipeline's state as the item left it (or the ResumeError that says why there
    is none), for the last :attr:`keep` items: at least those read ahead of the training loop.
    Restored, it hands its pipeline the state the loader was given as its epoch begins, after
    the loader seeded it (:attr:`restoring`).
    """

    def __init__(
        self, source_datapipe: IterDataPipe[Any], restoring: Restoring | None, keep: int
    ) -> None:
        self.source_datapipe = source_datapipe
        self.restoring = restoring
        self.keep = keep
        self.worker = 0  # set in each worker as it starts (see wdspipes.loaders.compat)
        self.states: dict[int, dict[str, Any] | ResumeError] = {}
        self.count = 0  # items tagged, in every epoch
        self.run = Run()  # the pipeline's, where it does not end in a wdspipes stage

    def __iter__(self) -> Iterator[Tagged]:
        restoring, self.restoring = self.restoring, None
        source = self.source_datapipe
        run = run_of(source, self.run)
        if restoring is not None:
            restoring.restore(run, source, self.worker)
        epoch, states = run.open(source), self.states
        for item in epoch.items():
            number = self.count = self.count + 1
            try:
                state: dict[str, Any] | ResumeError = epoch.state()
            except ResumeError as exn:
                state = exn
            states[number] = state
            states.pop(number - self.keep, None)
            yield Tagged(item, number, state.get("epoch") if isinstance(state, dict) else None)

    def state_of(self, number: int) -> dict[str, Any] | ResumeError:
        """The state kept for item ``number``.

        Raises:
            ResumeError: it is not kept any more (more items were read ahead than kept).
        """
        state = self.states.get(number)
        if state is None:
            raise ResumeError(
                f"the pipeline's state as item {number} left it is no longer kept (the last "
                f"{self.keep} are): more items were read ahead than the loader's prefetch "
                "counts allow"
            )
        return state


class Restoring:
    """A DataLoader2 state that its workers (or the main process) take back as their first
    epoch begins: each worker its own pipeline state, or all of them a merged one."""

    def __init__(self, readers: list[Any] | None, merged: dict[str, Any] | None) -> None:
        self.readers = readers
        self.merged = merged

    def restore(self, run: Run, pipeline: IterDataPipe[Any], worker: int) -> None:
        if self.merged is not None:
            run.load(pipeline, self.merged)
            return
        assert self.readers is not None
        state = self.readers[worker]
        if state is None:
            return
        if "start" in state:  # it had delivered nothing of the epoch: begin it afresh
            if state["start"] is not None:
                run.clock.set_epoch(state["start"])
            return
        run.load(pipeline, state)


class Deliveries:
    """What the main process of a DataLoader2 knows of its workers' pipelines: the number and
    epoch of the last item each delivered, the epochs begun since, and the worker that
    delivered last in this epoch.

    Args:
        workers: the loader's worker processes; 0 runs the pipeline in the main process.
        layout: ``(ranks, rank)`` of the loader's DistributedReadingService, ``(1, 0)``
            without one.
    """

    def __init__(self, workers: int, layout: tuple[int, int]) -> None:
        self.workers = workers
        self.layout = layout
        count = max(workers, 1)
        self.last: list[Tagged | None] = [None] * count
        self.since = [0] * count
        self.last_worker: int | None = None

    def delivered(self, item: Tagged) -> None:
        self.last[item.worker] = item
        self.since[item.worker] = 0
        self.last_worker = item.worker

    def epoch_begins(self) -> None:
        self.since = [count + 1 for count in self.since]
        self.last_worker = None

    def to_state(self, state_of: Callable[[int, int], dict[str, Any] | ResumeError]) -> Any:
        """The state of every worker's pipeline as of the last item the loop took of it:
        ``state_of(worker, number)`` gives the state kept for that item.

        Raises:
            ResumeError: a worker's pipeline could not save its state then; why.
        """
        epoch = None
        for item, since in zip(self.last, self.since, strict=True):
            if item is not None and item.epoch is not None:
                epoch = item.epoch + since
        readers: list[dict[str, Any] | None] = []
        for worker, (item, since) in enumerate(zip(self.last, self.since, strict=True)):
            if item is None or since:  # it delivered nothing of this epoch
                readers.append(None if item is None and epoch is None else {"start": epoch})
                continue
            state = state_of(worker, item.number)
            if isinstance(state, ResumeError):
                raise state
            readers.append(state)
        return {
            "format": LOADER_FORMAT,
            "workers": self.workers,
            "ranks": list(self.layout),
            "readers": readers,
            "last_worker": self.last_worker,
        }


class StateChannel:
    """How the main process asks a worker for the state its :class:`StateTags` kept: a pipe,
    served in the worker by a thread (:meth:`serve`), so that no state crosses the process
    boundary but those ``state_dict()`` asks for."""

    def __init__(self, main: Any, worker: Any) -> None:
        self.main = main
        self.worker = worker

    def ask(self, number: int, alive: Callable[[], None]) -> dict[str, Any] | ResumeError:
        """The state kept for item ``number``; ``alive()`` raises if the worker died while
        this waits for it."""
        self.main.send(number)
        while not self.main.poll(0.1):
            alive()
        answer: dict[str, Any] | ResumeError = self.main.recv()
        return answer

    def serve(self, tags: StateTags) -> None:
        """Start answering, in a thread of the worker: each request with ``tags``' state."""
        threading.Thread(target=self._answer, args=(tags,), daemon=True).start()

    def _answer(self, tags: StateTags) -> None:
        while True:
            try:
                number = self.worker.recv()
            except (EOFError, OSError):  # the main process has gone
                return
            try:
                answer: dict[str, Any] | ResumeError = tags.state_of(number)
            except ResumeError as exn:
                answer = exn
            self.worker.send(answer)


def restoring(state: dict[str, Any], workers: int, layout: tuple[int, int]) -> Restoring:
    """How a loader with ``workers`` workers on rank ``layout[1]`` of ``layout[0]`` takes
    ``state`` (what :meth:`Deliveries.to_state` or :func:`merge_states` made) back: exactly, as
    the same workers of the same rank; else as a merged state, every worker its share.

    Raises:
        ResumeError: the state is not such a state, or is one rank's of several, loaded into
            another number of workers.
    """
    ours = state.get("format")
    if ours != LOADER_FORMAT:
        raise ResumeError(f"not a wdspipes DataLoader2 state (format {ours!r})")
    if "merged" in state:
        return Restoring(None, state["merged"])
    if state["workers"] == workers and tuple(state["ranks"]) == layout:
        return Restoring(state["readers"], None)
    try:
        merged = merge_pipeline_states(_pipeline_states(state))
    except ResumeError as exn:
        raise ResumeError(
            f"the state was saved by a DataLoader2 with {state['workers']} workers on rank "
            f"{state['ranks'][1]} of {state['ranks'][0]}, and this one has {workers} on rank "
            f"{layout[1]} of {layout[0]}: with another number of workers or ranks, give every "
            f"rank the states of all ranks merged by wdspipes.merge_states ({exn})"
        ) from exn
    return Restoring(None, merged)


def _pipeline_states(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The pipeline state of each reader of a DataLoader2 state, as :func:`merge_pipeline_states`
    takes them: a reader that had delivered nothing of the epoch stated as such."""
    ranks, rank = state["ranks"]
    workers = max(state["workers"], 1)
    states = []
    for worker, reader in enumerate(state["readers"]):
        if reader is not None and "start" not in reader:
            states.append(reader)
            continue
        epoch = None if reader is None else reader["start"]
        index = [rank * workers + worker, ranks * workers]
        states.append({"format": FORMAT, "epoch": epoch, "reader": index, "stages": None})
    return states


def dataloader2_layout(reading_service: Any) -> tuple[int, tuple[int, int]]:
    """The workers and ``(ranks, rank)`` of a DataLoader2's reading service: a
    MultiProcessingReadingService's ``num_workers``, and a DistributedReadingService's process
    group (ranks initialised at its first epoch, else read from ``torch.distributed``)."""
    services = getattr(reading_service, "reading_services", None) or (
        () if reading_service is None else (reading_service,)
    )
    workers, layout = 0, (1, 0)
    for service in services:
        name = type(service).__name__
        if name == "MultiProcessingReadingService":
            workers = service.num_workers
        elif name == "DistributedReadingService":
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                layout = (dist.get_world_size(), dist.get_rank())
    return workers, layout


# -- StatefulDataLoader ------------------------------------------------------------------------

_SNAPSHOT, _MAIN, _WORKERS = "_snapshot", "_main_snapshot", "_worker_snapshots"
_DATASET, _FETCHER = "dataset_state", "fetcher_state"


def stateful_workers(state: dict[str, Any]) -> int:
    """The number of workers of the StatefulDataLoader that saved ``state`` (0: none)."""
    if _SNAPSHOT in state:
        return int(state[_SNAPSHOT][_MAIN]["_num_workers"])
    return 0


def stateful_pipelines(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The pipeline state in each worker of a StatefulDataLoader state (one without workers).

    Raises:
        ResumeError: a worker's is missing.
    """
    if _SNAPSHOT not in state:
        return [state[_DATASET]]
    snapshots = state[_SNAPSHOT][_WORKERS]
    pipelines = [snapshots[f"worker_{index}"][_DATASET] for index in range(len(snapshots))]
    if any(pipeline is None for pipeline in pipelines):
        raise ResumeError("the StatefulDataLoader state lacks a worker's pipeline state")
    return pipelines


def stateful_for(state: dict[str, Any], workers: int, merged: dict[str, Any]) -> dict[str, Any]:
    """A StatefulDataLoader state for ``workers`` workers (0: none) made of ``state``, one of
    another count, whose pipeline states were merged into ``merged``: each worker is given the
    merged state, and takes its share of it. The loader's own counts begin again, since the
    items each worker has left are not the saved workers'. Its keys are those of the torchdata
    versions :data:`wdspipes.loaders.compat.STATEFUL_CHECKED` names."""
    main = state[_SNAPSHOT][_MAIN] if _SNAPSHOT in state else state
    common = {
        "_sampler_iter_state": None,
        "_index_sampler_state": None,
        "_sampler_iter_yielded": 0,
        "_IterableDataset_len_called": main.get("_IterableDataset_len_called"),
        "_shared_seed": main.get("_shared_seed"),
    }
    fetcher = {"dataset_iter_state": None, "fetcher_ended": False}
    if not workers:
        return {
            **common,
            "_num_yielded": 0,
            _FETCHER: fetcher,
            _DATASET: merged,
            "_iterator_finished": False,
        }
    snapshots = {
        f"worker_{index}": {"worker_id": index, _FETCHER: fetcher, _DATASET: merged}
        for index in range(workers)
    }
    base = {"_base_seed": main["_base_seed"]} if "_base_seed" in main else {}
    return {
        _SNAPSHOT: {
            "_snapshot_step": 0,
            "_last_yielded_worker_id": workers - 1,
            _MAIN: {**common, **base, "_num_workers": workers},
            _WORKERS: snapshots,
        },
        "_steps_since_snapshot": 0,
        "_iterator_finished": False,
    }


def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """The states of every rank (or reader) of a job merged into one, which every rank of a job
    of any size loads, each taking its share of the work left in the epoch.

    Each rank saves its loader's state (``loader.state_dict()``); on restart, give every new
    rank the list of all the old ranks' states merged: ``loader.load_state_dict(
    wds.merge_states(states))``. The rest of the epoch delivers every sample not yet delivered
    once, in an order that the merged state and the new numbers of ranks and workers decide
    (see :mod:`wdspipes.core.elastic`); the epochs after it are normal epochs of the new job.

    Args:
        states: DataLoader2 states, StatefulDataLoader states, or pipeline states
            (``pipe.state_dict()``), one per rank (or reader), all of one kind.

    Returns:
        A state of the same kind, which loads into a loader with any number of workers (or a
        pipeline of any split).

    Raises:
        ResumeError: the states are of different kinds, jobs or epochs; a rank's is missing;
            or a stage of the pipeline cannot resume with another number of readers.
    """
    if not states:
        raise ResumeError("merge_states needs the state of every rank of the job, got none")
    first = states[0]
    if not isinstance(first, dict):
        raise ResumeError(f"not a state: {type(first).__name__}")
    if first.get("format") == FORMAT:
        return merge_pipeline_states(states)
    if KEY in first:  # DataLoader2's
        readers = [reader for state in states for reader in _pipeline_states(_ours(state))]
        merged = merge_pipeline_states(readers)
        return {**first, KEY: {"format": LOADER_FORMAT, "merged": merged}}
    if _SNAPSHOT in first or _DATASET in first:  # StatefulDataLoader's
        pipelines = [pipeline for state in states for pipeline in _stateful(state)]
        return {**first, KEY: merge_pipeline_states(pipelines)}
    raise ResumeError(
        "not a wdspipes pipeline state, nor a DataLoader2 or StatefulDataLoader state of a "
        f"wdspipes pipeline (keys {sorted(first)[:6]})"
    )


def _ours(state: dict[str, Any]) -> dict[str, Any]:
    ours = state.get(KEY) if isinstance(state, dict) else None
    if not isinstance(ours, dict) or "merged" in ours:
        raise ResumeError("merge_states takes DataLoader2 states as each rank saved them")
    return ours


def _stateful(state: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(state, dict) or KEY in state:
        raise ResumeError("merge_states takes StatefulDataLoader states as each rank saved them")
    return stateful_pipelines(state)


def epoch_of(pipelines: list[dict[str, Any]]) -> int | None:
    """The epoch pipeline states were saved in (None if no random stage numbers epochs)."""
    return next((state["epoch"] for state in pipelines if state.get("epoch") is not None), None)


def prime(pipe: IterDataPipe[Any], pipelines: list[dict[str, Any]]) -> None:
    """Give a loader's main-process copy of a pipeline, which it copies again for each epoch's
    workers and which never loads the state itself, the epoch of the states: the epochs
    after the restored one are numbered (and shuffled) as in the run that saved them."""
    epoch = epoch_of(pipelines)
    if epoch is not None and isinstance(pipe, Stage):
        pipe.set_epoch(epoch)
