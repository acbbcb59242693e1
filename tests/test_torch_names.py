"""The names torch and torchdata own, called webdataset's way (wdspipes/webdataset/torch_names.py).

On a wdspipes stage, a call only webdataset's signature takes does what webdataset 1.0.2's does
on the same items
(``.shuffle(n)`` a shuffle buffer of n, with the same schedule: proven with both libraries'
draws scripted alike; ``.map(f, handler=h)``; ``.repeat()`` and its keywords); a torch-style
call is torch's stage, unchanged; torch's own DataPipes and torch's registry of functional
names keep torch's meanings (nothing of torch is changed by importing wdspipes); a call both take
that would do something else on a wdspipes pipeline warns (``TorchNameWarning``) or, where
torchdata's stage is not registered, fails, naming the wdspipes method.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper, Mapper, Shuffler

import wdspipes as wds
from wdspipes.loaders import dataloader2
from wdspipes.pipes import BufferShuffler, EpochRepeater
from wdspipes.samples.shuffle import Draws

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref

SAMPLES = [{"__key__": f"{n:03d}", "n": n} for n in range(40)]


def wds_samples() -> IterDataPipe[dict[str, Any]]:
    """A wdspipes pipeline of samples (a wdspipes stage on torch's IterableWrapper)."""
    return IterableWrapper(SAMPLES).islice(None)


def their_pipeline(*stages: Any) -> list[Any]:
    return list(wdsref.DataPipeline(lambda: iter(SAMPLES), *stages))


# shuffle


def test_torch_style_shuffle_is_torchs_shuffler_on_every_pipeline() -> None:
    for pipe in (IterableWrapper(range(5)), wds_samples()):
        assert type(pipe.shuffle()) is Shuffler
        shuffler = pipe.shuffle(buffer_size=3)
        assert type(shuffler) is Shuffler and shuffler.buffer_size == 3


def test_torchs_own_datapipes_and_registry_keep_torchs_meanings() -> None:
    """The calls are methods of wdspipes' stages: torch's functional names are torch's own."""
    for name in ("shuffle", "map"):
        assert IterDataPipe.functions[name].args[0] in (Shuffler, Mapper)  # torch's partial
    assert type(IterDataPipe.functions) is dict
    shuffle = IterableWrapper(range(5)).shuffle  # torch's, which takes no positional size
    assert shuffle.func is IterDataPipe.functions["shuffle"]  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="handler"):
        IterableWrapper(SAMPLES).map(odd_or_none, handler=wds.ignore_and_continue)
    assert type(IterableWrapper(range(5)).map(str).shuffle()) is Shuffler


def test_shuffle_with_a_size_is_webdatasets_buffer() -> None:
    pipe = wds_samples()
    shuffler = pipe.shuffle(7)
    assert isinstance(shuffler, BufferShuffler)
    assert (shuffler.bufsize, shuffler.initial, shuffler.source_datapipe) == (7, 7, pipe)
    shuffler = pipe.shuffle(300, initial=20, seed=3, handler=wds.warn_and_continue)
    assert (shuffler.bufsize, shuffler.initial) == (300, 20)
    assert list(shuffler) == list(pipe.shuffle(size=300, initial=20, seed=3))
    assert pipe.shuffle(0) is pipe and pipe.shuffle(-1) is pipe  # webdataset: no shuffle


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: p.shuffle(10, rng="7"), r"rng must be a random\.Random"),
        (lambda p: p.shuffle(10, buffer_size=4), "buffer_size"),
        (lambda p: p.shuffle(True), "size must be an int"),
        (lambda p: p.shuffle(2.5), "size must be an int"),
    ],
)
def test_shuffle_with_a_size_refuses_what_it_cannot_do(call: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call(wds_samples())


class Scripted:
    """Both libraries' draws, scripted alike: the n-th draw from a buffer of ``size`` items is
    ``(7 n + 3) % size``."""

    def __init__(self) -> None:
        self.count = 0

    def below(self, size: int) -> int:
        index = (7 * self.count + 3) % size
        self.count += 1
        return index

    def randint(self, low: int, high: int) -> int:  # webdataset's pick(): randint(0, len - 1)
        return low + self.below(high - low + 1)


@pytest.mark.parametrize(("size", "initial", "count"), [(10, 100, 40), (10, 3, 40), (64, 5, 40)])
def test_shuffle_with_a_size_has_webdatasets_schedule(
    size: int, initial: int, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours_script = Scripted()
    monkeypatch.setattr(Draws, "below", lambda self, n: ours_script.below(n))
    ours = list(IterableWrapper(range(count)).islice(None).shuffle(size, initial=initial))
    theirs = list(wdsref.filters._shuffle(iter(range(count)), size, initial, rng=Scripted()))
    assert ours == theirs
    assert sorted(ours) == list(range(count)) and ours != list(range(count))


def consumed_when_yielded(pipe_of: Any, count: int) -> list[int]:
    """For each item the shuffle yields, how many items it had read from its source then."""
    read = [0]

    def source() -> Iterator[int]:
        for n in range(count):
            read[0] = n + 1
            yield n

    return [read[0] for _ in pipe_of(source)]


@pytest.mark.parametrize(("size", "initial"), [(10, 100), (50, 5)])
def test_shuffle_with_a_size_holds_as_many_items_as_webdatasets(size: int, initial: int) -> None:
    """With real draws (the generators differ): the same number of items read before each
    item comes out, and orders that are permutations, other each epoch."""
    ours = consumed_when_yielded(
        lambda src: (
            IterableWrapper(src(), deepcopy=False).islice(None).shuffle(size, initial=initial)
        ),
        200,
    )
    theirs = consumed_when_yielded(lambda src: wdsref.filters._shuffle(src(), size, initial), 200)
    assert ours == theirs
    pipe = IterableWrapper(range(200)).islice(None).shuffle(size)
    first, second = list(pipe), list(pipe)
    assert sorted(first) == list(range(200)) and first != second


def test_shuffle_with_a_size_pickles_and_resumes_as_a_buffer_shuffle(tmp_path: Any) -> None:
    pipe = wds_samples().shuffle(8, seed=1)
    copy = pickle.loads(pickle.dumps(pipe))
    assert isinstance(copy, BufferShuffler) and list(copy) == list(pipe)


# map


def odd_or_none(sample: dict[str, Any]) -> dict[str, Any] | None:
    return sample if sample["n"] % 2 else None


def with_mark(sample: dict[str, Any]) -> dict[str, Any]:
    return {**sample, "m": 1}


def without_key(sample: dict[str, Any]) -> dict[str, Any]:
    return {"n": sample["n"] * 10}


def fails_on_seven(sample: dict[str, Any]) -> dict[str, Any]:
    if sample["n"] == 7:
        raise ValueError("seven")
    return sample


@pytest.mark.parametrize("fn", [odd_or_none, without_key, fails_on_seven])
def test_map_with_a_handler_is_webdatasets_map(fn: Any) -> None:
    ours = list(wds_samples().map(fn, handler=wds.ignore_and_continue))
    assert ours == their_pipeline(wdsref.map(fn, handler=wdsref.ignore_and_continue))


def test_torch_style_map_is_torchs_mapper_and_warns_where_webdatasets_would_differ() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = IterableWrapper(SAMPLES).map(odd_or_none)  # a torch pipeline: not a word
        assert type(plain) is Mapper and list(plain).count(None) == 20
        kept = wds_samples().map(with_mark)  # keeps the key: not a word
        assert type(kept) is Mapper and len(list(kept)) == 40
    for fn, warning in ((odd_or_none, "returned None"), (without_key, "without the sample")):
        mapper = wds_samples().map(fn)
        assert type(mapper) is Mapper
        with pytest.warns(wds.TorchNameWarning, match=f"{warning}.*map_samples") as caught:
            items = list(mapper)
        assert len(caught) == 1  # once
        assert items == [fn(sample) for sample in SAMPLES]  # torch's meaning, unchanged
    columns = wds_samples().map(odd_or_none, input_col="n", output_col="m")
    assert type(columns) is Mapper  # torch's own arguments: its own function


def test_a_watched_torch_map_pickles() -> None:
    mapper = wds_samples().map(without_key)
    copy = pickle.loads(pickle.dumps(mapper))
    with pytest.warns(wds.TorchNameWarning):
        assert list(copy) == [without_key(sample) for sample in SAMPLES]


# slice and repeat: torchdata's, registered once torchdata.datapipes is imported


@pytest.fixture
def without_torchdata(monkeypatch: pytest.MonkeyPatch) -> None:
    """As after ``import wdspipes`` alone: torchdata's slice and repeat not registered."""
    for name in ("slice", "repeat"):
        monkeypatch.delitem(IterDataPipe.functions, name, raising=False)


DATAPIPES = pytest.mark.dataloader2  # torchdata.datapipes: 0.8 and 0.9 only, as DataLoader2


@pytest.fixture
def with_torchdata() -> None:
    dataloader2()  # imports torchdata.datapipes, which registers them


def test_slice_without_torchdata_names_islice(without_torchdata: None) -> None:
    with pytest.raises(AttributeError, match=r"no attribute 'slice'.*\.islice\(\.\.\.\)"):
        wds_samples().slice(5)
    with pytest.raises(AttributeError, match=r"no attribute 'slice$"):
        IterableWrapper(SAMPLES).slice(5)  # not a wdspipes stage: torch's own message


@DATAPIPES
def test_slice_with_torchdata_is_torchdatas_and_warns_on_a_wdspipes_pipeline(
    with_torchdata: None,
) -> None:
    with pytest.warns(wds.TorchNameWarning, match=r"\.islice\(0, 2\)"):
        sliced = IterableWrapper([(1, 2, 3)]).islice(None).slice(0, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = IterableWrapper([(1, 2, 3)]).slice(0, 2)
    assert list(plain) == [(1, 2)] and type(sliced) is type(plain)


REPEATS = [
    ((), {"nepochs": 2}),
    ((), {"nepochs": 3, "nbatches": 50}),
    ((3, 50), {}),
    ((1,), {}),
    ((1,), {"nbatches": 10}),  # webdataset: nbatches is ignored with one epoch
]


@pytest.mark.parametrize("torchdata", ["without", pytest.param("with", marks=DATAPIPES)])
@pytest.mark.parametrize(("args", "kwargs"), REPEATS)
def test_repeat_in_webdatasets_forms_is_webdatasets(
    args: tuple[int, ...], kwargs: dict[str, int], torchdata: str, request: pytest.FixtureRequest
) -> None:
    request.getfixturevalue(f"{torchdata}_torchdata")
    theirs = wdsref.DataPipeline(lambda: iter(SAMPLES)).repeat(*args, **kwargs)
    assert list(wds_samples().repeat(*args, **kwargs)) == list(theirs)


@pytest.mark.parametrize("torchdata", ["without", pytest.param("with", marks=DATAPIPES)])
def test_repeat_without_end_is_webdatasets(torchdata: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(f"{torchdata}_torchdata")
    for forever in (wds_samples().repeat(), wds_samples().repeat(0), wds_samples().repeat(-1)):
        assert isinstance(forever, EpochRepeater) and forever.nepochs is None
        assert list(forever.with_epoch(100))[40:80] == SAMPLES


def test_repeat_n_without_torchdata_names_repeat_epochs(without_torchdata: None) -> None:
    with pytest.raises(TypeError, match=r"\.repeat_epochs\(2\)"):
        wds_samples().repeat(2)


@DATAPIPES
def test_repeat_n_with_torchdata_is_torchdatas_and_warns_on_a_wdspipes_pipeline(
    with_torchdata: None,
) -> None:
    with pytest.warns(wds.TorchNameWarning, match=r"\.repeat_epochs\(2\)"):
        repeated = wds_samples().repeat(2)
    assert [s["n"] for s in repeated][:4] == [0, 0, 1, 1]  # torchdata's: each item twice
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(IterableWrapper("ab").repeat(2)) == ["a", "a", "b", "b"]
