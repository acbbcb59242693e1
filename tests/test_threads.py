"""Work in threads inside a stage (wdspipes/samples/threads.py): ``decode``, ``map_samples``,
``map_dict`` and ``map_tuple`` with ``threads=N`` give what they give without threads, in the
same order; errors come in their place; no thread is left behind; and a state saved with
samples in flight resumes exactly at every cut point (tests/test_stage_state.py's harness)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from shardgen import Shards
from stage_examples import Jitter, comparable, describe, samples
from test_stage_state import assert_resumes_exactly
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes.errors import ResumeError, SampleError
from wdspipes.samples.threads import AHEAD, MOST_IN_A_TASK, TASK_SECONDS


def pool_threads() -> list[threading.Thread]:
    return [
        thread for thread in threading.enumerate() if thread.name.startswith("wdspipes-threads")
    ]


def class_of(sample: dict[str, Any]) -> dict[str, Any]:
    return {**sample, "cls": int(sample["cls"])}


def cls_text(value: bytes) -> str:
    return value.decode()


# the pipelines of the shared examples, with their work in threads, before and after shuffle
# buffers: each resumes exactly at every cut point, and gives what it gives without threads
THREADED: dict[str, Callable[[list[str], int], IterDataPipe[Any]]] = {
    "decode, then a buffer": lambda urls, n: (
        samples(urls).decode(Jitter(), threads=n, seed=2).buffer_shuffle(5, initial=3, seed=1)
    ),
    "a buffer, then decode": lambda urls, n: (
        samples(urls).buffer_shuffle(5, initial=3, seed=1).decode(Jitter(), threads=n, seed=2)
    ),
    "a buffer, map_samples, a buffer": lambda urls, n: (
        samples(urls)
        .buffer_shuffle(4, initial=2, seed=1)
        .decode()
        .map_samples(describe, threads=n)
        .buffer_shuffle(3, initial=2, seed=3)
    ),
    "map_dict, then with_epoch": lambda urls, n: (
        samples(urls).map_dict(cls=cls_text, threads=n).buffer_shuffle(4, seed=1).with_epoch(30)
    ),
    "prefetch_items, decode": lambda urls, n: (
        samples(urls)
        .prefetch_items(max(n, 1) * 3)
        .decode(Jitter(), threads=n, seed=2)
        .buffer_shuffle(4, initial=2, seed=1)
    ),
    "a buffer, prefetch_items, a buffer": lambda urls, n: (
        samples(urls)
        .buffer_shuffle(4, initial=2, seed=1)
        .prefetch_items(5)
        .map_samples(class_of, threads=n)
        .buffer_shuffle(3, seed=3)
    ),
    "map_tuple, batched": lambda urls, n: (
        samples(urls).decode().to_tuple("cls", "txt").map_tuple(str, len, threads=n).batched(4)
    ),
}


@pytest.mark.parametrize("name", sorted(THREADED))
def test_threads_give_what_one_thread_gives(name: str, stage_shards: Shards) -> None:
    build = THREADED[name]
    alone = [comparable(item) for item in build(stage_shards.paths, 0)]
    assert alone
    for threads in (1, 3):
        assert [comparable(item) for item in build(stage_shards.paths, threads)] == alone


@pytest.mark.parametrize("name", sorted(THREADED))
def test_a_state_saved_with_samples_in_flight_resumes_exactly(
    name: str, stage_shards: Shards
) -> None:
    assert_resumes_exactly(lambda: THREADED[name](stage_shards.paths, 3))


def test_a_buffer_after_a_buffer_resumes_exactly(stage_shards: Shards) -> None:
    """A buffer says where each sample it yields lives: a buffer after it saves its samples'
    places (before, it was refused)."""
    assert_resumes_exactly(
        lambda: samples(stage_shards.paths).buffer_shuffle(4, initial=2).buffer_shuffle(3)
    )


def test_the_state_names_the_samples_in_flight(stage_shards: Shards) -> None:
    pipe = samples(stage_shards.paths).map_samples(class_of, threads=2)
    items = iter(pipe)
    next(items)
    part = pipe.state_dict()["stages"]["4:SampleMapper"]
    assert len(part["flight"]) == 16 * (2 * AHEAD - 1)  # two places of 8 bytes a sample
    items.close()


class Gate:
    """A function that holds each call until ``count`` calls are under way at once, and fails
    the sample keyed ``fail``."""

    def __init__(self, count: int, fail: str | None = None) -> None:
        self.barrier = threading.Barrier(count, timeout=60)
        self.fail = fail

    def __call__(self, sample: dict[str, Any]) -> str:
        if sample["__key__"] == self.fail:
            raise ValueError("a bad sample")
        self.barrier.wait()  # BrokenBarrierError if fewer run at once
        return str(sample["__key__"])


def test_the_work_runs_in_as_many_threads_at_once(stage_shards: Shards) -> None:
    pipe = samples(stage_shards.paths[:2]).map_samples(Gate(3), threads=3)
    assert [str(k) for k in pipe] == [f"{s}-{i}" for s in range(2) for i in range(3)]


@pytest.mark.parametrize("threads", [1, 3])
def test_an_error_comes_in_its_place(threads: int) -> None:
    items = IterableWrapper([{"__key__": str(n)} for n in range(8)])
    kept = items.map_samples(
        lambda s: s["__key__"] if s["__key__"] != "3" else 1 / 0,
        handler=wds.warn_and_continue,
        threads=threads,
    )
    with pytest.warns(UserWarning, match="ZeroDivisionError"):
        assert list(kept) == ["0", "1", "2", "4", "5", "6", "7"]
    raising = items.map_samples(lambda s: 1 / int(s["__key__"] != "3"), threads=threads)
    got: list[Any] = []
    with pytest.raises(SampleError, match="ZeroDivisionError"):
        for item in raising:
            got.append(item)
    assert got == [1.0] * 3
    assert not pool_threads()
    stopped = items.map_samples(
        lambda s: 1 / int(s["__key__"] != "3"), handler=wds.ignore_and_stop, threads=threads
    )
    assert list(stopped) == [1.0] * 3


class Failing:
    """Numbers up to ``count``, then an error, as a reader's that its handler raises."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self) -> Iterator[int]:
        yield from range(self.count)
        raise OSError("the shard ends early")


@pytest.mark.parametrize("threads", [0, 2])
def test_an_error_of_the_source_comes_after_the_samples_before_it(threads: int) -> None:
    """The samples read before the source's error are yielded first, as without threads,
    although tasks of several of them were in flight."""
    pipe = IterableWrapper(Failing(40), deepcopy=False).map_samples(str, threads=threads)
    got: list[str] = []
    with pytest.raises(OSError, match="the shard ends early"):
        for item in pipe:
            got.append(item)
    assert got == [str(n) for n in range(40)]
    assert not pool_threads()


def test_no_thread_is_left_behind(stage_shards: Shards) -> None:
    pipe = samples(stage_shards.paths).decode(Jitter(), threads=3)
    items = iter(pipe)
    next(items)
    assert 1 <= len(pool_threads()) <= 3  # a pool starts threads as work waits for them
    items.close()  # an abandoned epoch
    assert not pool_threads()
    for _ in pipe:
        break
    assert not pool_threads()
    assert len(list(pipe)) == 12 and not pool_threads()


class Counted:
    """Numbers, noting how many were taken."""

    def __init__(self) -> None:
        self.taken = 0

    def __iter__(self) -> Iterator[int]:
        for number in range(1000):
            self.taken += 1
            yield number


def test_the_samples_in_flight_are_bounded() -> None:
    """Light work goes to the threads in tasks of up to MOST_IN_A_TASK samples."""
    numbers = Counted()
    pipe = IterableWrapper(numbers, deepcopy=False).map_samples(str, threads=4)
    items = iter(pipe)
    assert [next(items) for _ in range(5)] == ["0", "1", "2", "3", "4"]
    assert AHEAD * 4 < numbers.taken <= 5 + AHEAD * 4 * MOST_IN_A_TASK
    items.close()


def slow_str(number: int) -> str:
    time.sleep(2 * TASK_SECONDS)  # heavy work: never shorter than this
    return str(number)


def test_heavy_work_goes_one_sample_a_task() -> None:
    """Work that takes longer than a task should keeps a few samples a thread in flight."""
    numbers = Counted()
    pipe = IterableWrapper(numbers, deepcopy=False).map_samples(slow_str, threads=4)
    items = iter(pipe)
    assert [next(items) for _ in range(12)] == [str(n) for n in range(12)]
    assert numbers.taken <= 12 + AHEAD * 4
    items.close()


def test_samples_in_flight_whose_places_are_not_known_are_refused_by_name(
    stage_shards: Shards,
) -> None:
    """After ``with_epoch`` (which reads its source again), the reader's places do not reach
    the stage: with samples in flight, its state is refused, naming it and the stage between."""
    pipe = samples(stage_shards.paths).with_epoch(10).map_samples(class_of, threads=2)
    items = iter(pipe)
    next(items)
    with pytest.raises(
        ResumeError, match=r"SampleMapper \(map_samples\) cannot save its place .*with_epoch"
    ):
        pipe.state_dict()
    items.close()


def test_threads_must_be_a_count() -> None:
    with pytest.raises(ValueError, match="threads must be an int >= 0, got -1"):
        IterableWrapper([]).decode(threads=-1)


def prefetch_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "wdspipes-prefetch"]


def test_prefetch_reads_ahead_and_leaves_no_thread(stage_shards: Shards) -> None:
    numbers = Counted()
    pipe = IterableWrapper(numbers, deepcopy=False).prefetch_items(10)
    items = iter(pipe)
    assert next(items) == 0
    for _ in range(1000):  # the thread fills its queue meanwhile
        if numbers.taken >= 10:
            break
        threading.Event().wait(0.01)
    assert 10 <= numbers.taken <= 12  # ahead, and no more than its count (and one in hand)
    items.close()
    assert not prefetch_threads()


def test_an_error_before_prefetch_comes_in_its_place() -> None:
    def bad(sample: dict[str, Any]) -> dict[str, Any]:
        if sample["__key__"] == "3":
            raise ValueError("a bad sample")
        return sample

    items = IterableWrapper([{"__key__": str(n)} for n in range(8)]).map_samples(bad)
    got: list[str] = []
    with pytest.raises(SampleError, match="a bad sample"):
        for sample in items.prefetch_items(4):
            got.append(sample["__key__"])
    assert got == ["0", "1", "2"]
    assert not prefetch_threads()
