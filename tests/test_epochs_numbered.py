"""Epochs you can set, and agreed on (issue 27, item 3): ``set_epoch(n)`` reaches every seeded
shuffle and resampler, so a job restarted at epoch n reproduces epoch n's orders; webdataset's
``detshuffle(..., epoch=)`` and ``shuffle(..., rng=)`` are taken; reading a source again within
an epoch keeps the epoch's shard order. And a graph is traversed without pickling it: a stage class
defined in a function, a lambda or an open file in a stage iterate in one process."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.graph_settings import apply_random_seed, apply_sharding

import wdspipes as wds
from wdspipes.core import distributed


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("epochs")
    for shard in range(6):
        with wds.TarWriter(str(directory / f"s-{shard}.tar")) as sink:
            for index in range(8):
                sink.write({"__key__": f"{shard}-{index}", "txt": "x"})
    return f"{directory}/s-{{0..5}}.tar"


def keys(pipe: IterDataPipe[Any]) -> list[str]:
    return [sample["__key__"] for sample in pipe]


def pipeline(urls: str) -> IterDataPipe[Any]:
    return (
        wds.WebDataset(urls, shardshuffle=True, seed=1)
        .buffer_shuffle(10, initial=4, seed=2)
        .decode()
    )


def resampled(urls: str) -> IterDataPipe[Any]:
    return wds.WebDataset(urls, resampled=True, nshards=5, seed=3).buffer_shuffle(7, seed=4)


@pytest.mark.parametrize("build", [pipeline, resampled])
def test_set_epoch_reproduces_that_epochs_orders(urls: str, build: Any) -> None:
    run = build(urls)
    epochs = [keys(run) for _ in range(4)]
    assert len({tuple(epoch) for epoch in epochs}) == 4
    for epoch in range(4):
        restarted = build(urls)
        restarted.set_epoch(epoch)
        assert keys(restarted) == epochs[epoch]
        if epoch < 3:
            assert keys(restarted) == epochs[epoch + 1]  # and counts on from there


def seeded(pipe: IterDataPipe[Any], seed: int) -> IterDataPipe[Any]:
    apply_random_seed(pipe, torch.Generator().manual_seed(seed))  # as a loader's epoch begins
    return pipe


def test_under_a_loader_set_epoch_numbers_the_next_epoch(urls: str) -> None:
    """A loader seeds each epoch; set_epoch(n) before it makes it epoch n, and the loader's
    next epochs n + 1, ... (the loader's seeds do not matter here: the stages have seed=)."""
    run = pipeline(urls)
    epochs = [keys(seeded(run, epoch)) for epoch in range(3)]
    restarted = pipeline(urls)
    restarted.set_epoch(1)
    assert [keys(seeded(restarted, 7)), keys(seeded(restarted, 8))] == epochs[1:]


def test_set_epoch_is_checked(urls: str) -> None:
    for epoch in (-1, 1.5, True):
        with pytest.raises(ValueError, match="epoch must be an int >= 0"):
            pipeline(urls).set_epoch(epoch)  # type: ignore[arg-type]


def test_a_source_read_again_within_a_loader_epoch_keeps_its_shard_order(urls: str) -> None:
    """with_epoch reads its source again when it runs out: under a loader (which seeds each
    epoch) the shard order stays the epoch's, so a worker reads its own shards again."""
    readers = []
    for reader in range(2):
        pipe = wds.WebDataset(urls, shardshuffle=True).with_epoch(40)  # 24 samples a reader
        apply_sharding(pipe, 2, reader)
        readers.append(seeded(pipe, 5))
    first, second = (keys(pipe) for pipe in readers)
    shards = [{key.split("-")[0] for key in read} for read in (first, second)]
    assert not shards[0] & shards[1], "a reader read a shard the other one had"
    assert len(set(first)) == len(set(second)) == 24


class Counting:
    """webdataset's SharedEpoch: a counter the program sets."""

    def __init__(self) -> None:
        self.value = 0

    def get_value(self) -> int:
        return self.value


def test_detshuffle_takes_webdatasets_epoch_and_a_shared_counter() -> None:
    def orders(shuffle: Any, count: int) -> list[list[int]]:
        pipe = shuffle(IterableWrapper(range(20)))
        return [list(pipe) for _ in range(count)]

    counted = orders(wds.detshuffle(8, seed=1), 3)
    assert orders(wds.detshuffle(8, seed=1, epoch=1), 1) == counted[2:]  # webdataset: +1
    shared = Counting()
    pipe = wds.detshuffle(8, seed=1, epoch=shared)(IterableWrapper(range(20)))
    for epoch in (2, 0, 2):
        shared.value = epoch
        assert list(pipe) == counted[epoch]


def test_shuffle_takes_webdatasets_rng() -> None:
    def shuffled(**options: Any) -> list[int]:
        return list(wds.shuffle(8, **options)(IterableWrapper(range(30))))

    assert shuffled(rng=random.Random(5)) == shuffled(rng=random.Random(5))
    assert shuffled(rng=random.Random(5)) != shuffled(rng=random.Random(6))
    assert shuffled(seed=9) == list(wds.shuffle(8, 100, 9)(IterableWrapper(range(30))))
    pipe = IterableWrapper(range(30)).islice(None)  # a wdspipes stage
    assert list(pipe.shuffle(8, rng=random.Random(5))) == shuffled(rng=random.Random(5))
    with pytest.raises(ValueError, match="seed= or rng=, not both"):
        wds.shuffle(8, rng=random.Random(1), seed=2)
    with pytest.raises(TypeError, match=r"rng must be a random\.Random"):
        wds.shuffle(8, rng="x")  # type: ignore[arg-type]


# --- the graph traversed without pickling ------------------------------------------------------


def local_stage() -> type[wds.Stage[Any]]:
    """A stage class defined in a function, which cannot pickle: each item as it comes, and
    the source's length."""

    class Passing(wds.Stage[Any]):
        resumes = wds.Resumes.ITEM_BY_ITEM

        def open(self, source: Any, context: Any, part: Any = None) -> Iterator[Any]:
            yield from source

        def __len__(self) -> int:
            return len(self.source_datapipe)  # type: ignore[arg-type]

    return Passing


def test_a_local_stage_class_before_a_shuffle_buffer_iterates(urls: str, tmp_path: Path) -> None:
    """Before, the buffer's seeds looked for the sharding filter by pickling the graph each
    epoch: a class defined in a function failed with "Can't pickle local object", in one
    process, without any loader."""
    with open(tmp_path / "note.txt", "w") as note:
        stage = local_stage()
        pipe = stage(wds.WebDataset(urls, shardshuffle=True)).map_samples(lambda s: s)
        pipe.note = note  # an open file in a stage
        shuffled = pipe.buffer_shuffle(10, seed=1)
        first = keys(shuffled)
        assert sorted(first) == sorted(keys(shuffled)) and len(first) == 48
        state = shuffled.state_dict()  # the state traverses the same graph
        assert state["stages"]


def test_the_unsplit_shards_check_walks_a_graph_with_a_local_stage_class(
    urls: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The opener's check that every reader reads every shard (no sharding filter, several
    readers) looked for stages that declare their shards per worker by pickling the graph: a
    class defined in a function failed with "Can't pickle local object"."""
    monkeypatch.setattr(distributed, "_loader_readers", lambda: 2)  # as a loader's worker 0
    monkeypatch.setattr(distributed, "_is_first_reader", lambda: True)
    pipe = local_stage()(wds.ShardList(urls)).open_shards().load_tar().group_samples()
    with pytest.warns(RuntimeWarning, match="has no sharding_filter upstream"):
        assert len(keys(pipe)) == 48
