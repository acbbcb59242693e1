"""Pipelines whose states the main before the stage model (8615cc5) saved mid-epoch, kept in
tests/data/old_states.pickle with what each delivered after the cut: a state saved by that
version loads after the change and goes on exactly (tests/test_old_states.py). Shards are
written afresh, the same bytes, under the same relative paths (states hold checksums of the
URLs)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import wdspipes as wds

SHARDS = "shards/s-{0..5}.tar"
STREAMS = "shards/s-{0..5}.cbor"


def write_shards(directory: str) -> None:
    """6 tar shards of 5 samples, and the same samples as CBOR stream shards."""
    os.makedirs(os.path.join(directory, "shards"), exist_ok=True)
    for shard in range(6):
        samples = [
            {"__key__": f"{shard}-{index}", "cls": shard * 5 + index, "txt": "t" * index}
            for index in range(5)
        ]
        with wds.TarWriter(os.path.join(directory, f"shards/s-{shard}.tar")) as tar:
            for sample in samples:
                tar.write(sample)
        with wds.CborWriter(os.path.join(directory, f"shards/s-{shard}.cbor")) as cbor:
            for sample in samples:
                cbor.write(sample)


def keys_of(item: Any) -> Any:
    if hasattr(item, "tolist"):  # a tensor
        return item.tolist()
    if isinstance(item, dict):
        return item["__key__"]
    if isinstance(item, tuple | list):
        return [keys_of(each) for each in item]
    return item


def shuffled() -> Any:
    pipe = wds.WebDataset(SHARDS, shardshuffle=True, seed=3).decode()
    return pipe.buffer_shuffle(7, initial=3, seed=4)


def epochs() -> Any:
    pipe = wds.WebDataset(SHARDS, shardshuffle=True, seed=3).buffer_shuffle(6, seed=5)
    return pipe.with_epoch(40)


def mixed() -> Any:
    first = wds.WebDataset("shards/s-{0..2}.tar", seed=1).buffer_shuffle(4, seed=2)
    second = wds.WebDataset("shards/s-{3..5}.tar", shardshuffle=True, seed=6)
    return first.interleave_randomly(second, probs=[1, 2], longest=True, seed=7)


def streams() -> Any:
    return wds.ShardList(STREAMS).open_shards().load_cbor().buffer_shuffle(5, seed=8)


def batches() -> Any:
    return shuffled().to_tuple("__key__", "cls").batched(4).islice(0, 6)


PIPELINES: dict[str, tuple[Callable[[], Any], tuple[int, ...]]] = {
    "shuffled": (shuffled, (0, 1, 11, 29, 30)),
    "epochs": (epochs, (0, 17, 39)),
    "mixed": (mixed, (0, 5, 20)),
    "streams": (streams, (0, 9)),
    "batches": (batches, (0, 2, 5)),
}
"""Name -> (the pipeline, the cuts, in items, where its state was saved)."""
