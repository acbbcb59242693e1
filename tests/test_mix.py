"""Mixing datasets (wdspipes/samples/mix.py): ``RoundRobin``/``interleave`` and
``RandomMix``/``interleave_randomly`` against webdataset 1.0.2's on the same sources: the
round robin's order is the same; the random mix draws the same sequence once its generator is
aligned with webdataset's (which draws from Python's global ``random``: seeded here with the
material of our epoch's generator), stops by the same rule and keeps the proportions. Both
resume mid-epoch (the shared test runs their examples in tests/stage_examples.py; the cases
here are those whose epochs differ in length)."""

from __future__ import annotations

import itertools
import pickle
import random
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from shardgen import Shards
from stage_examples import samples
from test_stage_state import assert_resumes_exactly, resumed, uninterrupted
from torch.utils.data import DataLoader, IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes.core.context import EpochContext
from wdspipes.errors import ResumeError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref


def sources(*lengths: int) -> list[list[str]]:
    """One list per length, its items named by source and position."""
    return [
        [f"{chr(97 + index)}{n}" for n in range(length)] for index, length in enumerate(lengths)
    ]


LENGTHS = [(3, 3), (2, 5), (5, 2), (4, 1, 6), (1,), (0, 3), (3, 0)]


@pytest.mark.parametrize("longest", [False, True])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_round_robin_order_is_webdatasets(lengths: tuple[int, ...], longest: bool) -> None:
    theirs = list(wdsref.RoundRobin(sources(*lengths), longest=longest))
    ours = wds.RoundRobin(sources(*lengths), longest=longest)
    assert list(ours) == theirs
    assert len(ours) == len(theirs)
    first, *others = [IterableWrapper(items) for items in sources(*lengths)]
    assert list(first.interleave(*others, longest=longest)) == theirs


def test_round_robin_of_datasets_read_from_shards(small_shards: Shards) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = [
            s["__key__"]
            for s in wdsref.RoundRobin(
                [
                    wdsref.WebDataset(small_shards.paths[:1], shardshuffle=False),
                    wdsref.WebDataset(small_shards.paths[1:], shardshuffle=False),
                ],
                longest=True,
            )
        ]
    ours = wds.RoundRobin(
        [wds.WebDataset(small_shards.paths[:1]), wds.WebDataset(small_shards.paths[1:])],
        longest=True,
    )
    assert [s["__key__"] for s in ours] == theirs
    assert len(theirs) == 20


def aligned_reference(
    lists: list[list[str]], probs: list[float] | None, longest: bool, material: tuple[Any, ...]
) -> list[str]:
    """webdataset's RandomMix, its global generator seeded as our epoch's first block of draws
    (tests/test_mix.py's docstring), the generator's state kept for other tests."""
    saved = random.getstate()
    try:
        random.seed(repr((material, 0)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its 0/0 once only weights of 0 are left
            return list(wdsref.RandomMix([list(i) for i in lists], probs, longest=longest))
    finally:
        random.setstate(saved)


@pytest.mark.parametrize("longest", [False, True])
@pytest.mark.parametrize(
    ("lengths", "probs"),
    [((40, 40), None), ((50, 20, 30), [0.5, 0.2, 0.3]), ((100, 10), [1, 3]), ((30, 30), [1, 0])],
)
def test_random_mix_draws_webdatasets_sequence_with_the_same_generator(
    lengths: tuple[int, ...], probs: list[float] | None, longest: bool
) -> None:
    ours = wds.RandomMix(sources(*lengths), probs, longest=longest, seed=11)
    got = list(ours)
    material = EpochContext(epoch=0).material(11)  # its first epoch's, in one reader
    expected = aligned_reference(sources(*lengths), probs, longest, material)
    if longest and probs is not None and 0 in probs:
        # webdataset draws a source of weight 0 once all others ran out (0/0 is nan, and
        # searchsorted gives 0): wdspipes ends there
        assert got == [item for item in expected if item[0] != "b"]
    else:
        assert got == expected
    assert len(got) > 10


def test_random_mix_stops_where_a_drawn_source_runs_out() -> None:
    """The rule, unaligned: with no ``longest``, the epoch ends at the first draw of a source
    that has run out, so that source is the only one read whole (for either library)."""
    lists = sources(20, 200, 200)
    ours = list(wds.RandomMix(lists, [1, 1, 1], seed=3))
    theirs = list(wdsref.RandomMix(lists, [1, 1, 1]))
    for got in (ours, theirs):
        counts = Counter(item[0] for item in got)
        assert counts["a"] == 20 and counts["b"] < 200 and counts["c"] < 200
    longest = list(wds.RandomMix(lists, [1, 1, 1], longest=True, seed=3))
    assert sorted(longest) == sorted(itertools.chain(*lists))


def test_random_mix_keeps_the_proportions() -> None:
    lists = sources(20000, 20000, 20000)
    draws = Counter(item[0] for item in wds.RandomMix(lists, [0.6, 0.3, 0.1], seed=5))
    total = sum(draws.values())
    for name, share in zip("abc", [0.6, 0.3, 0.1], strict=True):
        assert abs(draws[name] / total - share) < 0.02, (name, draws)


def test_random_mix_is_reproducible_and_new_each_epoch() -> None:
    lists = sources(30, 30)
    mixed = wds.RandomMix(lists, seed=7)
    first, second = list(mixed), list(mixed)
    again = wds.RandomMix(lists, seed=7)
    assert [list(again), list(again)] == [first, second]
    assert first != second
    loader_seeded = wds.RandomMix(lists)
    loader_seeded.set_seed(1)
    other = wds.RandomMix(lists)
    other.set_seed(1)
    assert list(loader_seeded) == list(other)


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match=r"one weight per source \(2\), got 3"):
        wds.RandomMix(sources(1, 1), [1, 2, 3])
    with pytest.raises(ValueError, match="at least 0, got -1"):
        wds.RandomMix(sources(1, 1), [1, -1])
    with pytest.raises(ValueError, match="must not all be 0"):
        wds.RandomMix(sources(1, 1), [0, 0])
    pipe = IterableWrapper([1, 2])
    with pytest.raises(ValueError, match="the same stage is given twice"):
        pipe.interleave(pipe)
    with pytest.raises(ValueError, match="at least one dataset"):
        wds.RoundRobin([])
    with pytest.raises(TypeError, match="no length without longest=True"):
        len(wds.RandomMix(sources(1, 1)))


# --- resuming --------------------------------------------------------------------------------


def mixed_samples(urls: list[str], mix: Callable[..., IterDataPipe[Any]]) -> IterDataPipe[Any]:
    first = wds.WebDataset(urls[:2], shardshuffle=True, seed=1)
    second = samples(urls[2:]).buffer_shuffle(4, initial=2)
    return mix(first, second).map_dict(txt=bytes.decode)


MIXES: dict[str, Callable[..., IterDataPipe[Any]]] = {
    "round robin, shortest": lambda a, b: a.interleave(b),
    "random, shortest": lambda a, b: a.interleave_randomly(b, probs=[1, 3]),
    "random, seeded": lambda a, b: wds.RandomMix([a, b], probs=[2, 1], seed=4),
    "random, longest": lambda a, b: wds.RandomMix([a, b], longest=True),
}


@pytest.mark.parametrize("name", list(MIXES))
def test_a_mix_resumes_exactly(name: str, stage_shards: Shards) -> None:
    """At cuts across an epoch, including its end, where a shortest mix has left a source
    part-read (a restored state must not go on with it in the next epoch)."""
    epochs = 2 if name in ("round robin, shortest", "random, longest") else 1  # same lengths
    assert_resumes_exactly(lambda: mixed_samples(stage_shards.paths, MIXES[name]), epochs=epochs)


def test_a_mix_resumes_in_later_epochs(stage_shards: Shards) -> None:
    """A shortest random mix, whose epochs differ in length: states taken all through three
    epochs, and at each epoch's end."""
    build = lambda: mixed_samples(stage_shards.paths, MIXES["random, shortest"])  # noqa: E731
    expected = uninterrupted(build, 3)
    assert len({len(epoch) for epoch in expected}) > 1, "the example's epochs differ in length"
    ends = list(itertools.accumulate(len(epoch) for epoch in expected))
    cuts = [(cut, False) for cut in range(0, ends[-1], 2)] + [(end, True) for end in ends]
    for cut in cuts:
        got, _ = resumed(build, cut, 3)
        assert got == expected, f"cut {cut}"


def test_a_buffer_after_a_mix_is_refused_by_name(stage_shards: Shards) -> None:
    pipe = samples(stage_shards.paths[:2]).interleave(samples(stage_shards.paths[2:]))
    shuffled = pipe.buffer_shuffle(4, initial=2)
    items = iter(shuffled)
    next(items)
    with pytest.raises(ResumeError, match=r"Interleaver \(interleave\) between it and the reader"):
        shuffled.state_dict()


def test_a_source_that_cannot_resume_is_named(stage_shards: Shards) -> None:
    pipe = wds.RoundRobin([IterableWrapper([1, 2]), samples(stage_shards.paths)])
    next(iter(pipe))
    with pytest.raises(ResumeError, match="IterableWrapperIterDataPipe, at the end"):
        pipe.state_dict()


@pytest.mark.loaders
def test_mixed_datasets_split_among_workers_read_every_sample_once(small_shards: Shards) -> None:
    mixed = wds.RandomMix(
        [wds.WebDataset(small_shards.paths[:2]), wds.WebDataset(small_shards.paths[2:])],
        longest=True,
    )
    loader = DataLoader(mixed, batch_size=None, num_workers=2)
    keys = sorted(sample["__key__"] for sample in loader)
    assert keys == sorted(s["__key__"] for s in wds.WebDataset(small_shards.paths))


def test_a_mixers_state_does_not_change_as_its_epoch_goes_on(stage_shards: Shards) -> None:
    """The state shared its list of the sources still read with the running epoch: one kept in
    memory (not pickled at once) lost the sources that ran out after it was taken."""
    pipe = samples(stage_shards.paths[:1]).interleave(samples(stage_shards.paths[1:]), longest=True)
    items = iter(pipe)
    next(items)
    state = pipe.state_dict()
    kept = pickle.dumps(state)
    assert len(list(items)) == 11
    assert pickle.dumps(state) == kept
