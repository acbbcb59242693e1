"""Epochs: with_epoch, with_length and repeat_epochs.

``with_epoch(n)`` yields exactly n items on every iteration (n smaller than the source, equal,
larger, zero), reading the source from its start each time and restarting it as needed, just as
webdataset's ``DataPipeline.with_epoch(n)`` does on the same source; a source that yields
nothing ends the epoch with a RuntimeWarning instead of spinning. ``with_length(n)`` changes
only ``len()``. ``repeat_epochs(k)`` concatenates k epochs, as webdataset's ``.repeat(k)``, or
runs without end for None. All three work over shards, in the ``DataPipeline`` vocabulary
(``with_epoch``, ``with_length``, ``repeat``), check their arguments, and pickle.
"""

from __future__ import annotations

import itertools
import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from shardgen import write_shards
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref


class Restarts(IterDataPipe[tuple[int, int]]):
    """Yields ``(start, i)`` for i < size, where ``start`` counts the times it was started:
    the output shows when, and how often, a stage restarted its source."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.starts = 0

    def __iter__(self) -> Iterator[tuple[int, int]]:
        start = self.starts
        self.starts += 1
        for i in range(self.size):
            yield start, i


class Empty(IterDataPipe[Any]):
    """Yields nothing; fails instead of letting a test spin if started too often."""

    def __init__(self) -> None:
        self.starts = 0

    def __iter__(self) -> Iterator[Any]:
        self.starts += 1
        if self.starts > 100:
            raise AssertionError("the empty source was restarted without end")
        yield from ()


def cycled(size: int, count: int) -> list[int]:
    return list(itertools.islice(itertools.cycle(range(size)), count))


def reference_pipeline(source: Any, *stages: Any) -> Any:
    return wdsref.DataPipeline(source, *stages)


# --- with_epoch -----------------------------------------------------------------------------

EPOCH_SIZES = [(5, 3), (5, 5), (5, 12), (1, 4), (3, 1), (5, 0)]


@pytest.mark.parametrize(
    ("size", "nitems"), EPOCH_SIZES, ids=[f"source{s}-epoch{n}" for s, n in EPOCH_SIZES]
)
def test_with_epoch_yields_exactly_n_each_iteration(size: int, nitems: int) -> None:
    pipe = IterableWrapper(range(size)).with_epoch(nitems)
    assert len(pipe) == nitems
    for _ in range(3):
        assert list(pipe) == cycled(size, nitems)


# n == 0 is left out: webdataset's with_epoch(0) means no limit, and its epoch never ends.
RESTART_SIZES = [(5, 3), (5, 5), (5, 12), (1, 4), (4, 8)]


@pytest.mark.parametrize(
    ("size", "nitems"), RESTART_SIZES, ids=[f"source{s}-epoch{n}" for s, n in RESTART_SIZES]
)
def test_with_epoch_restarts_the_source_as_webdataset(size: int, nitems: int) -> None:
    mine_source, their_source = Restarts(size), Restarts(size)
    mine = mine_source.with_epoch(nitems)
    reference = reference_pipeline(their_source).with_epoch(nitems)
    for _ in range(3):
        epoch = list(mine)
        assert epoch == list(reference)
        assert len(epoch) == nitems
        assert [i for _, i in epoch] == cycled(size, nitems)
    assert mine_source.starts == their_source.starts == 3 * -(-nitems // size)


def test_abandoned_epoch_does_not_shorten_the_next_as_webdataset() -> None:
    mine_source, their_source = Restarts(4), Restarts(4)
    mine = mine_source.with_epoch(6)
    reference = reference_pipeline(their_source).with_epoch(6)
    for pipe in (mine, reference):
        started = iter(pipe)
        assert [next(started) for _ in range(5)] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
        del started
    epoch = list(mine)
    assert epoch == list(reference) == [(2, 0), (2, 1), (2, 2), (2, 3), (3, 0), (3, 1)]


def test_with_epoch_over_shards(tmp_path: Path) -> None:
    """Over a real reader of 3 shards of 4 samples; abandoned shards leak no file (pytest
    turns a ResourceWarning into an error)."""
    urls = write_shards(tmp_path, 3, 4)
    keys = [f"{shard:03d}-{i:05d}" for shard in range(3) for i in range(4)]
    pipe = wds.WebDataset(urls).with_epoch(17)
    for _ in range(2):
        assert [sample["__key__"] for sample in pipe] == [keys[i % 12] for i in range(17)]
    started = iter(pipe)
    next(started)
    del started
    assert len(list(wds.WebDataset(urls).with_epoch(5))) == 5


# --- Empty sources --------------------------------------------------------------------------


@pytest.mark.parametrize("nitems", [1, 5])
def test_with_epoch_of_an_empty_source_warns_and_ends(nitems: int) -> None:
    source = Empty()
    with pytest.warns(RuntimeWarning, match="yielded no items"):
        assert list(source.with_epoch(nitems)) == []
    assert source.starts == 1


def test_with_epoch_of_a_source_that_runs_dry_warns_and_ends() -> None:
    """A one-shot source: its second epoch is empty, so the epoch ends short."""
    pipe = IterableWrapper(iter(range(3)), deepcopy=False).with_epoch(7)
    with pytest.warns(RuntimeWarning, match="yielded no items"):
        assert list(pipe) == [0, 1, 2]


@pytest.mark.parametrize("nepochs", [1, 3, None], ids=["1", "3", "endless"])
def test_repeat_epochs_of_an_empty_source_warns_and_ends(nepochs: int | None) -> None:
    source = Empty()
    with pytest.warns(RuntimeWarning, match="yielded no items"):
        assert list(source.repeat_epochs(nepochs)) == []
    assert source.starts == 1


def test_non_empty_source_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(IterableWrapper(range(3)).with_epoch(10))) == 10
        assert len(list(IterableWrapper(range(3)).repeat_epochs(4))) == 12


# --- with_length ----------------------------------------------------------------------------


@pytest.mark.parametrize("length", [0, 3, 10])
def test_with_length_sets_only_len(length: int) -> None:
    pipe = IterableWrapper(range(5)).with_length(length)
    assert len(pipe) == length
    assert list(pipe) == list(range(5))
    reference = reference_pipeline(IterableWrapper(range(5))).with_length(length, silent=True)
    assert len(reference) == length and list(reference) == list(pipe)


def test_with_length_gives_a_length_to_a_source_without_one() -> None:
    source = IterableWrapper(iter("abc"), deepcopy=False)
    with pytest.raises(TypeError):
        len(source)
    pipe = source.with_length(3)
    assert len(pipe) == 3 and list(pipe) == ["a", "b", "c"]


# --- repeat_epochs --------------------------------------------------------------------------


@pytest.mark.parametrize("nepochs", [0, 1, 2, 5])
def test_repeat_epochs_counts(nepochs: int) -> None:
    pipe = IterableWrapper(range(4)).repeat_epochs(nepochs)
    assert list(pipe) == list(range(4)) * nepochs
    assert len(pipe) == 4 * nepochs


# nepochs == 0 is left out: webdataset's repeat(0) means no end.
@pytest.mark.parametrize("nepochs", [1, 2, 5])
def test_repeat_epochs_restarts_the_source_as_webdataset(nepochs: int) -> None:
    mine_source, their_source = Restarts(3), Restarts(3)
    mine = mine_source.repeat_epochs(nepochs)
    reference = reference_pipeline(their_source).repeat(nepochs)
    for _ in range(2):
        epoch = list(mine)
        assert epoch == list(reference)
        assert len(epoch) == 3 * nepochs
    assert mine_source.starts == their_source.starts == 2 * nepochs


def test_repeat_epochs_none_is_endless() -> None:
    pipe = IterableWrapper(range(3)).repeat_epochs(None)
    assert list(itertools.islice(pipe, 100)) == cycled(3, 100)
    with pytest.raises(TypeError, match="no length"):
        len(pipe)
    assert list(itertools.islice(IterableWrapper(range(3)).repeat_epochs(), 7)) == cycled(3, 7)


def test_repeat_epochs_is_not_torchdata_repeat() -> None:
    """The functional name ``repeat_epochs`` repeats whole epochs, not each item."""
    assert list(IterableWrapper("ab").repeat_epochs(2)) == ["a", "b", "a", "b"]


# --- The DataPipeline vocabulary ------------------------------------------------------------

SAMPLES = [{"__key__": f"{i:04d}", "cls": i, "txt": f"text {i}"} for i in range(5)]


def values(item: Any) -> Any:
    if isinstance(item, torch.Tensor | np.ndarray | np.generic):
        return item.tolist()
    if isinstance(item, tuple | list):
        return [values(x) for x in item]
    return item


def test_datapipeline_with_epoch_of_batches_as_webdataset() -> None:
    pipe = wds.DataPipeline(
        IterableWrapper(SAMPLES), wds.to_tuple("cls", "txt"), wds.batched(2), wds.with_epoch(5)
    )
    reference = reference_pipeline(
        IterableWrapper(SAMPLES), wdsref.to_tuple("cls", "txt"), wdsref.batched(2)
    ).with_epoch(5)
    expected = [
        [[0, 1], ["text 0", "text 1"]],
        [[2, 3], ["text 2", "text 3"]],
        [[4], ["text 4"]],
        [[0, 1], ["text 0", "text 1"]],
        [[2, 3], ["text 2", "text 3"]],
    ]
    for _ in range(2):
        batches = list(pipe)
        assert all(isinstance(batch[0], torch.Tensor) for batch in batches)
        # Differs on purpose: webdataset's class columns are numpy arrays, ours tensors.
        assert values(batches) == values(list(reference)) == expected
    assert len(pipe) == 5


def test_datapipeline_repeat_and_with_length() -> None:
    repeated = wds.DataPipeline(IterableWrapper(SAMPLES), wds.to_tuple("cls"), wds.repeat(2))
    assert [c for (c,) in repeated] == [0, 1, 2, 3, 4] * 2
    endless = wds.DataPipeline(IterableWrapper(SAMPLES), wds.to_tuple("cls"), wds.repeat)
    assert [c for (c,) in itertools.islice(endless, 12)] == cycled(5, 12)
    sized = wds.DataPipeline(IterableWrapper(SAMPLES), wds.with_length(3))
    assert len(sized) == 3 and list(sized) == SAMPLES


# --- Arguments and pickling -----------------------------------------------------------------

BAD_ARGUMENTS = {
    "with_epoch-negative": (lambda p: p.with_epoch(-1), lambda: wds.with_epoch(-1), "nitems"),
    "with_epoch-float": (lambda p: p.with_epoch(2.5), lambda: wds.with_epoch(2.5), "nitems"),
    "with_epoch-none": (lambda p: p.with_epoch(None), lambda: wds.with_epoch(None), "nitems"),
    "with_length-negative": (
        lambda p: p.with_length(-1),
        lambda: wds.with_length(-1),
        "length",
    ),
    "repeat_epochs-negative": (lambda p: p.repeat_epochs(-1), lambda: wds.repeat(-1), "nepochs"),
    "repeat_epochs-float": (lambda p: p.repeat_epochs(1.5), lambda: wds.repeat(1.5), "nepochs"),
}


@pytest.mark.parametrize(
    ("build", "factory", "name"), list(BAD_ARGUMENTS.values()), ids=list(BAD_ARGUMENTS)
)
def test_bad_arguments_fail_when_built(build: Any, factory: Any, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        build(IterableWrapper(range(3)))
    with pytest.raises((ValueError, TypeError), match=name):
        wds.DataPipeline(IterableWrapper(range(3)), factory())


PICKLED = {
    "with_epoch": lambda p: p.with_epoch(11),
    "with_length": lambda p: p.with_length(2),
    "repeat_epochs": lambda p: p.repeat_epochs(3),
    "datapipeline": lambda p: wds.DataPipeline(p, wds.repeat(2), wds.with_epoch(7)),
}


@pytest.mark.parametrize("build", list(PICKLED.values()), ids=list(PICKLED))
def test_stage_pickles_and_yields_the_same(build: Any) -> None:
    pipe = build(IterableWrapper(range(4)))
    clone = pickle.loads(pickle.dumps(pipe))
    assert type(clone) is type(pipe)
    assert list(clone) == list(pipe) != []
    assert len(clone) == len(pipe)
