"""One test over every registered wdspipes stage: it pickles, and a copy seeded alike gives the
same output, epoch after epoch. A new stage is covered by adding it to EXAMPLES; the walk fails
until it is. Also: wdspipes and torchdata import together, in either order, with no clash."""

from __future__ import annotations

import pickle
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from shardgen import make_tar
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.graph_settings import apply_random_seed

import wdspipes as wds
from wdspipes.datapipe import registered_stage


def registered_stages() -> dict[str, type]:
    """Functional name -> class, for every stage wdspipes registered on IterDataPipe."""
    stages = {name: registered_stage(name) for name in IterDataPipe.functions}
    return {name: cls for name, cls in stages.items() if cls is not None}


def comparable(item: Any) -> Any:
    """Items as plain data: an opened shard by its URL and its bytes (read while it is open),
    tensors as lists."""
    if isinstance(item, wds.ShardStream):
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
    """The stream shards the fixture writes next to each tar shard, with the same samples."""
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
}


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """4 shards of 3 samples with a decodable class and text; also as CBOR and msgpack."""
    directory = tmp_path_factory.mktemp("registry")
    paths = []
    for shard in range(4):
        members = []
        for index in range(3):
            key = f"{shard}-{index}"
            members += [
                (f"{key}.cls", str(shard * 3 + index).encode()),
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


def test_every_registered_stage_has_an_example() -> None:
    assert sorted(registered_stages()) == sorted(EXAMPLES)


def seeded_output(pipe: IterDataPipe[Any], seed: int) -> list[Any]:
    apply_random_seed(pipe, torch.Generator().manual_seed(seed))
    return [comparable(item) for item in pipe]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_stage_pickles_and_reiterates_the_same_with_the_same_seed(
    name: str, urls: list[str]
) -> None:
    """A pickled copy, seeded as the original is epoch after epoch, gives the same output."""
    pipe = EXAMPLES[name](urls)
    assert isinstance(pipe, registered_stages()[name])
    clone = pickle.loads(pickle.dumps(pipe))
    for seed in (1, 1, 2):  # a loader may hand out the same seed again
        output = seeded_output(pipe, seed)
        assert output, "an example must produce items"
        assert seeded_output(clone, seed) == output


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_stage_docstring_follows_the_template(name: str) -> None:
    doc = registered_stages()[name].__doc__ or ""
    assert doc.splitlines()[0].endswith(f"(functional name: ``{name}``).")
    assert "Args:" in doc and "Yields:" in doc and ">>>" in doc


@pytest.mark.slow
@pytest.mark.parametrize(
    "order",
    [("torchdata.datapipes", "wdspipes"), ("wdspipes", "torchdata.datapipes")],
    ids=["torchdata-first", "wdspipes-first"],
)
def test_imports_with_torchdata_in_either_order(order: tuple[str, str]) -> None:
    script = (
        "import warnings; warnings.simplefilter('ignore')\n"
        f"import {order[0]}; import {order[1]}\n"
        "from torch.utils.data import IterDataPipe as D\n"
        "assert {'load_tar', 'group_samples', 'load_from_tar', 'webdataset'} <= set(D.functions)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).parent)
