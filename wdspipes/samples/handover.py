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

A slot's descriptor crosses once: the training process, as it maps a slot, writes its pid in
the slot's state page, and a worker whose parent has mapped the slot sends only the slot's
identity (its inode) from then on. (A descriptor crosses through multiprocessing's resource
sharer: a new connection to a thread of the worker, with an authentication handshake, about
half a millisecond each time here.) The training process keeps the mappings of live workers, and
lets go of those of exited ones.

Raw bytes cross through the same slots (:func:`pack_bytes`, :func:`unpack_bytes`; which values,
:mod:`wdspipes.samples.raw_handover`): copied into a slot when the worker pickles them, copied
back into ``bytes`` objects as the training process unpickles them, the slot freed at once.
Both processes keep the heap those values take (:func:`~wdspipes.core.processes.keep_heap_for`),
which would otherwise go back to the system and be faulted in again at every batch.

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
import logging
import mmap
import multiprocessing
import os
import struct
import sys
import threading
import weakref
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import numpy as np
import torch

from wdspipes.core.processes import alive, keep_heap_for
from wdspipes.loaders.worker_queues import on_workers_gone

__all__ = [
    "MIN_BYTES",
    "RAW_MIN_BYTES",
    "SMALL_BYTES",
    "BytesColumn",
    "batch_array",
    "bytes_column",
    "forget_dead_workers",
    "in_worker",
    "pack_bytes",
    "send_small_by_value",
    "unpack_bytes",
]

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

RAW_MIN_BYTES = 64 << 10
"""A ``bytes`` value (or a batch column of them together) of at least this many bytes crosses
through a slot (see :mod:`wdspipes.samples.raw_handover`): beyond the pipe's buffer (64 KiB
here) a write waits for the reader to drain it. Smaller ones cross by value."""

_HEADER = mmap.PAGESIZE  # the state page before a slot's data; keeps the data page-aligned
_STATE = struct.Struct("<BxxxIQ")  # busy flag, owner pid, generation (which filling of the slot)
_OWNER = struct.Struct("<IQ")  # the state after its flag: owner pid, generation
# Two processes write the state: the worker as it fills a free slot, the training process as it
# frees a busy one. Each sets the flag alone, one byte (a single store), the worker last: packing
# the whole state (struct zeroes it first) let a worker see a slot free while the training
# process was still writing, and the rest of that write undo the worker's.
_MAPPED_IN = struct.Struct("<I")  # after the state: the pid of the process that maps the slot
_FREE, _BUSY = 0, 1


class _Slot:
    """One shared-memory region in the worker: a state page, then the batch data."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.fd = os.memfd_create("wdspipes-batch", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, _HEADER + capacity)
        self.memory = mmap.mmap(self.fd, _HEADER + capacity)
        self.address = _address(self.memory, _HEADER)
        stat = os.fstat(self.fd)
        self.key = (stat.st_dev, stat.st_ino)  # what the receiving process knows it by
        self.generation = 0
        self.held = False  # the worker still holds an array over the data
        self.sent = False  # the current filling was pickled for another process

    def reusable(self, nbytes: int) -> bool:
        busy = _STATE.unpack_from(self.memory)[0] == _BUSY
        return not self.held and not busy and nbytes <= self.capacity <= 2 * nbytes

    def fill(self) -> np.ndarray:
        """The slot's data as a uint8 array, marked busy until it is dropped or released."""
        self._busy(held=True)
        data = np.frombuffer(self.memory, dtype=np.uint8, count=self.capacity, offset=_HEADER)
        weakref.finalize(data, self._dropped, self.generation)
        return data

    def _busy(self, held: bool) -> None:
        """A new filling: busy until released (or, ``held``, dropped unsent)."""
        self.generation += 1
        self.held, self.sent = held, not held
        _OWNER.pack_into(self.memory, 4, os.getpid(), self.generation)
        self.memory[0] = _BUSY

    def reference(self, receiver: int) -> tuple[Any, tuple[int, int]]:
        """How the process ``receiver`` finds this slot: by its key alone where it maps it
        already, else with its descriptor too."""
        if receiver and _MAPPED_IN.unpack_from(self.memory, _STATE.size)[0] == receiver:
            return None, self.key
        return DupFd(self.fd), self.key

    def _dropped(self, generation: int) -> None:
        # The worker's last array over this filling is gone: free it unless it was sent, in
        # which case the receiving process frees it when done.
        if generation == self.generation:
            self.held = False
            if not self.sent:
                self.memory[0] = _FREE


class _Pool:
    """The slots of one worker process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        parent = multiprocessing.parent_process()
        self.receiver = 0 if parent is None or parent.pid is None else parent.pid
        self.slots: list[_Slot] = []
        self.by_address: dict[int, _Slot] = {}
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray | None:
        with self.lock:
            slot = self._free_slot(nbytes)
            return None if slot is None else slot.fill()[:nbytes]

    def take_sent(self, nbytes: int) -> _Slot | None:
        """A free slot for ``nbytes``, marked busy and sent (the receiver frees it). A new one
        holds the next power of two, so that raw values of many sizes share a few slots (its
        pages beyond what is written are never touched, and cost nothing)."""
        with self.lock:
            slot = self._free_slot(nbytes, 1 << (nbytes - 1).bit_length())
            if slot is not None:
                slot._busy(held=False)
            return slot

    def _free_slot(self, nbytes: int, capacity: int = 0) -> _Slot | None:
        slot = next((s for s in self.slots if s.reusable(nbytes)), None)
        return self._new_slot(max(nbytes, capacity)) if slot is None else slot

    def _new_slot(self, capacity: int) -> _Slot | None:
        used = sum(slot.capacity for slot in self.slots)
        if len(self.slots) >= MAX_SLOTS or used + capacity > MAX_POOL_BYTES:
            return None
        slot = _Slot(capacity)
        self.slots.append(slot)
        self.by_address[slot.address] = slot
        return slot


_pool: _Pool | None = None
log = logging.getLogger(__name__)


def batch_array(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray | None:
    """An empty array for a batch column, in a shared slot when this process is a worker that
    will send it to another process; None when the column should be made as before (too small,
    not a worker process, not Linux, or no slot free).

    >>> batch_array((64, 2), np.dtype("int64")) is None  # small, and not in a worker here
    True
    """
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes < MIN_BYTES or not in_worker():
        return None
    data = _worker_pool().take(nbytes)
    if data is None:
        return None
    keep_heap_for(nbytes)  # malloc never frees this batch, so it would not learn its size
    return data.view(dtype).reshape(shape)


_USABLE = sys.platform == "linux" and hasattr(os, "memfd_create")


def in_worker() -> bool:
    """Whether this process can hand data over through slots: one started by
    ``multiprocessing`` (a loader's worker), on Linux.

    >>> in_worker()  # the training process, or a test
    False
    """
    return _USABLE and multiprocessing.parent_process() is not None


def _worker_pool() -> _Pool:
    global _pool
    if _pool is None or _pool.pid != os.getpid():
        _pool = _Pool()
        _take_over_storage_pickling()
    return _pool


def pack_bytes(values: list[bytes]) -> tuple[Any, ...] | None:
    """``values`` copied one after another into a free slot of this worker's pool, for the
    process that started it: the arguments of :func:`unpack_bytes` that give them back there.
    None where no slot is to be had (not a worker, not Linux, every slot busy or the pool
    full): the caller sends the values as they are.

    >>> pack_bytes([b"a" * 100]) is None  # not a worker here
    True
    """
    if not in_worker():
        return None
    pool = _worker_pool()
    lengths = [len(value) for value in values]
    slot = pool.take_sent(max(1, sum(lengths)))
    if slot is None:
        return None
    keep_heap_for(slot.capacity)  # the values, read into the heap, are freed together once sent
    try:
        memory, offset = slot.memory, _HEADER
        for value, length in zip(values, lengths, strict=True):
            memory[offset : offset + length] = value
            offset += length
        fd_box, key = slot.reference(pool.receiver)
    except Exception as exn:  # pickling must not fail (a queue drops what it cannot send)
        log.warning("shared-memory handover failed, values sent as they are: %r", exn)
        slot.memory[0] = _FREE
        return None
    return fd_box, key, slot.generation, lengths


def unpack_bytes(
    fd_box: Any, key: tuple[int, int], generation: int, lengths: list[int]
) -> list[bytes]:
    """The values :func:`pack_bytes` put in a slot, as new ``bytes`` objects; the slot is free
    again as this returns.

    Raises:
        RuntimeError: the slot is not this process's to read (see :class:`_Mapping`).
    """
    memory = _mapped(fd_box, key).filling(generation)
    keep_heap_for(sum(lengths))  # the values are new blocks of the heap, freed together later
    values, offset = [], _HEADER
    for length in lengths:
        values.append(memory[offset : offset + length])
        offset += length
    _release(memory, generation)
    return values


def _address(memory: mmap.mmap, offset: int) -> int:
    view = np.frombuffer(memory, dtype=np.uint8, count=1, offset=offset)
    return int(view.__array_interface__["data"][0])


class BytesColumn(list[bytes]):
    """A batch column of ``bytes`` values adding up to :data:`RAW_MIN_BYTES` or more, as
    ``collate`` makes it in a worker process (:func:`bytes_column`): a ``list`` that crosses to
    the training process as one block of a slot and arrives there a plain ``list``. It stays
    one through torch's ``DataLoader``, which copies lists as they are; pickled any other way,
    or with no slot free, it is a plain list.

    >>> import pickle
    >>> type(pickle.loads(pickle.dumps(BytesColumn([b"a", b"b"]))))
    <class 'list'>
    """

    def __copy__(self) -> BytesColumn:
        return BytesColumn(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (list(self),)


def bytes_column(values: list[Any]) -> list[Any]:
    """``collate``'s column of ``values``: a :class:`BytesColumn` where they are all ``bytes``
    adding up to :data:`RAW_MIN_BYTES` or more and this is a worker process; as it is
    otherwise.

    >>> type(bytes_column([b"x" * RAW_MIN_BYTES]))  # not a worker here
    <class 'list'>
    """
    if not in_worker() or not all(type(value) is bytes for value in values):
        return values
    if sum(map(len, values)) < RAW_MIN_BYTES:
        return values
    return BytesColumn(values)  # its pickling: wdspipes.samples.raw_handover


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
        fd_box, key = slot.reference(_pool.receiver if _pool is not None else 0)
        return _rebuild_storage, (fd_box, key, slot.generation, storage.nbytes())
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

    def filling(self, generation: int) -> mmap.mmap:
        """The slot's memory, checked to hold filling ``generation``."""
        busy, _, current = _STATE.unpack_from(self.memory)
        if busy != _BUSY or current != generation:
            raise RuntimeError(
                f"a batch from worker {self.owner()} arrived after its memory was reused "
                f"(filling {generation}, slot at filling {current}): please report this"
            )
        return self.memory

    def data(self, generation: int, nbytes: int) -> np.ndarray:
        self.filling(generation)
        live = self.live() if self.live is not None and self.generation == generation else None
        if live is None:
            live = np.frombuffer(self.memory, dtype=np.uint8, count=nbytes, offset=_HEADER)
            weakref.finalize(live, _release, self.memory, generation)
            self.generation, self.live = generation, weakref.ref(live)
        return live[:nbytes]


def _release(memory: mmap.mmap, generation: int) -> None:
    """Free a slot that holds filling ``generation`` (not one the worker has filled again)."""
    if not memory.closed and _STATE.unpack_from(memory)[2] == generation:
        memory[0] = _FREE


_mappings: dict[tuple[int, int], _Mapping] = {}
_mappings_lock = threading.Lock()


def _rebuild_storage(
    fd_box: Any, key: tuple[int, int], generation: int, nbytes: int
) -> torch.UntypedStorage:
    data = _mapped(fd_box, key).data(generation, nbytes)
    return torch.from_numpy(data).untyped_storage()


def _mapped(fd_box: Any, key: tuple[int, int]) -> _Mapping:
    """The slot that ``key`` names, mapped in this process: with its descriptor ``fd_box``
    the first time (which says this process maps it in the slot's state page), without it
    after.

    Raises:
        RuntimeError: no descriptor, and no such slot mapped here.
        OSError, EOFError: the worker that holds the descriptor has exited (DataLoader2's queues, as
            wdspipes mends them, name it: :mod:`wdspipes.loaders.worker_queues`).
    """
    fd = None if fd_box is None else fd_box.detach()  # always: the worker keeps it till then
    try:
        if fd is not None:
            stat = os.fstat(fd)
            key = (stat.st_dev, stat.st_ino)
        with _mappings_lock:
            mapping = _mappings.get(key)
            if mapping is None:
                if fd is None:
                    raise RuntimeError(
                        "data arrived through a shared-memory slot that this process does not "
                        "map: a worker's slots go to the process that started it"
                    )
                mapping = _Mapping(fd)
                _forget_dead_workers()
                _mappings[key] = mapping
                _MAPPED_IN.pack_into(mapping.memory, _STATE.size, os.getpid())
            return mapping
    finally:
        if fd is not None:
            os.close(fd)


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
    """Unmap (once nothing reads them) the slots of workers that have exited; a dropped mapping
    stays valid for the arrays still over it. Those of live workers stay mapped (at most
    :data:`MAX_SLOTS` a worker): a worker sends a slot its parent maps without its descriptor."""
    _drop_dead()
