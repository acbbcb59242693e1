"""Errors carry their location, survive pickling and worker processes, and the five handler
policies behave as FORMAT.md section 5 says (without webdataset's sleep)."""

from __future__ import annotations

import pickle
import warnings

import pytest
from torch.utils.data._utils import ExceptionWrapper

import wdspipes as wds
from wdspipes.errors import handle

ERROR_CLASSES = [
    wds.WdsError,
    wds.ShardError,
    wds.ShardOpenError,
    wds.CommandError,
    wds.TarFormatError,
    wds.TruncatedShardError,
    wds.SampleError,
    wds.DuplicateFieldError,
]


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
    assert all(issubclass(c, wds.ShardError) for c in (wds.ShardOpenError, wds.CommandError))
    assert issubclass(wds.DuplicateFieldError, wds.SampleError)
    assert all(issubclass(c, wds.WdsError) for c in ERROR_CLASSES)


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
