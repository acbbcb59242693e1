"""Batches handed from worker processes through reused shared-memory slots
(wdspipes/samples/handover.py).

The promise under test: every batch arrives whole and keeps its contents for as long as the
training process holds any tensor, view or array over it, however many batches the workers
make meanwhile; slots are reused once released; nothing changes in a process that is not a
worker.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import wdspipes as wds
from wdspipes.samples import handover
from wdspipes.samples.batch import collate

ROWS = 16
SIDE = 160  # 16 x 160 x 160 x 3 bytes: a 1.2 MB batch column, over handover.MIN_BYTES
SHAPE = (SIDE, SIDE, 3)


def stamp(worker: int, batch: int, row: int) -> np.ndarray:
    """An image whose every byte says where it came from."""
    return np.full(SHAPE, (worker * 97 + batch * 13 + row) % 251, dtype=np.uint8)


def check_stamped(images: torch.Tensor, worker: int, batch: int) -> None:
    for row in range(len(images)):
        expected = (worker * 97 + batch * 13 + row) % 251
        assert bool((images[row] == expected).all()), (worker, batch, row)


class Stamped(IterableDataset[Any]):
    """Batches of stamped images, with the worker, batch number, the worker's pid and how many
    slots its pool has made so far."""

    def __init__(self, batches: int, keep: bool = False) -> None:
        self.batches, self.keep = batches, keep

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker = 0 if info is None else info.id
        kept = []
        for batch in range(self.batches):
            images = [stamp(worker, batch, row) for row in range(ROWS)]
            column = collate(images)
            if self.keep:  # the worker itself holds its batches: no slot may be reused
                kept.append(column)
            pool = handover._pool
            slots = 0 if pool is None else len(pool.slots)
            yield column, worker, batch, os.getpid(), slots


def loader(dataset: Any, **options: Any) -> DataLoader[Any]:
    options.setdefault("multiprocessing_context", "fork")
    return DataLoader(dataset, batch_size=None, num_workers=2, **options)


def test_no_slot_outside_worker_processes() -> None:
    images = collate([stamp(0, 0, row) for row in range(ROWS)] * 2)
    assert handover.batch_array((ROWS * 4, *SHAPE), np.dtype(np.uint8)) is None
    assert images.is_contiguous() and not images.is_shared()


@pytest.mark.loaders
def test_batches_held_keep_their_contents_while_slots_are_reused() -> None:
    held: list[tuple[Any, int, int]] = []
    slots_seen = []
    for number, (images, worker, batch, _, slots) in enumerate(loader(Stamped(60))):
        check_stamped(images, worker, batch)
        slots_seen.append(slots)
        if number % 7 == 0:  # a tensor, a view of it, a numpy array over it
            kept = [images, images[3:], images.numpy()][number % 3]
            held.append((kept, worker, batch))
    gc.collect()
    for kept, worker, batch in held:
        whole = torch.as_tensor(kept)
        start = 3 if len(whole) == ROWS - 3 else 0
        for row in range(len(whole)):
            expected = (worker * 97 + batch * 13 + row + start) % 251
            assert bool((whole[row] == expected).all()), (worker, batch, row)
    # 30 batches a worker, made in a handful of slots: released slots were reused
    assert 0 < max(slots_seen) < 15


@pytest.mark.loaders
def test_every_batch_held_falls_back_to_fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handover, "MAX_SLOTS", 2)  # forked workers inherit it
    batches = list(loader(Stamped(12)))
    assert max(slots for *_, slots in batches) == 2
    for images, worker, batch, _, _ in batches:
        check_stamped(images, worker, batch)


@pytest.mark.loaders
def test_a_worker_holding_its_batches_never_has_them_overwritten() -> None:
    for images, worker, batch, _, slots in loader(Stamped(10, keep=True)):
        check_stamped(images, worker, batch)
        assert slots == min(batch + 1, handover.MAX_SLOTS)


def _drop_batches(connection: Any) -> None:
    torch.set_num_threads(1)  # as loader workers do: torch's thread pool does not survive fork
    for batch in range(20):
        images = collate([stamp(0, batch, row) for row in range(ROWS * 2)])
        check_stamped(images, 0, batch)
        del images
    pool = handover._pool
    connection.send(0 if pool is None else len(pool.slots))


@pytest.mark.loaders
def test_a_batch_never_sent_frees_its_slot_when_dropped() -> None:
    receiving, sending = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_drop_batches, args=(sending,))
    child.start()
    try:
        assert receiving.recv() == 1
    finally:
        child.join()
        receiving.close()
        sending.close()
    assert child.exitcode == 0


@pytest.mark.loaders
def test_mappings_of_exited_workers_are_forgotten() -> None:
    data = loader(Stamped(8))
    for _ in range(3):  # the workers end with each epoch; the next epoch's find them gone
        last_epoch = {pid for *_, pid, _ in data}
    remaining = {mapping.owner() for mapping in handover._mappings.values()}
    assert remaining and remaining <= last_epoch


def test_small_batches_go_torchs_way() -> None:
    assert handover.batch_array((ROWS,), np.dtype(np.int64)) is None
    assert handover.MIN_BYTES > ROWS * 8


# -- the public pipeline, through each loader -------------------------------------------------


@pytest.fixture(scope="module")
def npy_shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("handover")
    urls = []
    for shard in range(2):
        path = Path(root, f"shard-{shard}.tar")
        with wds.TarWriter(str(path)) as writer:
            for index in range(shard * 40, shard * 40 + 40):
                image = np.full(SHAPE, index % 251, dtype=np.uint8)
                writer.write({"__key__": f"{index:04d}", "npy": image, "cls": index})
        urls.append(str(path))
    return urls


def pipeline(urls: list[str]) -> Any:
    return wds.WebDataset(urls).decode().to_tuple("npy", "cls").batched(ROWS)


def check_pipeline_batches(batches: Iterator[Any]) -> None:
    held = []
    seen = []
    for images, labels in batches:
        held.append((images, labels))
        seen.extend(labels.tolist())
    gc.collect()
    assert sorted(seen) == list(range(80))
    for images, labels in held:
        for image, label in zip(images, labels.tolist(), strict=True):
            assert bool((image == label % 251).all()), label


@pytest.mark.loaders
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_pipeline_under_dataloader(npy_shards: list[str], context: str) -> None:
    check_pipeline_batches(iter(loader(pipeline(npy_shards), multiprocessing_context=context)))


@pytest.mark.dataloader2
@pytest.mark.loaders
def test_pipeline_under_dataloader2(npy_shards: list[str]) -> None:
    from wdspipes.loaders import dataloader2

    module = dataloader2()
    service = module.MultiProcessingReadingService(num_workers=2, multiprocessing_context="fork")
    data = module.DataLoader2(pipeline(npy_shards), reading_service=service)
    try:
        check_pipeline_batches(iter(data))
        check_pipeline_batches(iter(data))  # the same workers, their slots reused
    finally:
        data.shutdown()


LARGE = 64 << 10  # bytes: over handover.SMALL_BYTES, which torch shares


class Labelled(IterableDataset[Any]):
    """Batches of ``rows`` labels through wdspipes' batching stage, with a view of them whose
    storage begins before it, an empty column and one of LARGE bytes."""

    def __init__(self, batches: int, rows: int) -> None:
        self.batches, self.rows = batches, rows

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker = 0 if info is None else info.id
        numbers = range(worker * 1000, worker * 1000 + self.batches * self.rows)
        for labels in wds.DataPipeline(numbers, wds.batched(self.rows)):
            yield labels, labels[1:], torch.empty(0), torch.zeros(LARGE, dtype=torch.uint8)


@pytest.mark.loaders
def test_small_batch_columns_cross_by_value_and_large_ones_shared() -> None:
    seen = set()
    for labels, tail, empty, large in loader(Labelled(batches=5, rows=64)):
        first = int(labels[0])
        assert labels.tolist() == list(range(first, first + 64))
        assert tail.tolist() == labels.tolist()[1:] and tail.storage_offset() == 1
        # by value: no shared segment (torch's own path shares every storage it sends)
        assert not labels.is_shared() and not tail.is_shared()
        assert empty.numel() == 0
        assert large.is_shared()  # at SMALL_BYTES, torch's way
        seen.add(first)
    assert len(seen) == 10
    assert handover.SMALL_BYTES < LARGE


def test_small_storages_keep_torchs_pickling_outside_workers() -> None:
    handover.send_small_by_value()
    assert handover._small_by_value_in is None
