"""An example pipeline for every registered wdspipes stage, which the shared tests run: one
pickles, re-seeds and re-iterates each (tests/test_registry.py), one saves, pickles and restores
each at several cut points (tests/test_stage_state.py). A new stage is covered by adding its
example to EXAMPLES; the tests fail until it is there."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from shardgen import make_tar
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes.core.protocol import functional_names
from wdspipes.io import ShardStream
from wdspipes.pipes import ShardClaimer

SHARDS, PER_SHARD = 4, 3


def registered_stages() -> dict[str, type]:
    """Functional name -> class, for every stage of wdspipes' table (each registered on
    IterDataPipe)."""
    stages = functional_names()
    assert set(stages) <= set(IterDataPipe.functions)
    return stages


def write_shards(directory: Path) -> list[str]:
    """4 shards of 3 samples with a decodable class and text; also as CBOR and msgpack."""
    paths = []
    for shard in range(SHARDS):
        members = []
        for index in range(PER_SHARD):
            key = f"{shard}-{index}"
            members += [
                (f"{key}.cls", str(shard * PER_SHARD + index).encode()),
                (f"{key}.txt", b"t" * index),
            ]
        path = directory / f"shard-{shard}.tar"
        path.write_bytes(make_tar(members))
        paths.append(str(path))
        for writer_class in (wds.CborWriter, wds.MsgpackWriter):
            suffix = ".cbor" if writer_class is wds.CborWriter else ".msgpack"
            with writer_class(path.with_suffix(suffix)) as writer:
                for sample in wds.ShardList([str(path)]).open_shards().load_tar().group_samples():
                    writer.write(sample)
    return paths


def comparable(item: Any) -> Any:
    """Items as plain data: an opened shard by its URL and its bytes (read while it is open),
    tensors as lists."""
    if isinstance(item, ShardStream):
        return item.url, item.stream.read()
    if isinstance(item, torch.Tensor):
        return item.tolist()
    if isinstance(item, tuple | list):
        return [comparable(x) for x in item]
    if isinstance(item, dict):
        return {k: comparable(v) for k, v in item.items()}
    return item


def samples(urls: list[str]) -> IterDataPipe[Any]:
    return wds.ShardList(urls).open_shards().load_tar().group_samples()


def streams(urls: list[str], suffix: str) -> wds.ShardList:
    """The stream shards written next to each tar shard, with the same samples."""
    return wds.ShardList([url.removesuffix(".tar") + suffix for url in urls])


def tuples(urls: list[str]) -> IterDataPipe[Any]:
    return samples(urls).decode().to_tuple("cls", "txt")


def odd_class(sample: dict[str, Any]) -> bool:
    return sample["cls"] % 2 == 1


def describe(sample: dict[str, Any]) -> str:
    return f"{sample['__key__']}: {sample['txt']}"


class Jitter:
    """A decode handler that draws from the generator the stage hands it: the stage's
    seeding shows in the output."""

    takes_rng = True

    def __call__(self, key: str, data: bytes, rng: random.Random) -> Any:
        return (data, rng.random()) if key == ".txt" else None


class ShardQueue:
    """A directory filled anew with copies of the shards each epoch, oldest first: the queue
    that ``claim_shards`` takes them from (a plain iterable, which a chain of core classes
    reads too)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.directory = Path(urls[0]).parent / "queue"

    def __iter__(self) -> Iterator[str]:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir()
        for age, url in enumerate(self.urls):
            copy = self.directory / Path(url).name
            shutil.copyfile(url, copy)
            os.utime(copy, (age, age))
        yield str(self.directory)


def claimed(urls: list[str]) -> IterDataPipe[Any]:
    queue = ShardQueue(urls)
    return ShardClaimer(queue, pattern="*.tar", select="oldest", mode="keep", poll=None)


# Functional name -> (build an example pipeline from shard paths). Functions must be defined
# at module level, so that the pipelines pickle.
EXAMPLES: dict[str, Callable[[list[str]], IterDataPipe[Any]]] = {
    "list_shards": lambda urls: IterableWrapper([urls, "x-{0..2}.tar"]).list_shards(),
    "resample_shards": lambda urls: wds.ShardList(urls).resample_shards(nshards=20),
    "open_shards": lambda urls: wds.ShardList(urls).open_shards(),
    "load_tar": lambda urls: wds.ShardList(urls).open_shards().load_tar(),
    "group_samples": samples,
    "load_cbor": lambda urls: streams(urls, ".cbor").open_shards().load_cbor(),
    "load_msgpack": lambda urls: streams(urls, ".msgpack").open_shards().load_msgpack(),
    "decode": lambda urls: samples(urls).decode(Jitter()),
    "buffer_shuffle": lambda urls: samples(urls).buffer_shuffle(5),
    "to_tuple": tuples,
    "map_tuple": lambda urls: tuples(urls).map_tuple(str, len),
    "map_dict": lambda urls: samples(urls).decode().map_dict(cls=str),
    "rename": lambda urls: samples(urls).rename(label="cls", keep=False),
    "select": lambda urls: samples(urls).decode().select(odd_class),
    "map_samples": lambda urls: samples(urls).decode().map_samples(describe),
    "islice": lambda urls: samples(urls).islice(1, 9, 2),
    "batched": lambda urls: tuples(urls).batched(4),
    "unbatched": lambda urls: tuples(urls).batched(4).unbatched(),
    "with_epoch": lambda urls: samples(urls).buffer_shuffle(5).with_epoch(30),
    "with_length": lambda urls: samples(urls).with_length(12),
    "repeat_epochs": lambda urls: samples(urls).buffer_shuffle(5).repeat_epochs(2),
    "claim_shards": claimed,
    "interleave": lambda urls: samples(urls[:1]).interleave(
        samples(urls[1:]).buffer_shuffle(4), longest=True
    ),
    "interleave_randomly": lambda urls: samples(urls[:2]).interleave_randomly(
        samples(urls[2:]).buffer_shuffle(4), probs=[1, 2], longest=True
    ),
    "prefetch_items": lambda urls: samples(urls).buffer_shuffle(5).prefetch_items(4),
}
