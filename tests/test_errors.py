"""Errors carry their location, survive pickling and worker processes, and the five handler
policies behave as FORMAT.md section 5 says (without webdataset's sleep)."""

from __future__ import annotations

import ast
import gc
import importlib
import io
import pickle
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from package_graph import package_modules
from shardgen import make_tar
from torch.utils.data._utils import ExceptionWrapper

import wdspipes as wds
from wdspipes.errors import handle


def exported_exception_classes() -> list[type[BaseException]]:
    """The exception classes (warnings' categories among them) that ``wdspipes.api`` and
    ``wdspipes.errors`` export."""
    exported = {
        getattr(module, name) for module in (wds.api, wds.errors) for name in module.__all__
    }
    found = [c for c in exported if isinstance(c, type) and issubclass(c, BaseException)]
    return sorted(found, key=lambda c: c.__name__)


ERROR_CLASSES = [
    c
    for c in exported_exception_classes()
    if not issubclass(c, Warning) and c is not wds.HttpStatusError  # built from a status
]
"""The error classes that are built from a message and the location keywords."""

INTERNAL_ERRORS = {
    "CorruptDataError": "read/compression.py's signal to the tar walk, which raises a located "
    "TarFormatError in its place"
}
"""Exception classes defined outside errors.py, none of which reaches a user, and why."""


def test_message_names_the_location() -> None:
    error = wds.DuplicateFieldError(
        "duplicate field 'jpg'", url="s.tar", member="0.JPG", key="0", offset=1024
    )
    assert str(error) == "s.tar, member '0.JPG', key '0', at byte 1024: duplicate field 'jpg'"
    assert (error.url, error.member, error.key, error.offset) == ("s.tar", "0.JPG", "0", 1024)
    assert str(wds.WdsError("just the problem")) == "just the problem"


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_errors_pickle_with_their_fields(cls: type[wds.WdsError]) -> None:
    error = cls("broken", url="s.tar")
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is cls and str(clone) == str(error) and clone.url == "s.tar"


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_errors_cross_worker_processes_with_their_type(cls: type[wds.WdsError]) -> None:
    """DataLoader workers send errors as ExceptionWrapper, rebuilt from the message alone."""
    try:
        raise cls("broken", url="s.tar")
    except wds.WdsError:
        wrapper = ExceptionWrapper(where="in a worker")
    with pytest.raises(cls, match=r"s\.tar: broken"):
        wrapper.reraise()


def test_command_error_fields() -> None:
    error = wds.CommandError(
        "command exited with status 2", command="false", status=2, url="pipe:false"
    )
    assert (error.command, error.status, str(error)) == (
        "false",
        2,
        "pipe:false: command exited with status 2",
    )


def test_hierarchy() -> None:
    assert issubclass(wds.TruncatedShardError, wds.TarFormatError)
    shard_errors = (wds.ShardOpenError, wds.CommandError, wds.ShardWriteError)
    assert all(issubclass(c, wds.ShardError) and issubclass(c, OSError) for c in shard_errors)
    assert issubclass(wds.DuplicateFieldError, wds.SampleError)
    assert all(issubclass(c, wds.WdsError) for c in ERROR_CLASSES)


def test_every_exported_error_is_defined_in_errors_under_wds_error() -> None:
    exported = exported_exception_classes()
    assert {c.__module__ for c in exported} == {"wdspipes.errors"}, exported
    errors = [c for c in exported if not issubclass(c, Warning)]
    assert len(errors) > 20 and wds.ResumeError in errors and wds.ImageFormatError in errors
    assert [c.__name__ for c in errors if not issubclass(c, wds.WdsError)] == []
    warning_classes = [c for c in exported if issubclass(c, Warning)]
    assert all(issubclass(c, UserWarning) for c in warning_classes)  # categories, not errors


PUBLIC_ERROR_NAME = r"[^_].*(Error|Exception|Warning)"


def test_no_error_class_is_defined_elsewhere() -> None:
    """Found in the source: every class of the package, outside errors.py, named as an error
    or a warning and not private, is one of the INTERNAL_ERRORS."""
    elsewhere = {}
    for module, path in package_modules().items():
        if module == "wdspipes.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and re.fullmatch(PUBLIC_ERROR_NAME, node.name):
                elsewhere[node.name] = module
    assert set(elsewhere) == set(INTERNAL_ERRORS), elsewhere


@pytest.mark.parametrize(
    ("name", "module", "builtin"),
    [
        ("ResumeError", "wdspipes.errors", ValueError),
        ("ShardSplitError", "wdspipes.core.distributed", ValueError),
        ("UntrustedDataError", "wdspipes.samples.decoders.basic", ValueError),
        ("DataLimitError", "wdspipes.samples.decoders.basic", ValueError),
        ("ImageFormatError", "wdspipes.samples.decoders.images", ValueError),
        ("ImageTooLargeError", "wdspipes.samples.decoders.images", ValueError),
        ("HttpStatusError", "wdspipes.io.http", Exception),
    ],
)
def test_errors_moved_into_errors_keep_their_bases_and_old_paths(
    name: str, module: str, builtin: type[Exception]
) -> None:
    cls = getattr(wds.errors, name)
    assert issubclass(cls, wds.WdsError) and issubclass(cls, builtin)
    assert getattr(importlib.import_module(module), name) is cls  # imports of the old path


def test_http_status_error_pickles_with_its_status() -> None:
    error = wds.HttpStatusError(404, url="https://user:secret@host/a.tar")
    assert str(error) == "https://user:***@host/a.tar: HTTP 404 Not Found", str(error)
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is wds.HttpStatusError and str(clone) == str(error)
    assert (clone.status, clone.reason, clone.url) == (404, "Not Found", error.url)
    assert str(wds.HttpStatusError(599)) == "HTTP 599"  # a status of no standard
    assert str(wds.HttpStatusError(503, "Slow Down")) == "HTTP 503 Slow Down"


ERROR = wds.TruncatedShardError("cut", url="s.tar")


def test_reraise() -> None:
    with pytest.raises(wds.TruncatedShardError):
        handle(wds.reraise_exception, ERROR)


@pytest.mark.parametrize(
    ("handler", "verdict", "warns"),
    [
        (wds.ignore_and_continue, True, False),
        (wds.warn_and_continue, True, True),
        (wds.ignore_and_stop, False, False),
        (wds.warn_and_stop, False, True),
    ],
)
def test_policies(handler: wds.errors.Handler, verdict: bool, warns: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert handle(handler, ERROR) is verdict
    messages = [str(w.message) for w in caught if w.category is wds.DataWarning]
    assert messages == (["TruncatedShardError: s.tar: cut"] if warns else [])


def test_custom_handlers() -> None:
    assert handle(lambda exn: None, ERROR) is False  # forgetting to return means stop
    replacement = RuntimeError("replaced")
    with pytest.raises(RuntimeError, match="replaced"):
        handle(lambda exn: replacement, ERROR)  # returning an exception raises it


# --- The built-in classes webdataset raised ---------------------------------------------------
# The same input through webdataset 1.0.2 and wdspipes: the error wdspipes raises is an instance
# of the very class webdataset raised, so `except ValueError`, `except KeyError` and
# `except OSError` written for webdataset keep working.


def webdataset() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import webdataset as wdsref
    return wdsref


def write_shard(path: Path, members: list[tuple[str, bytes]]) -> str:
    path.write_bytes(make_tar(members))
    return str(path)


@pytest.fixture
def shard(tmp_path: Path) -> str:
    return write_shard(tmp_path / "s.tar", [("0.txt", b"hi"), ("0.cls", b"1"), ("1.txt", b"x")])


def read(lib: ModuleType, url: str, *stages: Any) -> list[Any]:
    """The samples of a DataPipeline of ``lib`` (webdataset or wdspipes) over one shard."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # webdataset leaks an open file per shard
        pipeline = lib.DataPipeline(lib.SimpleShardList(url), lib.tarfile_to_samples(), *stages)
        try:
            return list(pipeline)
        finally:
            del pipeline
            gc.collect()


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


Run = Callable[[ModuleType, str, Path], object]

READ_CASES: dict[str, tuple[type[Exception], Run]] = {
    "to_tuple, a missing field": (
        ValueError,
        lambda lib, url, _: read(lib, url, lib.to_tuple("txt", "cls")),
    ),
    "rename, a missing field": (
        ValueError,
        lambda lib, url, _: read(lib, url, lib.rename(label="cls")),
    ),
    "map_dict, a missing field": (
        KeyError,
        lambda lib, url, _: read(lib, url, lib.map_dict(cls=bytes.upper)),
    ),
    "map_dict, int() fails": (
        ValueError,
        lambda lib, url, _: read(lib, url, lib.map_dict(txt=int)),
    ),
    "map_tuple, int() fails": (
        ValueError,
        lambda lib, url, _: read(lib, url, lib.to_tuple("txt"), lib.map_tuple(int)),
    ),
    "map, the function raises KeyError": (
        KeyError,
        lambda lib, url, _: read(lib, url, lib.map(lambda s: s["jpg"])),
    ),
    "map, the function divides by zero": (
        ZeroDivisionError,
        lambda lib, url, _: read(lib, url, lib.map(lambda s: 1 / 0)),
    ),
    "a missing shard": (FileNotFoundError, lambda lib, _, tmp: read(lib, str(tmp / "missing.tar"))),
    "a directory as a shard": (IsADirectoryError, lambda lib, _, tmp: read(lib, str(tmp))),
    "an unknown URL scheme": (ValueError, lambda lib, _, tmp: read(lib, "gopher://host/a.tar")),
    "a duplicate field": (
        ValueError,
        lambda lib, _, tmp: read(
            lib, write_shard(tmp / "d.tar", [("0.txt", b"a"), ("0.cls", b"1"), ("0.txt", b"b")])
        ),
    ),
    "batched, unequal shapes": (
        AssertionError,
        lambda lib, _, tmp: read(
            lib,
            write_shard(tmp / "n.tar", [("0.npy", npy(np.zeros(2))), ("1.npy", npy(np.zeros(3)))]),
            lib.decode(),
            lib.to_tuple("npy"),
            lib.batched(2),
        ),
    ),
}


def write_one(lib: ModuleType, sample: dict[str, Any], **options: Any) -> None:
    with lib.TarWriter(io.BytesIO(), **options) as sink:
        sink.write(sample)


WRITE_CASES: dict[str, tuple[type[Exception], Run]] = {
    "a sample without __key__": (ValueError, lambda lib, *_: write_one(lib, {"txt": "x"})),
    "a value with no encoder": (
        ValueError,
        lambda lib, *_: write_one(lib, {"__key__": "a", "unknown": object()}),
    ),
    "encoder=False, a str value": (
        ValueError,
        lambda lib, *_: write_one(lib, {"__key__": "a", "txt": "x"}, encoder=False),
    ),
}


@pytest.mark.parametrize("case", [*READ_CASES, *WRITE_CASES])
def test_errors_are_the_builtin_exceptions_webdataset_raised(
    case: str, shard: str, tmp_path: Path
) -> None:
    builtin, run = {**READ_CASES, **WRITE_CASES}[case]
    with pytest.raises(builtin) as theirs:
        run(webdataset(), shard, tmp_path)
    with pytest.raises(builtin) as ours:
        run(wds, shard, tmp_path)
    assert isinstance(ours.value, wds.WdsError), ours.value  # typed, and located
    assert isinstance(ours.value, type(theirs.value))  # the very class webdataset raised


def test_a_builtin_class_survives_pickling_and_worker_processes(shard: str) -> None:
    with pytest.raises(wds.SampleError) as caught:
        read(wds, shard, wds.map_dict(txt=int))
    for error in (pickle.loads(pickle.dumps(caught.value)), caught.value):
        assert isinstance(error, ValueError) and error.key == "0" and error.field == "txt"
        assert type(error).__name__ == "SampleError"
    try:
        raise caught.value
    except ValueError:
        wrapper = pickle.loads(pickle.dumps(ExceptionWrapper(where="in a worker")))
    with pytest.raises(ValueError, match="int failed: ValueError"):
        wrapper.reraise()
    with pytest.raises(wds.SampleError):
        wrapper.reraise()


def test_the_message_is_the_error_s_own() -> None:
    # KeyError quotes its argument and OSError formats its errno; neither touches ours
    missing = wds.MissingFieldError("no field 'cls'", key="0")
    assert str(missing) == "key '0': no field 'cls'"
    opened = wds.ShardOpenError.like(FileNotFoundError(2, "gone"))("no such file", url="a.tar")
    assert str(opened) == "a.tar: no such file" and isinstance(opened, FileNotFoundError)
    assert wds.SampleError.like(StopIteration()) is wds.SampleError  # generators would mangle it
    assert wds.SampleError.like(RuntimeError) is wds.SampleError.like(RuntimeError())
