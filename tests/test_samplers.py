"""The samplers of wdspipes/read/samplers.py against wids 0.1.11's (a test-only oracle), their
resume, and ``ShardListDataset`` read in their order under DataLoader (workers),
StatefulDataLoader (resume) and DataLoader2."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import wdspipes as wds

wids = pytest.importorskip("wids")


class Sized:
    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths

    def __len__(self) -> int:
        return sum(self.lengths)


def epochs(sampler: Any, count: int) -> list[list[int]]:
    return [list(sampler) for _ in range(count)]


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("shufflefirst", [False, True])
def test_sharded_sampler_gives_wids_orders(seed: int, shufflefirst: bool) -> None:
    dataset = Sized([5, 1, 8, 3, 12])
    ours = wds.ShardedSampler(dataset, seed=seed, shufflefirst=shufflefirst)
    theirs = wids.ShardedSampler(dataset, seed=seed, shufflefirst=shufflefirst)
    assert epochs(ours, 3) == epochs(theirs, 3)
    assert len(ours) == len(dataset)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"chunksize": 4, "seed": 3},
        {"chunksize": 5, "shufflefirst": True},
        {"chunksize": 6, "shuffle": False},
        {"chunksize": 3, "num_samples": 20},
        {"chunksize": 3, "num_samples": (7, 23), "seed": 11},
    ],
)
def test_chunked_sampler_gives_wids_orders(options: dict[str, Any]) -> None:
    dataset = Sized([29])
    ours = wds.ChunkedSampler(dataset, **options)
    theirs = wids.ChunkedSampler(dataset, **options)
    assert epochs(ours, 3) == epochs(theirs, 3)
    assert len(ours) == len(theirs)
    for sampler in (ours, theirs):
        sampler.set_epoch(5)
    assert list(ours) == list(theirs)


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_distributed_chunked_sampler_splits_as_wids(replicas: int) -> None:
    dataset = Sized([23])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # wids warns that torch.distributed is not initialised
        theirs = wids.DistributedChunkedSampler(dataset, chunksize=4, seed=2)
    ours = wds.DistributedChunkedSampler(dataset, chunksize=4, seed=2)
    assert epochs(ours, 2) == epochs(theirs, 2)
    shares = [
        wds.DistributedChunkedSampler(dataset, num_replicas=replicas, rank=r, chunksize=4)
        for r in range(replicas)
    ]
    # wids ignores num_replicas and rank without torch.distributed: compare with the
    # ChunkedSampler its arithmetic builds for each rank.
    share = (23 + replicas - 1) // replicas
    for rank, sampler in enumerate(shares):
        start, end = rank * share, min(rank * share + share, 23)
        expected = wids.ChunkedSampler(dataset, num_samples=(start, end), chunksize=4)
        assert list(sampler) == list(expected)
    assert sorted(i for sampler in shares for i in sampler) == list(range(23))
    with pytest.warns(UserWarning, match="drop_last"):
        wds.DistributedChunkedSampler(dataset, drop_last=True)
    with pytest.raises(ValueError, match="rank"):
        wds.DistributedChunkedSampler(dataset, num_replicas=2, rank=2)


@pytest.mark.parametrize("make", [wds.ShardedSampler, wds.ChunkedSampler])
def test_samplers_resume_mid_epoch_exactly(make: Any) -> None:
    dataset = Sized([6, 9, 4])
    options = {"chunksize": 5} if make is wds.ChunkedSampler else {}
    reference = make(dataset, seed=4, **options)
    full = epochs(reference, 3)
    for cut in (0, 1, 10, 19):
        sampler = make(dataset, seed=4, **options)
        list(sampler)  # epoch 0 done
        iterator = iter(sampler)
        head = [next(iterator) for _ in range(cut)]
        state = sampler.state_dict()
        assert state == {"epoch": 1, "position": cut, "seed": 4}
        resumed = make(dataset, seed=4, **options)
        resumed.load_state_dict(state)
        assert head + list(resumed) == full[1]
        assert list(resumed) == full[2]  # and the next epoch is the next epoch's
    with pytest.raises(ValueError, match="seeded"):
        make(dataset, seed=5, **options).load_state_dict(state)
    with pytest.raises(ValueError, match="position"):
        make(dataset, seed=4, **options).load_state_dict({**state, "position": 10**6})
    with pytest.raises(ValueError, match="not a sampler state"):
        make(dataset, seed=4, **options).load_state_dict({})


# --- with loaders -----------------------------------------------------------------------------


@pytest.fixture
def dataset(tmp_path: Path) -> wds.ShardListDataset:
    counts = [7, 5, 9, 3]
    shards = []
    for number, count in enumerate(counts):
        path = tmp_path / f"s-{number}.tar"
        with wds.TarWriter(str(path)) as sink:
            for index in range(count):
                sink.write({"__key__": f"{number}-{index}", "cls": number * 100 + index})
        shards.append({"url": str(path), "nsamples": count})
    return wds.ShardListDataset(shards, decode=wds.Decoder())


def labels(batches: Iterator[Any]) -> list[int]:
    return [int(label) for batch in batches for label in batch["cls"]]


@pytest.mark.loaders
def test_dataloader_workers_read_every_sample_once_an_epoch(
    dataset: wds.ShardListDataset,
) -> None:
    sampler = wds.ChunkedSampler(dataset, chunksize=6, seed=1, shufflefirst=True)
    loader = DataLoader(
        dataset, sampler=sampler, batch_size=4, num_workers=2, multiprocessing_context="fork"
    )
    everything = sorted(dataset[i]["cls"] for i in range(len(dataset)))
    orders = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        order = labels(iter(loader))
        assert sorted(order) == everything
        orders.append(order)
    assert orders[0] != orders[1]
    assert orders[0] == [
        dataset[i]["cls"]
        for i in wds.ChunkedSampler(dataset, chunksize=6, seed=1, shufflefirst=True)
    ]


@pytest.mark.loaders
@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_the_sampler_exactly(
    dataset: wds.ShardListDataset, workers: int
) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader() -> Any:
        sampler = wds.ChunkedSampler(dataset, chunksize=5, seed=3, shufflefirst=True)
        context = "fork" if workers else None
        return StatefulDataLoader(
            dataset,
            sampler=sampler,
            batch_size=3,
            num_workers=workers,
            multiprocessing_context=context,
        )

    reference = loader()
    labels(iter(reference))
    uninterrupted = labels(iter(reference))  # the second epoch: its sampler's epoch 1
    first = loader()
    labels(iter(first))
    iterator = iter(first)
    head = labels(next(iterator) for _ in range(3))
    state = first.state_dict()
    del iterator
    second = loader()
    second.load_state_dict(state)
    assert head + labels(iter(second)) == uninterrupted


@pytest.mark.dataloader2
@pytest.mark.loaders
def test_dataloader2_reads_a_samplers_order_with_workers(dataset: wds.ShardListDataset) -> None:
    from torchdata.dataloader2 import DataLoader2, MultiProcessingReadingService

    sampler = wds.ChunkedSampler(dataset, chunksize=6, seed=2, shufflefirst=True)
    pipe = dataset.sampled(sampler)
    service = MultiProcessingReadingService(num_workers=2, multiprocessing_context="fork")
    loader = DataLoader2(pipe, reading_service=service)
    try:
        everything = sorted(dataset[i]["cls"] for i in range(len(dataset)))
        orders = [[sample["cls"] for sample in loader] for _ in range(2)]
    finally:
        loader.shutdown()
    for order in orders:
        assert sorted(order) == everything
    assert orders[0] != orders[1]


def test_sampled_pipe_splits_indices_by_the_core_sharding_filter(
    dataset: wds.ShardListDataset,
) -> None:
    from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe
    from torch.utils.data.graph_settings import apply_sharding

    sampler = wds.ChunkedSampler(dataset, chunksize=6, seed=2)
    order = list(wds.ChunkedSampler(dataset, chunksize=6, seed=2))
    parts = []
    for worker in range(2):
        pipe = dataset.sampled(wds.ChunkedSampler(dataset, chunksize=6, seed=2))
        assert type(pipe.source_datapipe) is ShardingFilterIterDataPipe
        apply_sharding(pipe, 2, worker)
        parts.append([sample["__index__"] for sample in pipe])
    assert parts == [order[0::2], order[1::2]]
    assert torch.utils.data.graph.traverse_dps(dataset.sampled(sampler))
