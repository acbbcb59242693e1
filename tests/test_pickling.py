"""Stages take lambdas and closures wherever torch's own ``.map(lambda)`` does
(``wdspipes/pipes/pickling.py``): no pickling without worker processes, dill where pickling is
needed and dill is installed, else an error naming the stage, the function and the fix.

dill is not installed in the test environment (requirements/dev.txt): where a test needs it,
:class:`FakeDill` stands in for it, keeping what it is given in this process.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import operator
import pickle
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from torch.utils.data import DataLoader, IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.graph import traverse_dps
from torch.utils.data.graph_settings import get_all_graph_pipes

import wdspipes as wds
from wdspipes.pipes import pickling

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=r"(?s).*deprecated", category=UserWarning)
    with contextlib.suppress(ImportError):  # torchdata 0.10+: tests marked dataloader2 skip
        from torchdata.dataloader2 import DataLoader2

Build = Callable[[IterDataPipe[Any]], IterDataPipe[Any]]


def samples() -> IterDataPipe[dict[str, Any]]:
    return IterableWrapper(
        [{"__key__": f"{i:02d}", "cls": str(i).encode(), "txt": b"t" * i} for i in range(4)]
    )


# Each stage that takes a function, given a lambda or a closure, and what it yields.
offset = 10
STAGES: dict[str, tuple[Build, list[Any]]] = {
    "map_tuple": (
        lambda src: src.to_tuple("cls", "txt").map_tuple(lambda x: int(x) + offset, len),
        [(10, 0), (11, 1), (12, 2), (13, 3)],
    ),
    "map_dict": (
        lambda src: src.map_dict(cls=lambda x: int(x) * 2).to_tuple("cls"),
        [(0,), (2,), (4,), (6,)],
    ),
    "decode handler": (
        lambda src: src.decode(lambda key, data: len(data) if key == ".txt" else None).to_tuple(
            "cls", "txt"
        ),
        [(0, 0), (1, 1), (2, 2), (3, 3)],
    ),
    "decode handle_extension": (
        lambda src: src.decode(wds.handle_extension("cls", lambda data: -int(data))).to_tuple(
            "cls"
        ),
        [(0,), (-1,), (-2,), (-3,)],
    ),
    "map_samples": (
        lambda src: src.map_samples(lambda s: s["__key__"] if s["cls"] != b"1" else None),
        ["00", "02", "03"],
    ),
    "select": (
        lambda src: src.select(lambda s: int(s["cls"]) % 2 == 1).to_tuple("cls"),
        [(b"1",), (b"3",)],
    ),
    "batched collation_fn": (
        lambda src: src.batched(3, collation_fn=lambda batch: [s["__key__"] for s in batch]),
        [["00", "01", "02"], ["03"]],
    ),
    "to_tuple handler": (
        lambda src: src.map_dict(txt=lambda t: t or None, handler=lambda e: True).to_tuple(
            "txt", handler=lambda error: isinstance(error, wds.MissingFieldError)
        ),
        [(b"t",), (b"tt",), (b"ttt",)],
    ),
    "rename handler": (
        lambda src: src.map_samples(
            lambda s: {f: v.upper() for f, v in s.items() if v != b""}
        ).rename(text="txt", handler=lambda e: True),
        [{"__key__": f"{i:02d}", "cls": str(i).encode(), "text": b"T" * i} for i in range(1, 4)],
    ),
    "DataPipeline function stage": (
        lambda src: wds.DataPipeline(src, lambda items: (s["__key__"] for s in items)),
        ["00", "01", "02", "03"],
    ),
}


def same(items: Any) -> Any:
    """A DataLoader collate_fn that leaves items as they are (tuples stay tuples)."""
    return items


@pytest.mark.filterwarnings("ignore:Local function is not supported by pickle")
@pytest.mark.parametrize("stage", list(STAGES))
def test_lambdas_under_dataloader_without_workers(stage: str) -> None:
    build, expected = STAGES[stage]
    reference = samples().map(lambda s: s["__key__"])  # torch's own stage with a lambda
    assert list(DataLoader(reference, batch_size=None, num_workers=0)) == ["00", "01", "02", "03"]
    pipe = build(samples())
    assert list(pipe) == expected
    assert list(DataLoader(pipe, batch_size=None, collate_fn=same, num_workers=0)) == expected
    assert list(DataLoader(pipe, batch_size=None, collate_fn=same)) == expected  # epoch two


def test_lambdas_in_a_shard_pipeline_under_dataloader(tmp_path: Any) -> None:
    # the opener's split check traverses the graph from the opener up, the loader from the end
    with wds.ShardWriter(str(tmp_path / "s-%d.tar"), maxcount=2) as sink:
        for index in range(5):
            sink.write({"__key__": f"{index:02d}", "cls": index, "txt": "x" * index})
    pipe = (
        wds.WebDataset(sink.shards)
        .decode(wds.handle_extension("txt", lambda data: data.decode().upper()))
        .to_tuple("cls", "txt")
        .map_tuple(lambda c: c * offset, None)
    )
    expected = [(i * 10, "X" * i) for i in range(5)]
    assert list(DataLoader(pipe, batch_size=None, collate_fn=same, num_workers=0)) == expected


@pytest.mark.loaders
def test_lambdas_under_dataloader_with_forked_workers() -> None:
    # fork copies the pipeline into the workers: nothing is pickled, as for torch's .map
    pipe = (
        samples()
        .sharding_filter()
        .decode(wds.handle_extension("cls", lambda data: int(data)))
        .map_dict(txt=lambda t: len(t))
        .select(lambda s: s["cls"] != 2)
        .to_tuple("cls", "txt")
        .map_tuple(lambda c: c + offset)
    )
    loader = DataLoader(
        pipe, batch_size=None, collate_fn=same, num_workers=2, multiprocessing_context="fork"
    )
    assert sorted(loader) == [(10, 0), (11, 1), (13, 3)]


def test_the_graph_walk_pickles_no_function() -> None:
    build, _ = STAGES["map_tuple"]
    pipe = build(samples()).map_dict(**{"0": lambda x: x}).decode(lambda k, d: None)
    found = {type(dp).__name__ for dp in get_all_graph_pipes(traverse_dps(pipe))}
    stages = {"TupleMaker", "TupleMapper", "FieldMapper", "SampleDecoder"}
    assert found == {"IterableWrapperIterDataPipe", *stages}


@pytest.mark.parametrize(
    ("stage", "where", "function"),
    [
        ("map_tuple", "map_tuple (TupleMapper) cannot send fns[0]", "<lambda>"),
        ("map_dict", "map_dict (FieldMapper) cannot send fns['cls']", "<lambda>"),
        ("decode handler", "decode (SampleDecoder) cannot send handlers[0]", "<lambda>"),
        (
            "decode handle_extension",
            "decode (SampleDecoder) cannot send handlers[0]",
            "ExtensionHandler",
        ),
        ("map_samples", "map_samples (SampleMapper) cannot send fn", "<lambda>"),
        ("select", "select (SampleSelector) cannot send predicate", "<lambda>"),
        ("batched collation_fn", "batched (Batcher) cannot send collation_fn", "<lambda>"),
        ("DataPipeline function stage", "IteratorStage cannot send fn", "<lambda>"),
    ],
)
def test_pickling_without_dill_names_the_stage_and_the_fix(
    stage: str, where: str, function: str
) -> None:
    pipe = STAGES[stage][0](samples())
    with pytest.raises(pickle.PicklingError) as caught:
        pickle.dumps(pipe)
    message = str(caught.value)
    if function == "<lambda>":  # a lambda in a lambda of STAGES
        function = "<lambda>.<locals>.<lambda>"
    assert message.startswith(f"{where} ({function}) to a worker process: ")
    assert "Define it at module level" in message
    assert "install dill (pip install dill)" in message
    assert isinstance(caught.value.__cause__, (pickle.PicklingError, AttributeError))


def local_function() -> Callable[[Any], Any]:
    def plus_one(value: Any) -> Any:
        return value + 1

    return plus_one


def test_a_closure_is_named_by_its_qualified_name() -> None:
    pipe = IterableWrapper([(1,)]).map_tuple(local_function())
    with pytest.raises(pickle.PicklingError, match=r"fns\[0\] \(local_function.<locals>"):
        pickle.dumps(pipe)


def test_module_level_functions_pickle_as_before() -> None:
    pipe = (
        samples()
        .map_dict(cls=int)
        .to_tuple("cls", "txt")
        .map_tuple(functools.partial(operator.add, 1), len)
    )
    copied = pickle.loads(pickle.dumps(pipe))
    assert list(copied) == list(pipe) == [(1, 0), (2, 1), (3, 2), (4, 3)]
    assert copied.fns[0].func is operator.add  # the functions themselves, no wrapper


def test_copies_keep_the_functions_themselves() -> None:
    pipe = STAGES["map_dict"][0](samples())
    mapper = pipe.source_datapipe
    for copied in (copy.copy(mapper), copy.deepcopy(mapper)):
        assert isinstance(copied.fns["cls"], type(lambda: 0))
        assert list(copied.to_tuple("cls")) == STAGES["map_dict"][1]


_HELD: dict[bytes, Any] = {}


class FakeDill:
    """dill's ``dumps`` and ``loads`` for one process: keeps the object, pickles nothing."""

    @staticmethod
    def dumps(value: Any) -> bytes:
        token = f"dill-{id(value)}".encode()
        _HELD[token] = value
        return token

    @staticmethod
    def loads(token: bytes) -> Any:
        return _HELD[token]


@pytest.fixture
def fake_dill(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pickling, "dill_module", lambda: FakeDill)


@pytest.mark.parametrize("stage", list(STAGES))
def test_with_dill_functions_pickle_through_it(stage: str, fake_dill: None) -> None:
    build, expected = STAGES[stage]
    pipe = build(samples())
    data = pickle.dumps(pipe)
    assert b"dill-" in data  # the lambda went through dill
    assert list(pickle.loads(data)) == expected


@pytest.mark.dataloader2
@pytest.mark.filterwarnings("ignore:Local function is not supported by pickle")
def test_dataloader2_without_workers() -> None:
    # DataLoader2 pickles its graph as it starts: without dill torch's own .map(lambda)
    # fails there too; wdspipes' error names the stage and the fix
    with pytest.raises(AttributeError, match="Can't pickle local object"):
        DataLoader2(samples().map(lambda s: s))
    build, _ = STAGES["map_tuple"]
    with pytest.raises(pickle.PicklingError, match=re.escape("map_tuple (TupleMapper) cannot")):
        DataLoader2(build(samples()))


@pytest.mark.dataloader2
def test_dataloader2_without_workers_with_dill(fake_dill: None) -> None:
    build, expected = STAGES["map_tuple"]
    loader = DataLoader2(build(samples()))
    try:
        assert list(loader) == expected
    finally:
        loader.shutdown()


@pytest.mark.loaders
@pytest.mark.filterwarnings("ignore:Got pickle error when attempting to start a worker")
def test_spawned_workers_without_dill_get_the_error() -> None:
    build, _ = STAGES["map_dict"]
    loader = DataLoader(
        build(samples()), batch_size=None, num_workers=1, multiprocessing_context="spawn"
    )
    with pytest.raises(pickle.PicklingError, match=re.escape("map_dict (FieldMapper) cannot")):
        next(iter(loader))
