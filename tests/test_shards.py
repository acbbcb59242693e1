"""Shard lists (FORMAT.md section 1: brace expansion, ``::``, lists as is) and the resampler's
seeding: reproducible from a seed, new draws each epoch, the loader's seed otherwise."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.datapipes.iter.sharding import ShardingFilterIterDataPipe

import wdspipes as wds
from wdspipes.pipes import ShardResampler
from wdspipes.read.specs import ShardSpec, expand_urls


@pytest.mark.parametrize(
    ("spec", "urls"),
    [
        ("a-{000..002}.tar", ["a-000.tar", "a-001.tar", "a-002.tar"]),
        ("a-{8..10}.tar", ["a-8.tar", "a-9.tar", "a-10.tar"]),
        ("{train,val}/x.tar", ["train/x.tar", "val/x.tar"]),
        ("a.tar::b-{1..2}.tar", ["a.tar", "b-1.tar", "b-2.tar"]),
        ("pipe:cat s-{0..1}.tar", ["pipe:cat s-0.tar", "pipe:cat s-1.tar"]),
        (["x-{0..3}.tar", "y.tar"], ["x-{0..3}.tar", "y.tar"]),  # a list is taken as is
        (("a.tar",), ["a.tar"]),
        (Path("/data/a.tar"), ["/data/a.tar"]),
        ([Path("/data/a.tar"), "b.tar"], ["/data/a.tar", "b.tar"]),
    ],
)
def test_expand_urls(spec: ShardSpec, urls: list[str]) -> None:
    assert expand_urls(spec) == urls


@pytest.mark.parametrize("spec", ["", [], "a.tar::", "::a.tar"])
def test_empty_specs_are_errors(spec: ShardSpec) -> None:
    with pytest.raises(ValueError, match="shard spec"):
        expand_urls(spec)


def test_bad_spec_types_name_the_problem() -> None:
    with pytest.raises(TypeError, match="got int"):
        expand_urls(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="item 1 must be a string or path, got NoneType"):
        expand_urls(["a.tar", None])  # type: ignore[list-item]


def test_shard_list_is_a_sized_source() -> None:
    shards = wds.ShardList("s-{0..4}.tar")
    assert len(shards) == 5
    assert list(shards) == list(shards) == [f"s-{i}.tar" for i in range(5)]
    assert wds.SimpleShardList is wds.ShardList


def test_list_shards_expands_each_spec() -> None:
    specs = IterableWrapper(["a-{0..1}.tar", "b.tar::c.tar", ["d-{0..1}.tar"]])
    assert list(specs.list_shards()) == ["a-0.tar", "a-1.tar", "b.tar", "c.tar", "d-{0..1}.tar"]


URLS = [f"s-{i:02d}.tar" for i in range(20)]


def draws(pipe: IterDataPipe[str], epochs: int = 1) -> list[list[str]]:
    return [list(pipe) for _ in range(epochs)]


def resampler(**kwargs: Any) -> ShardResampler:
    return ShardResampler(wds.ShardList(URLS), **kwargs)


def test_resampler_draws_with_replacement() -> None:
    (epoch,) = draws(wds.ResampledShards(URLS, nshards=200, seed=0))
    assert len(epoch) == 200 and set(epoch) <= set(URLS)
    assert len(set(epoch)) < 200  # replacement


def test_resampler_is_endless_by_default() -> None:
    pipe = wds.ResampledShards(URLS, seed=0)
    assert len(list(itertools.islice(pipe, 5000))) == 5000


def test_fixed_seed_gives_the_same_stream_every_run_and_new_draws_each_epoch() -> None:
    first = draws(wds.ResampledShards(URLS, nshards=30, seed=5), epochs=3)
    again = draws(wds.ResampledShards(URLS, nshards=30, seed=5), epochs=3)
    other = draws(wds.ResampledShards(URLS, nshards=30, seed=6), epochs=3)
    assert first == again
    assert first != other
    assert first[0] != first[1] != first[2]


def test_fixed_seed_wins_over_the_loader_seed() -> None:
    """Loaders call set_seed each epoch: with a fixed seed only the epoch count matters."""
    a, b = (resampler(nshards=30, seed=5) for _ in range(2))
    epochs_a, epochs_b = [], []
    for seed_a, seed_b in [(1, 2), (3, 4)]:
        a.set_seed(seed_a)
        b.set_seed(seed_b)
        epochs_a += draws(a)
        epochs_b += draws(b)
    assert epochs_a == epochs_b
    assert epochs_a[0] != epochs_a[1]


def test_loader_seed_decides_without_a_fixed_seed() -> None:
    a, b, c = (resampler(nshards=30) for _ in range(3))
    a.set_seed(11)
    b.set_seed(11)
    c.set_seed(12)
    assert draws(a) == draws(b) != draws(c)


def test_without_any_seed_each_pipeline_draws_its_own() -> None:
    assert draws(wds.ResampledShards(URLS, nshards=30)) != draws(
        wds.ResampledShards(URLS, nshards=30)
    )


def test_resampled_shards_split_one_shared_stream_among_readers() -> None:
    """Each reader takes its own part of the one stream all draw alike: no two readers
    repeat each other's draws, and nshards counts the draws of all readers together."""
    whole = draws(wds.ResampledShards(URLS, nshards=30, seed=3))[0]
    parts = []
    for reader in range(3):
        pipe = wds.ResampledShards(URLS, nshards=30, seed=3)
        assert isinstance(pipe, ShardingFilterIterDataPipe)
        pipe.apply_sharding(3, reader)
        parts.append(list(pipe))
    assert [len(part) for part in parts] == [10, 10, 10]
    assert [shard for row in zip(*parts, strict=True) for shard in row] == whole
    assert len(ShardResampler(wds.ShardList(URLS), nshards=30)) == 30
    with pytest.raises(TypeError, match="draws without end"):
        len(ShardResampler(wds.ShardList(URLS)))


def test_split_markers_after_resampled_shards_change_nothing() -> None:
    pipe = wds.DataPipeline(wds.ResampledShards(URLS), wds.split_by_node, wds.split_by_worker)
    assert isinstance(pipe, ShardingFilterIterDataPipe)
    assert isinstance(pipe.source_datapipe, ShardResampler)
    assert wds.split_by_worker(pipe) is pipe


def test_resample_shards_over_a_pipe() -> None:
    drawn = list(wds.ShardList("a-{0..2}.tar").resample_shards(nshards=10, seed=1))
    assert len(drawn) == 10 and set(drawn) <= {"a-0.tar", "a-1.tar", "a-2.tar"}


def test_resampler_checks_its_arguments() -> None:
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="nshards must be a positive int or None"):
            wds.ResampledShards(URLS, nshards=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed must be an int"):
        wds.ResampledShards(URLS, seed="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no shard URLs"):
        list(IterableWrapper([]).resample_shards())


def test_split_markers_are_sharding_filters() -> None:
    pipe = wds.split_by_worker(wds.ShardList(URLS))
    pipe.apply_sharding(4, 1)
    assert list(pipe) == URLS[1::4]
    with pytest.raises(TypeError, match="split_by_node splits an IterDataPipe"):
        wds.split_by_node(URLS)  # type: ignore[arg-type]
