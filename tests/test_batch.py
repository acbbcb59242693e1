"""Batching: batched() and unbatched(), and the collation behind them.

``batched`` groups as webdataset's ``batched`` does (partial or not, sizes that do not divide
the stream, ``collation_fn=None``, tuple and dict samples) and collates to the same values,
with the documented differences: numbers and numpy arrays become torch tensors (webdataset:
numpy arrays), and dict batches keep the samples' field order (webdataset's comes from a set).
Tensors and arrays are stacked with their dtypes, numbers get torch's dtypes, other values are
lists; what cannot be batched is a ``CollationError`` naming the field. ``unbatched`` undoes
``batched``, and both work in a ``DataPipeline`` and pickle.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from reference import quietly, wdsref
from shardgen import write_shards
from torch.utils.data import DataLoader
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds

# Seven samples, so that batch sizes 2, 3 and 5 leave a partial batch.
TUPLES = [
    (
        i,  # int
        i / 4,  # float
        f"text {i}",  # str
        np.full((2, 3), i, dtype=np.float32),  # numpy array
        torch.full((4,), i, dtype=torch.int32),  # tensor
        i % 3 == 0,  # bool
    )
    for i in range(7)
]

DICTS = [
    {
        "__key__": f"{i:04d}",
        "cls": i,
        "score": i / 4,
        "txt": f"text {i}",
        "npy": np.arange(3, dtype=np.int16) + i,
        "pt": torch.ones(2, 2) * i,
        "flag": i % 3 == 0,
    }
    for i in range(7)
]

SAMPLES = {"tuples": TUPLES, "dicts": DICTS}


def values(item: Any) -> Any:
    """Plain Python values: tensors, arrays and numpy scalars as (nested) lists or numbers."""
    if isinstance(item, torch.Tensor | np.ndarray | np.generic):
        return item.tolist()
    if isinstance(item, tuple | list):
        return [values(x) for x in item]
    if isinstance(item, dict):
        return {k: values(v) for k, v in item.items()}
    return item


def assert_same_column(mine: Any, reference: Any) -> None:
    if isinstance(reference, np.ndarray):
        # Differs on purpose: webdataset leaves numbers and numpy arrays as numpy arrays.
        assert isinstance(mine, torch.Tensor)
        assert mine.dtype == torch.from_numpy(reference).dtype
        np.testing.assert_array_equal(mine.numpy(), reference)
    elif isinstance(reference, torch.Tensor):
        assert isinstance(mine, torch.Tensor) and mine.dtype == reference.dtype
        assert torch.equal(mine, reference)
    else:
        assert isinstance(mine, list) and mine == reference


def assert_same_batch(mine: Any, reference: Any, first_sample: Any) -> None:
    if isinstance(reference, dict):
        # webdataset orders a dict batch's fields by a set; ours keeps the samples' order.
        assert isinstance(mine, dict) and list(mine) == list(first_sample)
        assert set(mine) == set(reference)
    else:
        assert isinstance(mine, tuple) and len(mine) == len(reference)
        reference = dict(enumerate(reference))
        mine = dict(enumerate(mine))
    for field, column in reference.items():
        assert_same_column(mine[field], column)


# --- Differential: batched as webdataset's --------------------------------------------------


@pytest.mark.parametrize("kind", list(SAMPLES))
@pytest.mark.parametrize("partial", [True, False], ids=["partial", "whole"])
@pytest.mark.parametrize("batchsize", [1, 3, 5, 7, 10], ids=lambda n: f"size{n}")
def test_batched_as_webdataset(kind: str, partial: bool, batchsize: int) -> None:
    samples = SAMPLES[kind]
    mine = list(IterableWrapper(samples).batched(batchsize, partial=partial))
    reference = list(wdsref.batched(batchsize, partial=partial)(iter(copy.deepcopy(samples))))
    whole, rest = divmod(len(samples), batchsize)
    assert len(mine) == len(reference) == whole + (1 if partial and rest else 0)
    for batch, their_batch in zip(mine, reference, strict=True):
        assert_same_batch(batch, their_batch, samples[0])
    sizes = [len(batch[0] if kind == "tuples" else batch["cls"]) for batch in mine]
    assert sizes == [batchsize] * whole + ([rest] if partial and rest else [])


@pytest.mark.parametrize("kind", list(SAMPLES))
@pytest.mark.parametrize("partial", [True, False], ids=["partial", "whole"])
def test_batched_without_collation_gives_lists_as_webdataset(kind: str, partial: bool) -> None:
    samples = SAMPLES[kind]
    mine = list(IterableWrapper(samples).batched(3, collation_fn=None, partial=partial))
    reference = list(wdsref.batched(3, collation_fn=None, partial=partial)(iter(samples)))
    assert all(isinstance(batch, list) for batch in mine)  # SampleList, a list
    assert [len(batch) for batch in mine] == [len(batch) for batch in reference]
    assert values(mine) == values(reference)
    flat = [item for batch in mine for item in batch]
    assert values(flat) == values(samples[: len(flat)])


@pytest.mark.parametrize("kind", list(SAMPLES))
@pytest.mark.parametrize("batchsize", [1, 3, 7], ids=lambda n: f"size{n}")
def test_unbatched_as_webdataset(kind: str, batchsize: int) -> None:
    samples = SAMPLES[kind]
    mine = list(IterableWrapper(samples).batched(batchsize).unbatched())
    reference = list(wdsref.unbatched()(wdsref.batched(batchsize)(iter(copy.deepcopy(samples)))))
    # Differs on purpose: numbers come back as 0-d tensors here, numpy scalars there.
    assert values(mine) == values(reference) == values(samples)


def test_batched_in_memory_of_odd_sizes_as_webdataset() -> None:
    """A stream shorter than one batch, and an empty stream."""
    short = [(i, f"s{i}") for i in range(2)]
    for partial in (True, False):
        mine = list(IterableWrapper(short).batched(5, partial=partial))
        reference = list(wdsref.batched(5, partial=partial)(iter(short)))
        assert values(mine) == values(reference) == ([[[0, 1], ["s0", "s1"]]] if partial else [])
    assert list(IterableWrapper([]).batched(3)) == []


# --- Collation ------------------------------------------------------------------------------

STACKED = {
    "numpy-uint8-image": [np.full((4, 5, 3), i, dtype=np.uint8) for i in range(3)],
    "numpy-float32": [np.linspace(0, i, 6, dtype=np.float32).reshape(2, 3) for i in range(3)],
    "numpy-int16": [np.arange(4, dtype=np.int16) * i for i in range(3)],
    "numpy-bool": [np.array([i % 2 == 0, True]) for i in range(3)],
    "numpy-scalars-float32": [np.float32(i / 2) for i in range(3)],
    "numpy-scalars-int64": [np.int64(i) for i in range(3)],
    "torch-float32": [torch.rand(2, 3) for _ in range(3)],
    "torch-uint8": [torch.full((3, 2, 2), i, dtype=torch.uint8) for i in range(3)],
    "torch-0d-int64": [torch.tensor(i) for i in range(3)],
}


@pytest.mark.parametrize("column", list(STACKED.values()), ids=list(STACKED))
def test_tensors_and_arrays_are_stacked_into_a_tensor(column: list[Any]) -> None:
    (batch,) = IterableWrapper([{"x": x} for x in column]).batched(3)
    stacked = batch["x"]
    assert isinstance(stacked, torch.Tensor)
    first = column[0]
    expected_dtype = (
        first.dtype
        if isinstance(first, torch.Tensor)
        else torch.from_numpy(np.asarray(first)).dtype
    )
    assert stacked.dtype == expected_dtype
    assert tuple(stacked.shape) == (3, *np.shape(first))
    for row, value in zip(stacked, column, strict=True):
        np.testing.assert_array_equal(row.numpy(), np.asarray(value))


NUMBERS = {
    "bool": ([True, False, True], torch.bool),
    "int": ([3, -1, 2**40], torch.int64),
    "int-and-float": ([1, 2.5, 3], torch.float64),
    "float": ([0.5, 1.25, -2.0], torch.float64),
}


@pytest.mark.parametrize(("numbers", "dtype"), list(NUMBERS.values()), ids=list(NUMBERS))
def test_numbers_become_a_tensor_of_torch_dtype(numbers: list[Any], dtype: torch.dtype) -> None:
    (batch,) = IterableWrapper([(n, f"s{n}") for n in numbers]).batched(3)
    column, strings = batch
    assert isinstance(column, torch.Tensor) and column.dtype == dtype
    assert column.tolist() == numbers
    assert strings == [f"s{n}" for n in numbers]


LISTED = {
    "strings": ["a", "bc", ""],
    "bytes": [b"a", b"b", b"c"],
    "none": [None, None, None],
    "none-and-int": [1, None, 3],
    "str-and-int": ["a", 1, 2],
    "dicts": [{"a": 1}, {"a": 2}, {"b": 3}],
    "lists": [[1], [2, 3], []],
}


@pytest.mark.parametrize("column", list(LISTED.values()), ids=list(LISTED))
def test_other_values_become_a_list(column: list[Any]) -> None:
    (batch,) = IterableWrapper([{"__key__": str(i), "v": v} for i, v in enumerate(column)]).batched(
        3
    )
    assert batch["v"] == column and type(batch["v"]) is list
    assert batch["__key__"] == ["0", "1", "2"]


@pytest.mark.parametrize(
    "column",
    [
        pytest.param([np.str_("a"), np.str_("b")], id="numpy-str-scalars"),
        pytest.param([np.array(["a", "b"]), np.array(["c", "d"])], id="numpy-str-arrays"),
        pytest.param([np.array([1, "x"], dtype=object)] * 2, id="numpy-object-arrays"),
    ],
)
def test_numpy_values_torch_cannot_hold_are_a_list_or_a_located_error(column: list[Any]) -> None:
    """np.str_ is a str (webdataset batches these into a list); arrays that torch cannot
    hold must at least fail as a CollationError naming the field, like unequal shapes."""
    pipe = IterableWrapper([{"name": value} for value in column]).batched(2)
    try:
        (batch,) = pipe
    except wds.CollationError as error:
        assert "'name'" in str(error)
    else:
        assert type(batch["name"]) is list
        assert all(np.array_equal(a, b) for a, b in zip(batch["name"], column, strict=True))


def test_dict_batch_keeps_the_field_order() -> None:
    samples = [{"z": 1, "__key__": "a", "m": "x"}, {"z": 2, "__key__": "b", "m": "y"}]
    (batch,) = IterableWrapper(samples).batched(2)
    assert list(batch) == ["z", "__key__", "m"]


def test_custom_collation_function() -> None:
    batches = list(IterableWrapper(range(7)).batched(3, collation_fn=sum_of))
    assert batches == [3, 12, 6]


def sum_of(batch: list[int]) -> int:
    return sum(batch)


COLLATION_ERRORS: dict[str, tuple[list[Any], str]] = {
    "dict-different-fields": (
        [{"__key__": "0", "a": 1}, {"__key__": "1", "b": 2}],
        r"different fields.*\['__key__', 'a'\].*\['__key__', 'b'\]",
    ),
    "tensor-unequal-shapes": (
        [{"img": torch.zeros(2, 3)}, {"img": torch.zeros(3, 2)}],
        r"'img'.*\(2, 3\).*\(3, 2\)",
    ),
    "numpy-unequal-shapes": (
        [{"npy": np.zeros(4)}, {"npy": np.zeros(5)}],
        r"'npy'.*\(4,\).*\(5,\)",
    ),
    "tensor-and-array": ([(torch.zeros(2),), (np.zeros(2),)], r"'0'.*mixed types"),
    "array-and-number": ([{"x": np.zeros(2)}, {"x": 1}], r"'x'.*mixed types"),
    "tuple-lengths": ([(1, 2), (3,)], r"different lengths \[1, 2\]"),
}


@pytest.mark.parametrize(
    ("samples", "match"), list(COLLATION_ERRORS.values()), ids=list(COLLATION_ERRORS)
)
def test_collation_errors(samples: list[Any], match: str) -> None:
    with pytest.raises(wds.CollationError, match=match) as info:
        list(IterableWrapper(samples).batched(2))
    assert isinstance(info.value, wds.SampleError)


def test_collation_error_field_attribute() -> None:
    with pytest.raises(wds.CollationError) as info:
        wds.collate([{"img": torch.zeros(2)}, {"img": torch.zeros(3)}])
    assert info.value.field == "img"


# --- Round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(SAMPLES))
@pytest.mark.parametrize("batchsize", [1, 2, 3, 7, 8], ids=lambda n: f"size{n}")
def test_unbatched_undoes_batched(kind: str, batchsize: int) -> None:
    samples = SAMPLES[kind]
    result = list(IterableWrapper(samples).batched(batchsize).unbatched())
    assert values(result) == values(samples)
    for item, original in zip(result, samples, strict=True):
        assert type(item) is type(original)
        if isinstance(item, dict):
            assert list(item) == list(original)
            assert item["cls"].dim() == 0 and item["__key__"] == original["__key__"]
        else:
            assert isinstance(item[0], torch.Tensor) and item[0].dim() == 0  # numbers: 0-d


def test_unbatched_undoes_batched_without_collation() -> None:
    """Lists of samples split back into the samples (webdataset would transpose them)."""
    result = list(IterableWrapper(TUPLES).batched(3, collation_fn=None).unbatched())
    assert values(result) == values(TUPLES) and all(type(item) is tuple for item in result)


COLUMNS = {
    "list-of-lists": [["a", "b", "c"], [1, 2, 3]],
    "list-with-tensor": [["a", "b", "c"], torch.tensor([1, 2, 3])],
    "list-with-array": [np.arange(6).reshape(3, 2), ["x", "y", "z"]],
    "tuple-of-tensors": (torch.arange(3), torch.ones(3, 2)),
    "dict": {"txt": ["a", "b", "c"], "cls": torch.tensor([1, 2, 3]), "npy": np.zeros((3, 2))},
}


@pytest.mark.parametrize("batch", list(COLUMNS.values()), ids=list(COLUMNS))
def test_unbatched_reads_columns_as_webdataset(batch: Any) -> None:
    """Lists and tuples of columns, of lists, tensors or arrays, and dicts: rows, as in
    webdataset (issue 27: a list of columns gave the columns themselves)."""
    mine = list(IterableWrapper([batch, batch]).unbatched())
    reference = list(wdsref.unbatched()(iter([batch, batch])))
    assert len(mine) == 6
    assert values(mine) == values(reference)
    assert [type(row) for row in mine] == [type(row) for row in reference]


def loader_columns(lib: Any, paths: list[str], batch_size: int | None) -> list[Any]:
    """webdataset's test: batches from a DataLoader (tuples made lists, or collated again)
    unbatched and batched again after it, only the import changed."""
    stages = [lib.SimpleShardList(paths), lib.tarfile_to_samples(), lib.to_tuple("txt", "cls")]
    dataset = lib.DataPipeline(*stages, *([lib.batched(4)] if batch_size is None else []))
    loader = DataLoader(dataset, batch_size=batch_size)
    pipe = lib.DataPipeline(loader, lib.unbatched(), lib.batched(6, collation_fn=None))
    return values(list(pipe))


@pytest.mark.parametrize("batch_size", [None, 3], ids=["converted", "collated"])
def test_unbatched_after_a_loader_as_webdataset(tmp_path: Path, batch_size: int | None) -> None:
    paths = write_shards(tmp_path, 2, 5)
    mine = loader_columns(wds, paths, batch_size)
    assert mine == quietly(lambda lib: loader_columns(lib, paths, batch_size), wdsref)
    assert [len(batch) for batch in mine] == [6, 4]
    assert [row[0] for batch in mine for row in batch] == [
        f"{shard:03d}-{i:05d}/txt".encode() for shard in range(2) for i in range(5)
    ]


def test_unbatched_of_plain_items() -> None:
    result = list(IterableWrapper(["a", "b", "c"]).batched(2).unbatched())
    assert result == ["a", "b", "c"]
    numbers = list(IterableWrapper([4, 5, 6]).batched(2).unbatched())
    assert [n.item() for n in numbers] == [4, 5, 6] and all(n.dim() == 0 for n in numbers)


# --- DataPipeline, arguments, pickling ------------------------------------------------------


def test_datapipeline_vocabulary() -> None:
    pipe = wds.DataPipeline(
        IterableWrapper(DICTS), wds.to_tuple("cls txt"), wds.batched(3), wds.unbatched
    )
    functional = IterableWrapper(DICTS).to_tuple("cls txt").batched(3).unbatched()
    result = list(pipe)
    assert values(result) == values(list(functional)) == [[d["cls"], d["txt"]] for d in DICTS]
    batches = list(wds.DataPipeline(IterableWrapper(DICTS), wds.batched(4, partial=False)))
    assert len(batches) == 1 and batches[0]["__key__"] == ["0000", "0001", "0002", "0003"]


@pytest.mark.parametrize("batchsize", [0, -1, 2.5, "3"], ids=repr)
def test_bad_batchsize(batchsize: Any) -> None:
    with pytest.raises(ValueError, match="batchsize"):
        IterableWrapper([]).batched(batchsize)
    with pytest.raises(ValueError, match="batchsize"):
        wds.DataPipeline(IterableWrapper([]), wds.batched(batchsize))


PICKLED = {
    "batched": lambda p: p.batched(3),
    "batched-whole": lambda p: p.batched(3, partial=False),
    "batched-lists": lambda p: p.batched(3, collation_fn=None),
    "batched-custom": lambda p: p.map_samples(first_of).batched(2, collation_fn=sum_of),
    "unbatched": lambda p: p.batched(3).unbatched(),
    "datapipeline": lambda p: wds.DataPipeline(p, wds.batched(2), wds.unbatched()),
}


def first_of(item: tuple[Any, ...]) -> Any:
    return item[0]


@pytest.mark.parametrize("build", list(PICKLED.values()), ids=list(PICKLED))
def test_stage_pickles_and_yields_the_same(build: Any) -> None:
    pipe = build(IterableWrapper(TUPLES))
    expected = list(pipe)
    assert expected
    clone = pickle.loads(pickle.dumps(pipe))
    assert type(clone) is type(pipe)
    assert values(list(clone)) == values(expected)


def test_integers_beyond_int64_are_a_located_error() -> None:
    pipe = IterableWrapper([{"n": 1}, {"n": 2**70}]).batched(2)
    with pytest.raises(wds.CollationError, match="'n'"):
        list(pipe)


def test_tuple_columns_of_different_lengths_cannot_be_unbatched() -> None:
    with pytest.raises(wds.CollationError, match="different lengths"):
        list(IterableWrapper([(["a", "b"], [1])]).unbatched())
