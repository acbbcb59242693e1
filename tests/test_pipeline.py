"""Composition: DataPipeline(...) in webdataset's vocabulary, functional chaining, WebDataset(...),
and the buffer shuffler they use for shard order. All three ways give the same samples."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from reference import quietly, wdsref
from shardgen import Shards, make_tar, write_shards
from stage_examples import comparable as plain
from torch.utils.data import DataLoader, IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.datapipes.iter.sharding import (
    SHARDING_PRIORITIES,
    ShardingFilterIterDataPipe,
)
from torch.utils.data.graph import traverse_dps
from torch.utils.data.graph_settings import get_all_graph_pipes

import wdspipes as wds
from wdspipes.core.curried import Curried
from wdspipes.loaders import dataloader2
from wdspipes.pipes import BufferShuffler, SampleGrouper, ShardResampler, TarLoader


def keys(pipe: Any) -> list[str]:
    return [sample["__key__"] for sample in pipe]


def all_keys(urls: list[str]) -> list[str]:
    return [f"{shard:03d}-{i:05d}" for shard in range(len(urls)) for i in range(5)]


def sharding_filters(pipe: Any) -> list[Any]:
    return [
        dp
        for dp in get_all_graph_pipes(traverse_dps(pipe))
        if type(dp) is ShardingFilterIterDataPipe
    ]


def add_one(samples: Iterator[dict[str, Any]], field: str) -> Iterator[dict[str, Any]]:
    for sample in samples:
        yield {**sample, field: int(sample["cls"].split(b"/")[0].replace(b"-", b"")) + 1}


def test_three_ways_give_the_same_samples(small_shards: Shards) -> None:
    explicit = wds.DataPipeline(wds.SimpleShardList(small_shards.paths), wds.tarfile_to_samples())
    chained = wds.ShardList(small_shards.paths).open_shards().load_tar().group_samples()
    convenient = wds.WebDataset(small_shards.paths)
    assert keys(explicit) == keys(chained) == keys(convenient) == all_keys(small_shards.paths)


def test_architecture_chaining_example(small_shards: Shards) -> None:
    pipe = (
        wds.ShardList(small_shards.paths)
        .shuffle()
        .sharding_filter()
        .open_shards()
        .load_tar()
        .group_samples()
    )
    assert sorted(keys(pipe)) == all_keys(small_shards.paths)


@pytest.mark.parametrize(
    "source",
    ["list", "spec-string", "datapipe"],
)
def test_sources(small_shards: Shards, source: str) -> None:
    first: Any = {
        "list": small_shards.paths,
        "spec-string": "::".join(small_shards.paths),
        "datapipe": IterableWrapper(small_shards.paths),
    }[source]
    assert keys(wds.DataPipeline(first, wds.tarfile_to_samples())) == all_keys(small_shards.paths)


def test_factories_may_be_passed_uncalled(small_shards: Shards) -> None:
    pipe = wds.DataPipeline(
        small_shards.paths, wds.url_opener, wds.tar_file_expander, wds.group_by_keys
    )
    assert keys(pipe) == all_keys(small_shards.paths)


def test_plain_functions_classes_none_and_lists(small_shards: Shards) -> None:
    pipe = wds.DataPipeline(
        small_shards.paths,
        None,
        [wds.url_opener(), TarLoader],
        SampleGrouper,
        functools.partial(add_one, field="next"),
    )
    samples = list(pipe)
    assert [s["__key__"] for s in samples] == all_keys(small_shards.paths)
    assert samples[1]["next"] == 2  # "000-00001" -> 1 + 1
    assert isinstance(pipe, wds.IteratorStage)


def test_split_markers_become_one_sharding_filter_at_the_first(small_shards: Shards) -> None:
    shares = []
    for worker in range(2):
        pipe = wds.DataPipeline(
            wds.SimpleShardList(small_shards.paths),
            wds.shuffle(10, seed=1),
            wds.split_by_node,
            wds.split_by_worker,
            wds.tarfile_to_samples(),
            wds.split_by_worker,
        )
        (sharding,) = sharding_filters(pipe)
        assert isinstance(sharding.source_datapipe, BufferShuffler)
        sharding.apply_sharding(2, worker)
        shares.append(keys(pipe))
    assert sorted(shares[0] + shares[1]) == all_keys(small_shards.paths)
    assert len(shares[0]) == len(shares[1]) == len(all_keys(small_shards.paths)) // 2


def test_split_by_worker_reads_disjoint_shards(small_shards: Shards) -> None:
    seen = []
    for worker in range(3):
        pipe = wds.DataPipeline(small_shards.paths, wds.split_by_worker, wds.tarfile_to_samples())
        (sharding,) = sharding_filters(pipe)
        sharding.apply_sharding(3, worker, SHARDING_PRIORITIES.MULTIPROCESSING)  # as DataLoader2
        seen += keys(pipe)
    assert sorted(seen) == all_keys(small_shards.paths)


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ((), "at least a source"),
        ((42,), "first stage of DataPipeline must be"),
        ((["a.tar"], IterableWrapper([1])), "stage 1 of DataPipeline is an IterDataPipe instance"),
        ((["a.tar"], 3), "stage 1 of DataPipeline is not a stage"),
        ((["a.tar"], Curried(len)), "did not return an IterDataPipe"),
    ],
)
def test_bad_pipelines_are_errors(stages: tuple[Any, ...], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        pipe = wds.DataPipeline(*stages)
        list(pipe)


def test_webdataset_reads_each_shard_once_per_epoch(small_shards: Shards) -> None:
    pipe = wds.WebDataset(small_shards.paths, shardshuffle=True)
    epochs = [keys(pipe) for _ in range(3)]
    assert all(sorted(epoch) == all_keys(small_shards.paths) for epoch in epochs)


def test_webdataset_shard_order_changes_each_epoch_and_follows_the_seed(tmp_path: Path) -> None:
    many = write_shards(tmp_path, 12, 1)

    def orders(pipe: Any) -> list[list[str]]:
        return [keys(pipe) for _ in range(3)]

    seeded = orders(wds.WebDataset(many, shardshuffle=True, seed=3))
    assert seeded == orders(wds.WebDataset(many, shardshuffle=True, seed=3))
    assert seeded[0] != seeded[1] != seeded[2]
    assert orders(wds.WebDataset(many, shardshuffle=4, seed=3)) != seeded
    assert orders(wds.WebDataset(many)) == [all_keys(many)[::5]] * 3  # write_shards: 1 sample each


def test_webdataset_resampled(small_shards: Shards) -> None:
    pipe = wds.WebDataset(small_shards.paths, resampled=True, nshards=10, seed=0)
    samples = keys(pipe)
    assert len(samples) == 10 * 5 and set(samples) <= set(all_keys(small_shards.paths))
    with pytest.raises(ValueError, match="nshards applies only with resampled=True"):
        wds.WebDataset(small_shards.paths, nshards=3)
    with pytest.warns(UserWarning, match="shardshuffle has no effect"):
        wds.WebDataset(small_shards.paths, resampled=True, shardshuffle=True)


def test_webdataset_graph_has_one_sharding_filter_after_the_shard_order(
    small_shards: Shards,
) -> None:
    for pipe in (
        wds.WebDataset(small_shards.paths, shardshuffle=True),
        wds.WebDataset(small_shards.paths, resampled=True),
    ):
        (sharding,) = sharding_filters(pipe)
        assert isinstance(sharding.source_datapipe, BufferShuffler | ShardResampler)


# The buffer shuffler


def test_buffer_shuffle_keeps_every_item() -> None:
    items = list(range(100))
    for bufsize, initial in ((1, 0), (10, 5), (1000, 100)):
        shuffled = list(IterableWrapper(items).buffer_shuffle(bufsize, initial, seed=0))
        assert sorted(shuffled) == items
    assert list(IterableWrapper(items).buffer_shuffle(1)) == items  # a buffer of one


def test_buffer_shuffle_holds_initial_items_before_the_first_comes_out() -> None:
    pulled = []

    def source() -> Iterator[int]:
        for i in range(50):
            pulled.append(i)
            yield i

    pipe = wds.IteratorStage(IterableWrapper([0]), lambda _: source()).buffer_shuffle(20, 8, seed=1)
    iterator = iter(pipe)
    next(iterator)
    assert len(pulled) == 8


def test_buffer_shuffle_seeding() -> None:
    def orders(pipe: Any) -> list[list[int]]:
        return [list(pipe) for _ in range(2)]

    source = IterableWrapper(range(50))
    seeded = orders(source.buffer_shuffle(10, seed=4))
    assert seeded == orders(source.buffer_shuffle(10, seed=4))
    assert seeded[0] != seeded[1]
    a, b = source.buffer_shuffle(10), source.buffer_shuffle(10)
    a.set_seed(9)
    b.set_seed(9)
    assert list(a) == list(b)


LOADER_FLAG_OFF: dict[str, Callable[[IterDataPipe[Any]], Any]] = {
    "DataLoader": lambda pipe: DataLoader(pipe, batch_size=None, shuffle=False),
    "WebLoader": lambda pipe: wds.WebLoader(pipe, batch_size=None, shuffle=False),
    "DataLoader2": lambda pipe: dataloader2_with_shuffle_flag(pipe, False),
}


def dataloader2_with_shuffle_flag(pipe: IterDataPipe[Any], shuffle: bool) -> Any:
    """DataLoader2 in process, with torchdata's ``Shuffle`` adapter: how it takes the flag."""
    module = dataloader2()  # imported quietly first
    from torchdata.dataloader2.adapter import Shuffle

    return module.DataLoader2(pipe, datapipe_adapter_fn=Shuffle(shuffle))


@pytest.mark.parametrize(
    "loader",
    [
        pytest.param(name, marks=pytest.mark.dataloader2) if name == "DataLoader2" else name
        for name in sorted(LOADER_FLAG_OFF)
    ],
)
def test_the_loaders_shuffle_flag_leaves_wdspipes_shuffles_on(loader: str) -> None:
    """As in webdataset: ``shuffle=False`` on the loader does not turn a shuffle buffer, or a
    shard shuffle before the split, into tar order (issue 27: it did, silently)."""
    shards = IterableWrapper(range(12)).buffer_shuffle(12, initial=12)
    pipe = shards.sharding_filter().buffer_shuffle(50, seed=3)
    items = list(LOADER_FLAG_OFF[loader](pipe))
    assert sorted(items) == list(range(12)) != items
    assert list(pipe) != list(pipe)  # the pipeline given to the loader shuffles on too


def test_the_loaders_shuffle_flag_still_switches_torchs_own_shuffle() -> None:
    source = IterableWrapper(range(30))
    assert list(DataLoader(source.shuffle(), batch_size=None, shuffle=False)) == list(range(30))
    mixed = source.shuffle().buffer_shuffle(10, seed=1)
    unshuffled_source = list(IterableWrapper(range(30)).buffer_shuffle(10, seed=1))
    assert list(DataLoader(mixed, batch_size=None, shuffle=False)) == unshuffled_source


def test_shuffle_true_adds_no_torch_shuffler_after_a_wdspipes_shuffle() -> None:
    pipe = IterableWrapper(range(20)).buffer_shuffle(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns where it adds a Shuffler
        loader = DataLoader(pipe, batch_size=None, shuffle=True)
    stages = get_all_graph_pipes(traverse_dps(loader.dataset))
    assert [type(stage).__name__ for stage in stages[1:]] == [
        "BufferShuffler",
        "IterableWrapperIterDataPipe",
    ]  # after the loader's serialization wrapper, no Shuffler
    assert sorted(loader) == list(range(20))


def test_buffer_shuffle_after_sharding_differs_per_worker_with_one_seed() -> None:
    """Plain DataLoader hands every worker the same seed: the filter position tells them apart."""
    orders = []
    for worker in range(2):
        pipe = IterableWrapper(range(40)).sharding_filter()
        pipe.apply_sharding(2, worker)
        shuffled = pipe.buffer_shuffle(20, seed=1)
        shuffled.set_seed(5)
        orders.append([x // 2 for x in shuffled])  # the same positions in both halves
    assert orders[0] != orders[1]


def test_buffer_shuffle_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="bufsize must be an int >= 1, got 0"):
        IterableWrapper([1]).buffer_shuffle(0)
    with pytest.raises(ValueError, match="initial must be an int >= 0, got -1"):
        IterableWrapper([1]).buffer_shuffle(10, -1)


# --- any iterable as the source, and WebLoader (issue 17 item 5) ----------------------------


def numbered_shards(directory: Path, shards: int = 4, per_shard: int = 5) -> list[str]:
    """Shards whose samples have an int ``cls`` (0, 1, ... in order) and a ``txt``."""
    paths = []
    for shard in range(shards):
        members = []
        for index in range(per_shard):
            number = shard * per_shard + index
            members += [
                (f"{number:04d}.cls", b"%d" % number),
                (f"{number:04d}.txt", b"t%d" % number),
            ]
        path = directory / f"numbered-{shard}.tar"
        path.write_bytes(make_tar(members))
        paths.append(str(path))
    return paths


def cls_and_txt(lib: Any, paths: list[str]) -> Any:
    """webdataset's README pipeline, in either library: the dataset batched in the workers."""
    return lib.WebDataset(paths, shardshuffle=False).decode().to_tuple("cls", "txt")


def twice_cls(item: tuple[int, str]) -> tuple[int, str]:
    return item[0] * 2, item[1]


class Numbers(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """A torch IterableDataset that is no DataPipe: the same items each time."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return ({"__key__": str(n), "n": n} for n in range(6))


def numbers() -> Iterator[dict[str, Any]]:
    return iter(Numbers())


def half(sample: dict[str, Any]) -> dict[str, Any] | None:
    return {"n": sample["n"] // 2} if sample["n"] % 2 else None


@pytest.mark.parametrize(
    "source",
    [
        Numbers(),
        numbers,
        torch.utils.data.DataLoader(Numbers(), batch_size=None),  # type: ignore[arg-type]
    ],
    ids=["iterable", "function", "DataLoader"],
)
def test_any_iterable_or_function_is_a_source_as_in_webdataset(source: Any) -> None:
    ours = wds.DataPipeline(source, wds.map(half))
    theirs = wdsref.DataPipeline(source, wdsref.map(half))
    first = plain(list(ours))
    assert first == plain(list(theirs)) == plain(list(ours))  # read anew each epoch
    assert first == [{"n": 0, "__key__": "1"}, {"n": 1, "__key__": "3"}, {"n": 2, "__key__": "5"}]


def test_any_iterable_is_a_source_where_webdataset_takes_only_datasets() -> None:
    assert list(wds.DataPipeline(range(3), wds.map(str))) == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (iter([1, 2]), "an iterator, which can be read only once"),
        (wds.tarfile_to_samples(), "is a stage that reads one"),
        (wds.split_by_worker, "is a stage that reads one"),
        (wds.shuffle, "is a stage that reads one"),
        (3.5, "first stage of DataPipeline must be"),
    ],
)
def test_sources_that_cannot_be_read_each_epoch_are_refused(source: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        wds.DataPipeline(source, wds.map(half))


def test_a_function_returning_shard_urls_feeds_the_reader(tmp_path: Path) -> None:
    paths = numbered_shards(tmp_path)
    pipe = wds.DataPipeline(lambda: iter(paths), wds.tarfile_to_samples())
    assert [s["__key__"] for s in pipe] == [f"{n:04d}" for n in range(20)]


def test_a_source_resumes_when_it_gives_its_items_again(tmp_path: Path) -> None:
    paths = numbered_shards(tmp_path)

    class Urls:
        def __iter__(self) -> Iterator[str]:
            return iter(paths)

    def build() -> Any:
        return wds.DataPipeline(Urls(), wds.tarfile_to_samples(), wds.shuffle(4, seed=1))

    pipe = build()
    items = iter(pipe)
    seen = [next(items)["__key__"] for _ in range(7)]
    state = pipe.state_dict()
    rest = [s["__key__"] for s in items]
    restored = build()
    restored.load_state_dict(state)
    assert [s["__key__"] for s in restored] == rest and len(seen + rest) == 20


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (lambda paths: lambda: iter(paths), "its source is a function"),
        (
            lambda paths: torch.utils.data.DataLoader(paths, batch_size=None),
            r"its source is a loader \(DataLoader\)",
        ),
    ],
    ids=["function", "DataLoader"],
)
def test_a_source_that_may_give_other_items_is_refused_by_the_state(
    source: Any, message: str, tmp_path: Path
) -> None:
    pipe = wds.DataPipeline(source(numbered_shards(tmp_path)), wds.tarfile_to_samples())
    next(iter(pipe))
    with pytest.raises(wds.ResumeError, match=message):
        pipe.state_dict()


def test_webloader_gives_webdatasets_batches(tmp_path: Path) -> None:
    """The WebLoader recipe without workers (so in a fixed order), only the import changed."""
    paths = numbered_shards(tmp_path)

    def recipe(lib: Any) -> list[Any]:
        dataset = cls_and_txt(lib, paths).batched(3)
        loader = lib.WebLoader(dataset, batch_size=None, num_workers=0)
        return plain(list(loader.unbatched().map(twice_cls).batched(8)))

    ours = recipe(wds)
    assert ours == quietly(recipe, wdsref)
    assert [len(numbers) for numbers, _ in ours] == [8, 8, 4]


def test_webloader_is_a_datapipe_with_the_loader_inside(tmp_path: Path) -> None:
    loader = wds.WebLoader(cls_and_txt(wds, numbered_shards(tmp_path)), batch_size=4)
    assert isinstance(loader, IterDataPipe) and isinstance(loader.loader, DataLoader)
    assert len(loader.with_length(9)) == 9
    batches = list(loader)
    assert type(batches[0]) is list  # torch's loader makes a tuple a list, as in webdataset
    assert [len(b[0]) for b in batches] == [4] * 5
    with pytest.raises(wds.ResumeError, match="at the end of the pipeline, cannot resume"):
        loader.unbatched().state_dict()


@pytest.mark.loaders
def test_webloader_recipe_mixes_the_samples_of_all_workers(tmp_path: Path) -> None:
    """``WebLoader(ds, batch_size=None, num_workers=2).unbatched().shuffle(n).batched(m)``:
    every sample once, in batches of m, as with webdataset."""
    paths = numbered_shards(tmp_path)

    def recipe(lib: Any) -> list[Any]:
        dataset = cls_and_txt(lib, paths).batched(3)
        loader = lib.WebLoader(dataset, batch_size=None, num_workers=2)
        return plain(list(loader.unbatched().shuffle(10).map(twice_cls).batched(8)))

    ours, theirs = recipe(wds), quietly(recipe, wdsref)
    assert [len(n) for n, _ in ours] == [len(n) for n, _ in theirs] == [8, 8, 4]
    rows = sorted((n, t) for numbers, texts in ours for n, t in zip(numbers, texts, strict=True))
    their_rows = sorted(
        (n, t) for numbers, texts in theirs for n, t in zip(numbers, texts, strict=True)
    )
    assert rows == their_rows == [(2 * n, f"t{n}") for n in range(20)]


def test_readme_fluid_example_gives_webdatasets_samples(tmp_path: Path) -> None:
    """webdataset's README fluid pipeline, only the import changed: ``.shuffle(1000)`` is a
    shuffle buffer in both, and the samples are the same."""
    paths = numbered_shards(tmp_path)

    def fluid(lib: Any) -> list[Any]:
        dataset = (
            lib.WebDataset(paths, shardshuffle=False)
            .shuffle(1000)
            .decode()
            .to_tuple("cls", "txt")
            .map(twice_cls)
        )
        return [tuple(item) for item in plain(list(dataset))]

    ours, theirs = fluid(wds), quietly(fluid, wdsref)
    assert sorted(ours) == sorted(theirs) == [(2 * n, f"t{n}") for n in range(20)]
    assert ours != sorted(ours)  # shuffled
