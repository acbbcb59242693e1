"""Field stages: to_tuple, map_tuple, map_dict, rename, select, map and slice.

Each stage gives what webdataset 1.0.2 gives on the same in-memory samples (field order
included), in functional chaining and in webdataset's ``DataPipeline`` vocabulary; its errors
are typed and located (URL, key, field, cause); the handlers skip, stop or warn as documented;
bad arguments fail when the stage is built; and every stage pickles and yields the same after.
"""

from __future__ import annotations

import copy
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref

Sample = dict[str, Any]
Build = Callable[[IterDataPipe[Any]], IterDataPipe[Any]]


def sample(index: int, **fields: Any) -> Sample:
    return {"__key__": f"{index:04d}", "__url__": "mem.tar", **fields}


# Every sample has cls, txt and jpg or png (sample 2 has both; sample 3 a different field order).
COMPLETE = [
    sample(0, jpg=b"J0", cls=b"0", txt=b"zero"),
    sample(1, png=b"P1", cls=b"1", txt=b"one"),
    sample(2, jpg=b"J2", png=b"P2", cls=b"2", txt=b"two"),
    sample(3, txt=b"three", png=b"P3", cls=b"3"),
    sample(4, jpg=b"J4", cls=b"4", txt=b"four"),
]

# Sample 1 lacks txt, sample 3 lacks jpg and png, sample 4 has a None cls.
MESSY = [
    sample(0, jpg=b"J0", cls=b"0", txt=b"zero"),
    sample(1, png=b"P1", cls=b"1"),
    sample(2, jpg=b"J2", png=b"P2", cls=b"2", txt=b"two"),
    sample(3, cls=b"3", txt=b"three"),
    sample(4, jpg=b"J4", cls=None, txt=b"four"),
    sample(5, png=b"P5", cls=b"5", txt=b"five"),
]

TUPLES = [(b"0", "zero", 0.25), (b"1", "one", 1.5), (b"2", "two", 2.75), (b"3", "three", 3.5)]
TUPLES_WITH_BAD = [(b"0", "zero"), (b"x", "bad"), (b"2", "two"), (b"3", "three")]


# Module-level functions, so that the pipelines using them pickle.
def parse_int(value: bytes) -> int:
    return int(value)


def has_txt(item: Sample) -> bool:
    return "txt" in item


def even_key(item: Sample) -> bool:
    return int(item["__key__"]) % 2 == 0


def never(item: Any) -> bool:
    return False


def key_and_class(item: Sample) -> tuple[str, bytes]:
    return item["__key__"], item["cls"]


def odd_or_none(item: Sample) -> Sample | None:
    return item if int(item["__key__"]) % 2 else None


def only_class(item: Sample) -> Sample:
    return {"label": item["cls"]}


def rekeyed(item: Sample) -> Sample:
    return {**item, "__key__": "other"}


def class_number(item: Sample) -> int:
    return int(item["cls"])


def ours(samples: list[Any], build: Build) -> list[Any]:
    return list(build(IterableWrapper(copy.deepcopy(samples))))


def theirs(samples: list[Any], stage: Any) -> list[Any]:
    """webdataset's curried stage applied to a plain iterator (webdataset changes samples in
    place in map_dict, hence the copy)."""
    return list(stage(iter(copy.deepcopy(samples))))


def ordered(items: list[Any]) -> list[Any]:
    """Dicts as lists of items, so that comparisons see the field order too."""
    return [list(item.items()) if isinstance(item, dict) else item for item in items]


def case(
    case_id: str, samples: list[Any], build: Build, stage: Any, count: int
) -> pytest.ParameterSet:
    return pytest.param(samples, build, stage, count, id=case_id)


def assert_same_as_webdataset(samples: list[Any], build: Build, stage: Any, count: int) -> None:
    result = ours(samples, build)
    assert ordered(result) == ordered(theirs(samples, stage))
    assert len(result) == count  # the comparison is not vacuous


# --- Differential: the same output as webdataset --------------------------------------------

IGNORE = wds.ignore_and_continue
STOP = wds.ignore_and_stop

TO_TUPLE_CASES = [
    case("one-field", COMPLETE, lambda p: p.to_tuple("cls"), wdsref.to_tuple("cls"), 5),
    case(
        "alternatives",
        COMPLETE,
        lambda p: p.to_tuple("jpg;png", "cls"),
        wdsref.to_tuple("jpg;png", "cls"),
        5,
    ),
    case(
        "alternatives-other-order",
        COMPLETE,
        lambda p: p.to_tuple("png;jpg", "txt"),
        wdsref.to_tuple("png;jpg", "txt"),
        5,
    ),
    case(
        "space-separated-specs",
        COMPLETE,
        lambda p: p.to_tuple("jpg;png cls txt"),
        wdsref.to_tuple("jpg;png cls txt"),
        5,
    ),
    case(
        "repeated-and-meta-fields",
        COMPLETE,
        lambda p: p.to_tuple("__key__", "txt", "__url__", "txt"),
        wdsref.to_tuple("__key__", "txt", "__url__", "txt"),
        5,
    ),
    case(
        "missing-skipped",
        MESSY,
        lambda p: p.to_tuple("jpg;png", "txt", handler=IGNORE),
        wdsref.to_tuple("jpg;png", "txt", handler=IGNORE),
        4,
    ),
    case(
        "missing-stops",
        MESSY,
        lambda p: p.to_tuple("jpg;png", "txt", handler=STOP),
        wdsref.to_tuple("jpg;png", "txt", handler=STOP),
        1,
    ),
    case(
        "none-value-skipped",
        MESSY,
        lambda p: p.to_tuple("cls", handler=IGNORE),
        wdsref.to_tuple("cls", handler=IGNORE),
        5,
    ),
    case(
        "missing-is-none",
        MESSY,
        lambda p: p.to_tuple("jpg", "txt;png", "cls", missing_is_error=False),
        wdsref.to_tuple("jpg", "txt;png", "cls", missing_is_error=False),
        6,
    ),
    case(
        "none-value-allowed",
        MESSY,
        lambda p: p.to_tuple("cls", "jpg;png", none_is_error=False, handler=IGNORE),
        wdsref.to_tuple("cls", "jpg;png", none_is_error=False, handler=IGNORE),
        5,
    ),
    case(
        "missing-is-none-but-none-is-error",
        MESSY,
        lambda p: p.to_tuple(
            "jpg", "txt", missing_is_error=False, none_is_error=True, handler=IGNORE
        ),
        wdsref.to_tuple("jpg", "txt", missing_is_error=False, none_is_error=True, handler=IGNORE),
        3,
    ),
]

MAP_TUPLE_CASES = [
    case("first-position", TUPLES, lambda p: p.map_tuple(int), wdsref.map_tuple(int), 4),
    case(
        "none-is-identity",
        TUPLES,
        lambda p: p.map_tuple(None, str.upper),
        wdsref.map_tuple(None, str.upper),
        4,
    ),
    case(
        "more-functions-than-positions",
        TUPLES,
        lambda p: p.map_tuple(int, len, round, str),
        wdsref.map_tuple(int, len, round, str),
        4,
    ),
    case("no-functions", TUPLES, lambda p: p.map_tuple(), wdsref.map_tuple(), 4),
    case(
        "lists-become-tuples",
        [list(t) for t in TUPLES],
        lambda p: p.map_tuple(None, len),
        wdsref.map_tuple(None, len),
        4,
    ),
    case(
        "error-skipped",
        TUPLES_WITH_BAD,
        lambda p: p.map_tuple(parse_int, handler=IGNORE),
        wdsref.map_tuple(parse_int, handler=IGNORE),
        3,
    ),
    case(
        "error-stops",
        TUPLES_WITH_BAD,
        lambda p: p.map_tuple(parse_int, handler=STOP),
        wdsref.map_tuple(parse_int, handler=STOP),
        1,
    ),
]

MAP_DICT_CASES = [
    case("one-field", COMPLETE, lambda p: p.map_dict(cls=int), wdsref.map_dict(cls=int), 5),
    case(
        "two-fields",
        COMPLETE,
        lambda p: p.map_dict(txt=bytes.decode, cls=parse_int),
        wdsref.map_dict(txt=bytes.decode, cls=parse_int),
        5,
    ),
    case(
        "missing-skipped",
        MESSY,
        lambda p: p.map_dict(txt=bytes.decode, handler=IGNORE),
        wdsref.map_dict(txt=bytes.decode, handler=IGNORE),
        5,
    ),
    case(
        "error-skipped",
        MESSY,
        lambda p: p.map_dict(cls=parse_int, handler=IGNORE),
        wdsref.map_dict(cls=parse_int, handler=IGNORE),
        5,
    ),
    case(
        "error-stops",
        MESSY,
        lambda p: p.map_dict(cls=parse_int, handler=STOP),
        wdsref.map_dict(cls=parse_int, handler=STOP),
        4,
    ),
]

RENAME_CASES = [
    case(
        "keep",
        COMPLETE,
        lambda p: p.rename(image="jpg;png"),
        wdsref.rename(image="jpg;png"),
        5,
    ),
    case(
        "keep-other-order",
        COMPLETE,
        lambda p: p.rename(image="png;jpg", label="cls"),
        wdsref.rename(image="png;jpg", label="cls"),
        5,
    ),
    case(
        "no-keep",
        COMPLETE,
        lambda p: p.rename(image="jpg;png", label="cls", keep=False),
        wdsref.rename(image="jpg;png", label="cls", keep=False),
        5,
    ),
    case(
        "no-keep-meta-fields",
        COMPLETE,
        lambda p: p.rename(key="__key__", text="txt", keep=False),
        wdsref.rename(key="__key__", text="txt", keep=False),
        5,
    ),
    case(
        "onto-an-existing-field",
        COMPLETE,
        lambda p: p.rename(txt="cls"),
        wdsref.rename(txt="cls"),
        5,
    ),
    case(
        "two-names-from-one-field",
        COMPLETE,
        lambda p: p.rename(a="cls", b="cls"),
        wdsref.rename(a="cls", b="cls"),
        5,
    ),
    case(
        "missing-skipped",
        MESSY,
        lambda p: p.rename(image="jpg;png", handler=IGNORE),
        wdsref.rename(image="jpg;png", handler=IGNORE),
        5,
    ),
    case(
        "missing-stops",
        MESSY,
        lambda p: p.rename(text="txt", keep=False, handler=STOP),
        wdsref.rename(text="txt", keep=False, handler=STOP),
        1,
    ),
]

SELECT_CASES = [
    case("some", MESSY, lambda p: p.select(has_txt), wdsref.select(has_txt), 5),
    case("even-keys", MESSY, lambda p: p.select(even_key), wdsref.select(even_key), 3),
    case("none", MESSY, lambda p: p.select(never), wdsref.select(never), 0),
]

MAP_CASES = [
    case(
        "to-tuples",
        COMPLETE,
        lambda p: p.map_samples(key_and_class),
        wdsref.map(key_and_class),
        5,
    ),
    case(
        "none-dropped",
        COMPLETE,
        lambda p: p.map_samples(odd_or_none),
        wdsref.map(odd_or_none),
        2,
    ),
    case(
        "key-restored",
        COMPLETE,
        lambda p: p.map_samples(only_class),
        wdsref.map(only_class),
        5,
    ),
    case(
        "key-overwritten",
        COMPLETE,
        lambda p: p.map_samples(rekeyed),
        wdsref.map(rekeyed),
        5,
    ),
    case(
        "no-key-gives-none",
        [{"cls": b"7"}, {"cls": b"8"}],
        lambda p: p.map_samples(only_class),
        wdsref.map(only_class),
        2,
    ),
    case(
        "error-skipped",
        MESSY,
        lambda p: p.map_samples(class_number, handler=IGNORE),
        wdsref.map(class_number, handler=IGNORE),
        5,
    ),
    case(
        "error-stops",
        MESSY,
        lambda p: p.map_samples(class_number, handler=STOP),
        wdsref.map(class_number, handler=STOP),
        4,
    ),
]

SLICE_ARGS = [(3,), (2, 8), (2, 8, 2), (None,), (1, None), (0, 100, 3), (5, 2), (0, 0), (7, 20)]
SLICE_COUNTS = [3, 6, 3, 12, 11, 4, 0, 0, 5]


@pytest.mark.parametrize(("samples", "build", "stage", "count"), TO_TUPLE_CASES)
def test_to_tuple_as_webdataset(samples: list[Any], build: Build, stage: Any, count: int) -> None:
    assert_same_as_webdataset(samples, build, stage, count)


@pytest.mark.parametrize(("samples", "build", "stage", "count"), MAP_TUPLE_CASES)
def test_map_tuple_as_webdataset(samples: list[Any], build: Build, stage: Any, count: int) -> None:
    assert_same_as_webdataset(samples, build, stage, count)


@pytest.mark.parametrize(("samples", "build", "stage", "count"), MAP_DICT_CASES)
def test_map_dict_as_webdataset(samples: list[Any], build: Build, stage: Any, count: int) -> None:
    assert_same_as_webdataset(samples, build, stage, count)


@pytest.mark.parametrize(("samples", "build", "stage", "count"), RENAME_CASES)
def test_rename_as_webdataset(samples: list[Any], build: Build, stage: Any, count: int) -> None:
    assert_same_as_webdataset(samples, build, stage, count)


@pytest.mark.parametrize(("samples", "build", "stage", "count"), SELECT_CASES)
def test_select_as_webdataset(samples: list[Any], build: Build, stage: Any, count: int) -> None:
    assert_same_as_webdataset(samples, build, stage, count)


@pytest.mark.parametrize(("samples", "build", "stage", "count"), MAP_CASES)
def test_map_as_webdataset(samples: list[Any], build: Build, stage: Any, count: int) -> None:
    assert_same_as_webdataset(samples, build, stage, count)


@pytest.mark.parametrize(
    ("args", "count"), list(zip(SLICE_ARGS, SLICE_COUNTS, strict=True)), ids=str
)
def test_slice_as_webdataset(args: tuple[int | None, ...], count: int) -> None:
    items = [sample(i, cls=str(i).encode()) for i in range(12)]
    assert_same_as_webdataset(items, lambda p: p.islice(*args), wdsref.slice(*args), count)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(np.arange(3), id="numpy-vector"),
        pytest.param(np.zeros((2, 2), dtype=np.uint8), id="numpy-image"),
        pytest.param(torch.arange(3), id="torch-vector"),
    ],
)
def test_to_tuple_takes_array_fields_as_webdataset(value: Any) -> None:
    """Decoded images and arrays are the usual fields of a to_tuple; the None check must not
    compare them with None elementwise."""
    samples = [sample(0, npy=value, cls=0), sample(1, npy=value + 1, cls=1)]
    result = ours(samples, lambda p: p.to_tuple("npy", "cls"))
    expected = theirs(samples, wdsref.to_tuple("npy", "cls"))
    assert len(result) == len(expected) == 2
    for (array, label), (their_array, their_label) in zip(result, expected, strict=True):
        assert type(array) is type(their_array) and label == their_label
        np.testing.assert_array_equal(np.asarray(array), np.asarray(their_array))


# --- The DataPipeline vocabulary ------------------------------------------------------------

VOCABULARY_SOURCE = [*COMPLETE, MESSY[1]]  # the last sample has no txt

# (webdataset's stage name, args, kwargs): built from wdspipes and from webdataset alike.
VOCABULARY = {
    "to_tuple": [("to_tuple", ("jpg;png", "cls"), {})],
    "to_tuple-map_tuple": [
        ("select", (has_txt,), {}),
        ("to_tuple", ("cls txt",), {}),
        ("map_tuple", (parse_int, bytes.decode), {}),
    ],
    "map_dict": [("map_dict", (), {"cls": parse_int})],
    "rename": [("rename", (), {"image": "jpg;png", "keep": False})],
    "select": [("select", (even_key,), {})],
    "map": [("map", (only_class,), {})],
    "slice": [("slice", (1, 5, 2), {})],
    "all-field-stages": [
        ("select", (has_txt,), {}),
        ("rename", (), {"image": "jpg;png", "label": "cls"}),
        ("map_dict", (), {"label": parse_int}),
        ("map", (odd_or_none,), {}),
        ("to_tuple", ("image", "label"), {}),
        ("map_tuple", (None, str), {}),
        ("slice", (1,), {}),
    ],
}


@pytest.mark.parametrize("stages", list(VOCABULARY.values()), ids=list(VOCABULARY))
def test_datapipeline_vocabulary_as_webdataset(stages: list[tuple[str, tuple, dict]]) -> None:
    mine = wds.DataPipeline(
        IterableWrapper(copy.deepcopy(VOCABULARY_SOURCE)),
        *[getattr(wds, name)(*args, **kwargs) for name, args, kwargs in stages],
    )
    reference = wdsref.DataPipeline(
        IterableWrapper(copy.deepcopy(VOCABULARY_SOURCE)),
        *[getattr(wdsref, name)(*args, **kwargs) for name, args, kwargs in stages],
    )
    result = list(mine)
    assert result, "the pipeline yields something"
    assert ordered(result) == ordered(list(reference))


def test_functional_form_takes_a_field_named_cls() -> None:
    """torch's own registration passes the upstream as ``cls=``, which would clash."""
    pipe = IterableWrapper(copy.deepcopy(COMPLETE))
    assert [s["cls"] for s in pipe.map_dict(cls=parse_int)] == [0, 1, 2, 3, 4]
    assert [s["cls"] for s in pipe.rename(cls="txt", keep=False)][:2] == [b"zero", b"one"]


# --- Errors and handlers --------------------------------------------------------------------


def test_missing_field_error_names_spec_fields_url_and_key() -> None:
    pipe = IterableWrapper([sample(0, jpg=b"J", cls=b"0"), sample(7, cls=b"7", txt=b"t")])
    with pytest.raises(wds.MissingFieldError) as info:
        list(pipe.to_tuple("jpg;png", "cls"))
    error = info.value
    assert (error.url, error.key) == ("mem.tar", "0007")
    message = str(error)
    assert "'jpg;png'" in message and "['cls', 'txt']" in message
    assert "mem.tar" in message and "'0007'" in message
    assert isinstance(error, wds.SampleError)


def test_none_value_is_an_error_naming_the_spec() -> None:
    pipe = IterableWrapper([sample(3, cls=None, txt=b"t")])
    with pytest.raises(wds.MissingFieldError, match=r"'cls'.*None") as info:
        list(pipe.to_tuple("txt", "cls"))
    assert info.value.key == "0003"


def test_missing_is_error_false_gives_none_for_missing_and_none() -> None:
    pipe = IterableWrapper([sample(0, cls=None)])
    assert list(pipe.to_tuple("cls", "jpg;png", missing_is_error=False)) == [(None, None)]


def test_map_dict_error_is_located_with_its_cause() -> None:
    pipe = IterableWrapper([sample(0, cls=b"0"), sample(1, cls=b"one")])
    with pytest.raises(wds.SampleError) as info:
        list(pipe.map_dict(cls=parse_int))
    error = info.value
    assert (error.url, error.key, error.field) == ("mem.tar", "0001", "cls")
    assert isinstance(error.__cause__, ValueError) and "one" in str(error.__cause__)
    message = str(error)
    assert all(part in message for part in ("mem.tar", "'0001'", "'cls'", "parse_int"))


def test_map_dict_missing_field_is_missing_field_error() -> None:
    pipe = IterableWrapper([sample(5, cls=b"5")])
    with pytest.raises(wds.MissingFieldError, match="'txt'") as info:
        list(pipe.map_dict(txt=bytes.decode))
    assert info.value.key == "0005"


def test_map_dict_leaves_its_input_samples_alone() -> None:
    """Differs from webdataset on purpose: webdataset changes the samples in place."""
    samples = copy.deepcopy(COMPLETE)
    result = list(IterableWrapper(samples, deepcopy=False).map_dict(cls=parse_int))
    assert [s["cls"] for s in result] == [0, 1, 2, 3, 4]
    assert samples == COMPLETE


def test_map_error_is_located_with_its_cause() -> None:
    pipe = IterableWrapper([sample(2, txt=b"t")])
    with pytest.raises(wds.SampleError) as info:
        list(pipe.map_samples(class_number))
    assert (info.value.url, info.value.key) == ("mem.tar", "0002")
    assert isinstance(info.value.__cause__, KeyError)
    assert "class_number" in str(info.value)


def test_rename_missing_field_is_missing_field_error() -> None:
    pipe = IterableWrapper([sample(3, cls=b"3")])
    with pytest.raises(wds.MissingFieldError, match="'jpg;png'") as info:
        list(pipe.rename(image="jpg;png"))
    assert info.value.key == "0003"


# Stage with a handler, samples with one bad sample in the middle, the error it raises.
Handled = Callable[[IterDataPipe[Any], Any], IterDataPipe[Any]]
HANDLED: dict[str, tuple[Handled, list[Any], type[Exception]]] = {
    "to_tuple-missing": (
        lambda p, h: p.to_tuple("cls", "txt", handler=h),
        [sample(0, cls=b"0", txt=b"a"), sample(1, cls=b"1"), sample(2, cls=b"2", txt=b"c")],
        wds.MissingFieldError,
    ),
    "to_tuple-none": (
        lambda p, h: p.to_tuple("cls", handler=h),
        [sample(0, cls=b"0"), sample(1, cls=None), sample(2, cls=b"2")],
        wds.MissingFieldError,
    ),
    "map_tuple": (
        lambda p, h: p.map_tuple(parse_int, handler=h),
        [(b"0", "a"), (b"x", "b"), (b"2", "c")],
        wds.SampleError,
    ),
    "map_dict-missing": (
        lambda p, h: p.map_dict(txt=bytes.decode, handler=h),
        [sample(0, txt=b"a"), sample(1, cls=b"1"), sample(2, txt=b"c")],
        wds.MissingFieldError,
    ),
    "map_dict-raises": (
        lambda p, h: p.map_dict(cls=parse_int, handler=h),
        [sample(0, cls=b"0"), sample(1, cls=b"x"), sample(2, cls=b"2")],
        wds.SampleError,
    ),
    "rename-missing": (
        lambda p, h: p.rename(label="cls", handler=h),
        [sample(0, cls=b"0"), sample(1, txt=b"b"), sample(2, cls=b"2")],
        wds.MissingFieldError,
    ),
    "map-raises": (
        lambda p, h: p.map_samples(class_number, handler=h),
        [sample(0, cls=b"0"), sample(1, cls=b"x"), sample(2, cls=b"2")],
        wds.SampleError,
    ),
}


def run(build: Handled, items: list[Any], handler: Any) -> list[Any]:
    return list(build(IterableWrapper(copy.deepcopy(items)), handler))


@pytest.mark.parametrize(("build", "items", "error"), list(HANDLED.values()), ids=list(HANDLED))
def test_handlers(build: Handled, items: list[Any], error: type[Exception]) -> None:
    first, _, last = items
    good_first = run(build, [first], wds.reraise_exception)
    good_last = run(build, [last], wds.reraise_exception)
    assert len(good_first) == len(good_last) == 1
    with pytest.raises(error):
        run(build, items, wds.reraise_exception)
    assert run(build, items, wds.ignore_and_continue) == good_first + good_last
    assert run(build, items, wds.ignore_and_stop) == good_first
    with pytest.warns(wds.DataWarning, match=error.__name__):
        assert run(build, items, wds.warn_and_continue) == good_first + good_last


def replace_with_lookup_error(exn: Exception) -> Exception:
    return LookupError(f"replaced {type(exn).__name__}")


def test_handler_may_return_an_exception_to_raise() -> None:
    pipe = IterableWrapper([sample(0, txt=b"t")]).to_tuple("cls", handler=replace_with_lookup_error)
    with pytest.raises(LookupError, match="replaced MissingFieldError"):
        list(pipe)


# --- Argument checks ------------------------------------------------------------------------

BAD_ARGUMENTS: dict[str, tuple[Build, type[Exception], str]] = {
    "to_tuple-no-field": (lambda p: p.to_tuple(), ValueError, "field"),
    "map_tuple-not-callable": (lambda p: p.map_tuple(None, 3), TypeError, "function 1"),
    "select-not-callable": (lambda p: p.select(3), TypeError, "predicate"),
    "map_dict-no-field": (lambda p: p.map_dict(), ValueError, "field"),
    "map_dict-not-callable": (lambda p: p.map_dict(cls=3), TypeError, "'cls'"),
    "rename-no-field": (lambda p: p.rename(keep=False), ValueError, "name"),
    "map-not-callable": (lambda p: p.map_samples("cls"), TypeError, "function"),
    "slice-negative-stop": (lambda p: p.islice(-1), ValueError, "Stop"),
    "slice-zero-step": (lambda p: p.islice(0, 5, 0), ValueError, "Step"),
}

FACTORIES: dict[str, tuple[Any, type[Exception]]] = {
    "to_tuple": (lambda: wds.to_tuple(), ValueError),
    "map_tuple": (lambda: wds.map_tuple(3), TypeError),
    "map_dict": (lambda: wds.map_dict(), ValueError),
    "rename": (lambda: wds.rename(), ValueError),
    "map": (lambda: wds.map(3), TypeError),
    "slice": (lambda: wds.slice(-1), ValueError),
}


@pytest.mark.parametrize(
    ("build", "error", "names"), list(BAD_ARGUMENTS.values()), ids=list(BAD_ARGUMENTS)
)
def test_bad_arguments_fail_when_built(build: Build, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=names):
        build(IterableWrapper([]))


@pytest.mark.parametrize(("factory", "error"), list(FACTORIES.values()), ids=list(FACTORIES))
def test_bad_arguments_fail_when_datapipeline_is_built(
    factory: Callable[[], Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        wds.DataPipeline(IterableWrapper([]), factory())


# --- Pickling -------------------------------------------------------------------------------

PICKLED: dict[str, Build] = {
    "to_tuple": lambda p: p.to_tuple("jpg;png", "txt", handler=wds.ignore_and_continue),
    "map_tuple": lambda p: p.to_tuple("cls txt", handler=wds.ignore_and_continue).map_tuple(
        None, bytes.decode
    ),
    "map_dict": lambda p: p.map_dict(txt=bytes.decode, handler=wds.ignore_and_continue),
    "rename": lambda p: p.rename(image="jpg;png", keep=False, handler=wds.ignore_and_continue),
    "select": lambda p: p.select(has_txt),
    "map": lambda p: p.map_samples(only_class),
    "slice": lambda p: p.islice(1, 5, 2),
    "datapipeline": lambda p: wds.DataPipeline(
        p, wds.select(even_key), wds.map(key_and_class), wds.map_tuple(str.lower)
    ),
}


@pytest.mark.parametrize("build", list(PICKLED.values()), ids=list(PICKLED))
def test_stage_pickles_and_yields_the_same(build: Build) -> None:
    pipe = build(IterableWrapper(copy.deepcopy(MESSY)))
    expected = list(pipe)
    assert expected
    clone = pickle.loads(pickle.dumps(pipe))
    assert type(clone) is type(pipe)
    assert list(clone) == expected
