"""Batches that cross from a worker process to the training process without fresh memory.

When a loader worker puts a batch on its queue, torch moves every tensor's storage into a new
shared-memory segment, and the training process maps it anew: on a 12.6 MB batch of images the
kernel allocating, zeroing and mapping those pages costs about 9 ms here, more than a tenth of
what the worker spends decoding the batch (docs/performance.md, "Image training").

This module keeps a small pool of shared-memory slots in each worker process instead. A batch
column of at least :data:`MIN_BYTES` is stacked straight into a free slot (:func:`batch_array`);
when the batch is pickled for the queue, the slot's file descriptor travels in place of a copy,
and the training process maps each slot once and keeps the mapping. The slot's first page holds
its state: the worker marks it busy when it fills it, the training process marks it free when
the last tensor (or view, or numpy array) over that batch is garbage-collected. A batch that is
never sent frees its slot when the worker drops it. No slot is ever written while anything can
still read it; when every slot is busy (the training process holding many batches), batches are
made as before, in fresh memory.

Only processes started by ``multiprocessing`` use slots (loader workers are); the training
process's own batches (``num_workers=0``) are made as before. Linux only (``memfd_create``);
elsewhere everything works as before.

Small tensors go the other way: torch shares every tensor it sends through a new
shared-memory segment whose descriptor the receiver fetches over a new authenticated socket
connection, some hundreds of microseconds for a batch's 64 labels, more than the worker spends
reading the batch's samples. A worker that batches (:func:`send_small_by_value`) sends a
storage of at most :data:`SMALL_BYTES` in the pickle itself, copied, as numpy arrays go.
"""

from __future__ import annotations

import ctypes
import mmap
import multiprocessing
import os
import struct
import sys
import threading
import weakref
from collections import OrderedDict
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import numpy as np
import torch

from wdspipes.core.processes import alive, keep_heap_for
from wdspipes.loaders.worker_queues import on_workers_gone

__all__ = ["MIN_BYTES", "SMALL_BYTES", "batch_array", "forget_dead_workers", "send_small_by_value"]

MIN_BYTES = 1 << 20
"""Columns smaller than this (labels, keys) are made as before: the slot would save nothing."""

MAX_SLOTS = 32
"""Slots a worker keeps at most. Each batch in flight (queued, prefetched, or held by the
training process) holds one; beyond that, batches are made in fresh memory."""

MAX_POOL_BYTES = 4 << 30
"""Bytes of slots a worker keeps at most."""

SMALL_BYTES = 32 << 10
"""Storages of at most this many bytes that a batching worker sends travel by value, in the
pickle: up to here a copy costs less than sharing (benchmarks/tensor_handover.py); beyond, the
copy outgrows the pipe's buffer."""

_HEADER = mmap.PAGESIZE  # the state page before a slot's data; keeps the data page-aligned
_STATE = struct.Struct("<BxxxIQ")  # busy flag, owner pid, generation (which filling of the slot)
_FREE, _BUSY = 0, 1


class _Slot:
    """One shared-memory region in the worker: a state page, then the batch data."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.fd = os.memfd_create("wdspipes-batch", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, _HEADER + capacity)
        self.memory = mmap.mmap(self.fd, _HEADER + capacity)
        self.address = _address(self.memory, _HEADER)
        self.generation = 0
        self.held = False  # the worker still holds an array over the data
        self.sent = False  # the current filling was pickled for another process

    def reusable(self, nbytes: int) -> bool:
        busy = _STATE.unpack_from(self.memory)[0] == _BUSY
        return not self.held and not busy and nbytes <= self.capacity <= 2 * nbytes

    def fill(self) -> np.ndarray:
        """The slot's data as a uint8 array, marked busy until it is dropped or released."""
        self.generation += 1
        self.held, self.sent = True, False
        _STATE.pack_into(self.memory, 0, _BUSY, os.getpid(), self.generation)
        data = np.frombuffer(self.memory, dtype=np.uint8, count=self.capacity, offset=_HEADER)
        weakref.finalize(data, self._dropped, self.generation)
        return data

    def _dropped(self, generation: int) -> None:
        # The worker's last array over this filling is gone: free it unless it was sent, in
        # which case the receiving process frees it when done.
        if generation == self.generation:
            self.held = False
            if not self.sent:
                _STATE.pack_into(self.memory, 0, _FREE, os.getpid(), generation)


class _Pool:
    """The slots of one worker process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.slots: list[_Slot] = []
        self.by_address: dict[int, _Slot] = {}
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray | None:
        with self.lock:
            slot = next((s for s in self.slots if s.reusable(nbytes)), None)
            if slot is None:
                slot = self._new_slot(nbytes)
            return None if slot is None else slot.fill()[:nbytes]

    def _new_slot(self, nbytes: int) -> _Slot | None:
        used = sum(slot.capacity for slot in self.slots)
        if len(self.slots) >= MAX_SLOTS or used + nbytes > MAX_POOL_BYTES:
            return None
        slot = _Slot(nbytes)
        self.slots.append(slot)
        self.by_address[slot.address] = slot
        return slot


_pool: _Pool | None = None


def batch_array(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray | None:
    """An empty array for a batch column, in a shared slot when this process is a worker that
    will send it to another process; None when the column should be made as before (too small,
    not a worker process, not Linux, or no slot free).

    >>> batch_array((64, 2), np.dtype("int64")) is None  # small, and not in a worker here
    True
    """
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes < MIN_BYTES or not _USABLE or multiprocessing.parent_process() is None:
        return None
    global _pool
    if _pool is None or _pool.pid != os.getpid():
        _pool = _Pool()
        _take_over_storage_pickling()
    data = _pool.take(nbytes)
    if data is None:
        return None
    keep_heap_for(nbytes)  # malloc never frees this batch, so it would not learn its size
    return data.view(dtype).reshape(shape)


_USABLE = sys.platform == "linux" and hasattr(os, "memfd_create")


def _address(memory: mmap.mmap, offset: int) -> int:
    view = np.frombuffer(memory, dtype=np.uint8, count=1, offset=offset)
    return int(view.__array_interface__["data"][0])


# -- pickling: a slot travels as its descriptor ------------------------------------------------

_torch_reduce_storage: Any = None
_small_by_value_in: int | None = None  # the process that sends small storages by value


def send_small_by_value() -> None:
    """In a process started by ``multiprocessing`` (a loader worker), send CPU storages of at
    most :data:`SMALL_BYTES` by value from now on when pickling for another process; elsewhere
    nothing changes. The batching stage calls it as each epoch begins.

    >>> send_small_by_value()  # not a worker here: pickling stays torch's
    >>> _small_by_value_in is None
    True
    """
    global _small_by_value_in
    pid = os.getpid()
    if _small_by_value_in == pid or multiprocessing.parent_process() is None:
        return
    _take_over_storage_pickling()
    _small_by_value_in = pid


def _take_over_storage_pickling() -> None:
    """Make pickling for another process (``ForkingPickler``, what multiprocessing queues use)
    send a slot's storage as the slot's descriptor, and a small storage by value where
    :func:`send_small_by_value` asked; every other storage goes torch's way."""
    global _torch_reduce_storage
    if _torch_reduce_storage is None:
        import torch.multiprocessing  # registers torch's reducers

        _torch_reduce_storage = ForkingPickler._extra_reducers[torch.UntypedStorage]  # type: ignore[attr-defined]
        ForkingPickler.register(torch.UntypedStorage, _reduce_storage)


def _reduce_storage(storage: torch.UntypedStorage) -> Any:
    if storage.device.type != "cpu":
        return _torch_reduce_storage(storage)
    slot = _pool.by_address.get(storage.data_ptr()) if _pool is not None else None
    if slot is not None and slot.held:
        slot.sent = True
        return _rebuild_storage, (DupFd(slot.fd), slot.generation, storage.nbytes())
    nbytes = storage.nbytes()
    if nbytes <= SMALL_BYTES and _small_by_value_in == os.getpid() and not storage.is_shared():
        return _rebuild_small, (ctypes.string_at(storage.data_ptr(), nbytes),)
    return _torch_reduce_storage(storage)


def _rebuild_small(data: bytes) -> torch.UntypedStorage:
    if not data:
        return torch.empty(0, dtype=torch.uint8).untyped_storage()
    return torch.UntypedStorage.from_buffer(data, byte_order="native", dtype=torch.uint8)


# -- the receiving process ---------------------------------------------------------------------


class _Mapping:
    """A slot mapped in the receiving process, with the array of its current filling."""

    def __init__(self, fd: int) -> None:
        self.memory = mmap.mmap(fd, 0)
        self.generation = -1
        self.live: weakref.ref[np.ndarray] | None = None

    def owner(self) -> int:
        return int(_STATE.unpack_from(self.memory)[1])

    def data(self, generation: int, nbytes: int) -> np.ndarray:
        busy, _, current = _STATE.unpack_from(self.memory)
        if busy != _BUSY or current != generation:
            raise RuntimeError(
                f"a batch from worker {self.owner()} arrived after its memory was reused "
                f"(filling {generation}, slot at filling {current}): please report this"
            )
        live = self.live() if self.live is not None and self.generation == generation else None
        if live is None:
            live = np.frombuffer(self.memory, dtype=np.uint8, count=nbytes, offset=_HEADER)
            weakref.finalize(live, _release, self.memory, generation)
            self.generation, self.live = generation, weakref.ref(live)
        return live[:nbytes]


def _release(memory: mmap.mmap, generation: int) -> None:
    _, owner, current = _STATE.unpack_from(memory)
    if current == generation and not memory.closed:
        _STATE.pack_into(memory, 0, _FREE, owner, generation)


_MAPPED_AT_MOST = 256
_mappings: OrderedDict[tuple[int, int], _Mapping] = OrderedDict()
_mappings_lock = threading.Lock()


def _rebuild_storage(fd_box: Any, generation: int, nbytes: int) -> torch.UntypedStorage:
    fd = fd_box.detach()
    try:
        stat = os.fstat(fd)
        key = (stat.st_dev, stat.st_ino)
        with _mappings_lock:
            mapping = _mappings.get(key)
            if mapping is None:
                mapping = _Mapping(fd)
                _forget_dead_workers()
                _mappings[key] = mapping
            _mappings.move_to_end(key)
            data = mapping.data(generation, nbytes)
    finally:
        os.close(fd)
    return torch.from_numpy(data).untyped_storage()


def forget_dead_workers() -> None:
    """Let go of the slots of worker processes that have exited (each once nothing reads it):
    a loader calls this when it finds a worker dead or ends its workers (see
    :func:`wdspipes.loaders.worker_queues.on_workers_gone`)."""
    with _mappings_lock:
        _drop_dead()


on_workers_gone(forget_dead_workers)


def _drop_dead() -> None:
    for key, mapping in list(_mappings.items()):
        if not alive(mapping.owner()):
            del _mappings[key]


def _forget_dead_workers() -> None:
    """Unmap (once nothing reads them) the slots of workers that have exited, and the oldest
    beyond :data:`_MAPPED_AT_MOST`; a dropped mapping stays valid for the arrays still over it."""
    _drop_dead()
    while len(_mappings) >= _MAPPED_AT_MOST:
        _mappings.popitem(last=False)
