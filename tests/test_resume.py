"""Mid-epoch resume: a loader (StatefulDataLoader, DataLoader2) restored from a state taken
after k items yields what an uninterrupted run yields after its first k, for 0 and 2 workers,
across epoch boundaries, and through a killed process; a state saved with 2 workers loads into
0, 1 and 3 workers with every sample once (more of that in tests/test_elastic.py)."""

from __future__ import annotations

import json
import os
import pickle
import shlex
import signal
import subprocess
import sys
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import torch
from shardgen import Shards
from torch.utils.data import IterDataPipe
from torchdata.stateful_dataloader import StatefulDataLoader

import wdspipes as wds
from wdspipes.errors import ResumeError
from wdspipes.loaders import dataloader2

DL2 = pytest.mark.dataloader2  # needs DataLoader2: skipped with torchdata 0.10+ (conftest)
SHARDS, PER_SHARD = 8, 120
EPOCH = SHARDS * PER_SHARD
PAYLOAD = b"PAYLOAD-" * 8
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resume_training.py"


@pytest.fixture(scope="module")
def epoch_shards(tmp_path_factory: pytest.TempPathFactory) -> Shards:
    """``SHARDS`` tar shards of ``PER_SHARD`` samples: a ``cls`` and a ``bin`` payload."""
    shards = Shards.numbered(tmp_path_factory.mktemp("resume"), "s", SHARDS)
    for shard, path in enumerate(shards.paths):
        with wds.TarWriter(path) as sink:
            for index in range(PER_SHARD):
                sink.write({"__key__": f"{shard:02d}{index:04d}", "cls": index % 7, "bin": PAYLOAD})
    return shards


def webdataset(urls: str | list[str]) -> IterDataPipe[Any]:
    return (
        wds.WebDataset(urls, shardshuffle=True, seed=3)
        .buffer_shuffle(1000, initial=100, seed=4)
        .map_dict(cls=int)
        .to_tuple("__key__", "cls")
    )


def data_pipeline(urls: str) -> IterDataPipe[Any]:
    return wds.DataPipeline(
        wds.SimpleShardList(urls),
        wds.shuffle(SHARDS, initial=SHARDS, seed=5),
        wds.split_by_node,
        wds.split_by_worker,
        wds.tarfile_to_samples(),
        wds.shuffle(1000, seed=6),
        wds.decode(),
        wds.to_tuple("__key__", "cls"),
    )


def functional(urls: str) -> IterDataPipe[Any]:
    return (
        wds.ShardList(urls)
        .buffer_shuffle(SHARDS, initial=SHARDS, seed=10)
        .sharding_filter()
        .open_shards()
        .load_tar()
        .group_samples()
        .decode()
        .buffer_shuffle(1000, seed=7)
        .to_tuple("__key__", "cls")
    )


def resampled(urls: str) -> IterDataPipe[Any]:
    return (
        wds.WebDataset(urls, resampled=True, nshards=SHARDS, seed=8)
        .buffer_shuffle(1000, seed=9)
        .to_tuple("__key__", "cls")
    )


def in_threads(urls: str | list[str]) -> IterDataPipe[Any]:
    """Samples read ahead in a thread, then decoded in threads after the buffer: a state holds
    those in flight, and the read path's as of the sample read ahead last yielded."""
    return (
        wds.WebDataset(urls, shardshuffle=True, seed=11)
        .prefetch_items(64)
        .buffer_shuffle(1000, initial=100, seed=12)
        .decode(threads=3)
        .to_tuple("__key__", "cls")
    )


PIPELINES: dict[str, Callable[[str], IterDataPipe[Any]]] = {
    "WebDataset": webdataset,
    "DataPipeline": data_pipeline,
    "functional": functional,
    "resampled": resampled,
    "threads": in_threads,
}


def make_loader(kind: str, pipe: IterDataPipe[Any], workers: int) -> Any:
    """A StatefulDataLoader (``"stateful"``) or a DataLoader2 (``"dataloader2"``) over
    ``pipe``, with ``workers`` worker processes (forked: quick to start)."""
    context = "fork" if workers else None
    if kind == "stateful":
        return StatefulDataLoader(
            pipe, num_workers=workers, batch_size=None, multiprocessing_context=context
        )
    dl2 = dataloader2()
    service = (
        dl2.MultiProcessingReadingService(num_workers=workers, multiprocessing_context=context)
        if workers
        else None
    )
    return dl2.DataLoader2(pipe, reading_service=service)


def keys_in(item: Any) -> list[str]:
    """The keys of an item: a ``(key, label)`` pair (a list, through StatefulDataLoader), or a
    batch of them."""
    return [item[0]] if isinstance(item[0], str) else [key for key, _label in item]


def run(
    pipe: IterDataPipe[Any],
    workers: int,
    epochs: int,
    stop: int | None = None,
    state: dict[str, Any] | None = None,
    kind: str = "stateful",
    restore: Callable[[dict[str, Any]], Any] | None = None,
) -> tuple[list[list[str]], dict[str, Any] | None]:
    """Keys per epoch; with ``stop``, the loader's state after that many items. ``restore``
    makes the loader of a state instead (``DataLoader2.from_state``)."""
    if state is not None and restore is not None:
        loader = restore(state)
    else:
        loader = make_loader(kind, pipe, workers)
        if state is not None:
            loader.load_state_dict(state)
    seen: list[list[str]] = []
    count = 0
    try:
        for _ in range(epochs):
            seen.append([])
            for item in loader:
                seen[-1] += keys_in(item)
                count += 1
                if count == stop:
                    return seen, loader.state_dict()
        return seen, None
    finally:
        if kind == "dataloader2":
            loader.shutdown()


def resumed_run(
    build: Callable[[], IterDataPipe[Any]],
    workers: int,
    epochs: int,
    stop: int,
    kind: str = "stateful",
    restore: Callable[[dict[str, Any]], Any] | None = None,
) -> list[list[str]]:
    """Stop after ``stop`` items, then a new loader over a new pipeline goes on."""
    before, state = run(build(), workers, epochs, stop, kind=kind)
    assert state is not None
    state = pickle.loads(pickle.dumps(state))  # as a checkpoint file would keep it
    after, _ = run(
        build(), workers, epochs - len(before) + 1, state=state, kind=kind, restore=restore
    )
    return [*before[:-1], before[-1] + after[0], *after[1:]]


CUTS = {
    "first item": 1,
    "in the shuffle buffer's warm-up": 40,
    "middle of a shard": 187,
    "just before an epoch boundary": EPOCH - 1,
    "at an epoch boundary": EPOCH,
    "just after an epoch boundary": EPOCH + 1,
    "in the second epoch": EPOCH + 333,
}


@pytest.mark.slow
@pytest.mark.torchdata  # StatefulDataLoader with torchdata 0.11 too (make test)
@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.loaders)])
@pytest.mark.parametrize("name", list(PIPELINES))
def test_resume_gives_the_uninterrupted_sequence(
    epoch_shards: Shards, name: str, workers: int
) -> None:
    build = PIPELINES[name]
    expected, _ = run(build(epoch_shards.spec), workers, 2)
    assert [len(epoch) for epoch in expected] == [EPOCH, EPOCH]
    assert expected[0] != expected[1]  # the epochs differ: restored epoch numbers matter
    for cut, stop in CUTS.items():
        got = resumed_run(lambda: build(epoch_shards.spec), workers, 2, stop)
        assert got == expected, f"{name}, {workers} workers, cut {cut} (after {stop} items)"


@pytest.fixture(scope="module")
def stream_shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Shards]:
    """msgpack and CBOR shards in which every third item has no ``__key__`` (keyed by its
    number), by kind."""
    by_kind = {}
    for kind, writer in (("msgpack", wds.MsgpackWriter), ("cbor", wds.CborWriter)):
        shards = Shards.numbered(tmp_path_factory.mktemp(kind), "s", SHARDS, f".{kind}")
        for shard, path in enumerate(shards.paths):
            with writer(path) as sink:
                for index in range(PER_SHARD):
                    item = {"cls": shard * 1000 + index, "bin": PAYLOAD}
                    sink.write(item if index % 3 == 0 else {"__key__": f"k{index:04d}", **item})
        by_kind[kind] = shards
    return by_kind


def key_and_label(sample: dict[str, Any]) -> tuple[str, int]:
    return f"{sample['__key__']}/{sample['cls']}", sample["cls"]


def streams(urls: str) -> IterDataPipe[Any]:
    shards = wds.ShardList(urls).buffer_shuffle(SHARDS, initial=SHARDS, seed=11)
    opened = shards.sharding_filter().open_shards()
    loaded = opened.load_msgpack() if urls.endswith("msgpack") else opened.load_cbor()
    return loaded.buffer_shuffle(1000, seed=12).map_samples(key_and_label)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "workers"),
    [("msgpack", 0), pytest.param("msgpack", 2, marks=pytest.mark.loaders), ("cbor", 0)],
)
def test_stream_shards_resume_too(
    stream_shards: dict[str, Shards], kind: str, workers: int
) -> None:
    urls = stream_shards[kind].spec
    expected, _ = run(streams(urls), workers, 2)
    assert [len(set(epoch)) for epoch in expected] == [EPOCH, EPOCH]
    assert "000003/3" in expected[0]  # an item without a key, keyed by its number
    for cut, stop in CUTS.items():
        got = resumed_run(lambda: streams(urls), workers, 2, stop)
        assert got == expected, f"{kind}, {workers} workers, cut {cut} (after {stop} items)"


def test_stream_shards_resume_through_a_pipe(stream_shards: dict[str, Shards]) -> None:
    """A shard that cannot seek (``pipe:``) is read up to the saved offsets instead."""
    piped = f"pipe:cat {stream_shards['cbor'].spec}"
    expected = [key for key, _ in streams(piped)]
    for stop in (1, 150, EPOCH - 1):
        pipe = streams(piped)
        items = iter(pipe)
        first = [next(items)[0] for _ in range(stop)]
        state = pipe.state_dict()
        assert PAYLOAD not in pickle.dumps(state)
        again = streams(piped)
        again.load_state_dict(state)
        assert first + [key for key, _ in again] == expected


def test_torch_shuffle_before_the_reader_resumes_within_its_epoch(epoch_shards: Shards) -> None:
    """torch's own ``shuffle`` takes the loader's seed: the state keeps the epoch's."""

    def build() -> IterDataPipe[Any]:
        pipe = wds.ShardList(epoch_shards.spec).shuffle().sharding_filter().open_shards().load_tar()
        return pipe.group_samples().to_tuple("__key__", "cls")

    torch.manual_seed(0)  # the loader's seed for the reference run and the interrupted one
    expected, _ = run(build(), 0, 1)
    torch.manual_seed(0)
    before, state = run(build(), 0, 1, stop=200)
    torch.manual_seed(1)  # the resumed loader's own seed does not matter
    after, _ = run(build(), 0, 1, state=state)
    assert before[0] + after[0] == expected[0]


def test_a_for_loop_resumes_from_the_pipeline_state(epoch_shards: Shards) -> None:
    expected = [key for key, _ in webdataset(epoch_shards.spec)]
    for stop in (1, 99, 500, EPOCH - 1):
        pipe = webdataset(epoch_shards.spec)
        items = iter(pipe)
        first = [next(items)[0] for _ in range(stop)]
        again = webdataset(epoch_shards.spec)
        again.load_state_dict(pipe.state_dict())
        assert first + [key for key, _ in again] == expected


def dict_items(paths: list[str], tag: str = "train") -> list[dict[str, Any]]:
    """webdataset's shard items, each with a field its samples carry."""
    return [{"url": path, "split": tag, "shard": index} for index, path in enumerate(paths)]


def from_dict_items(items: list[dict[str, Any]]) -> IterDataPipe[Any]:
    return (
        wds.WebDataset(items, shardshuffle=True, seed=3)
        .buffer_shuffle(300, initial=100, seed=4)
        .to_tuple("__key__", "__split__", "__shard__")
    )


def test_dict_shard_items_resume_with_their_fields(epoch_shards: Shards) -> None:
    """The state keeps a checksum of the URLs alone, and samples read again from the shuffle
    buffer's places carry their shard item's fields, as those read on do."""
    items = dict_items(epoch_shards.paths)
    expected = list(from_dict_items(items))
    assert {(key[:2], shard) for key, _, shard in expected} == {
        (f"{shard:02d}", shard) for shard in range(SHARDS)
    }
    for stop in (1, 150, 500, EPOCH - 1):
        pipe = from_dict_items(items)
        taken = iter(pipe)
        first = [next(taken) for _ in range(stop)]
        state = pickle.loads(pickle.dumps(pipe.state_dict()))
        again = from_dict_items(dict_items(epoch_shards.paths))
        again.load_state_dict(state)
        assert first + list(again) == expected, f"after {stop} items"


def test_dict_shard_items_and_urls_resume_each_other(epoch_shards: Shards) -> None:
    """The checksum is over the URL: a state saved over dict items loads where the same shards
    are given as strings (and the fields are the new items'), and a changed URL is refused."""
    pipe = from_dict_items(dict_items(epoch_shards.paths))
    taken = iter(pipe)
    first = [next(taken)[0] for _ in range(200)]
    state = pipe.state_dict()

    def plain(items: list[Any]) -> IterDataPipe[Any]:
        return (
            wds.WebDataset(items, shardshuffle=True, seed=3)
            .buffer_shuffle(300, initial=100, seed=4)
            .to_tuple("__key__", "cls", "bin")
        )

    strings = plain(epoch_shards.paths)
    strings.load_state_dict(state)
    keys = [key for key, _, _ in strings]
    assert first + keys == [key for key, _, _ in from_dict_items(dict_items(epoch_shards.paths))]
    moved = plain(
        [{"url": f"{os.path.dirname(p)}/./{os.path.basename(p)}"} for p in epoch_shards.paths]
    )
    moved.load_state_dict(state)
    with pytest.raises(ResumeError, match="the shards differ"):
        list(moved)


def test_the_state_is_positions_not_sample_bytes(epoch_shards: Shards) -> None:
    pipe = webdataset(epoch_shards.spec)
    items = iter(pipe)
    for _ in range(300):  # the buffer holds 1000 - (300 - 1) ... about 700 samples
        next(items)
    state = pickle.dumps(pipe.state_dict())
    assert PAYLOAD not in state
    assert len(state) < 20 * 1000 + 4096  # (shard, offset) pairs and a few counters


def test_restoring_reads_only_the_shards_it_needs(
    epoch_shards: Shards, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = wds.WebDataset(epoch_shards.spec, seed=3).buffer_shuffle(50, initial=50, seed=4)
    items = iter(pipe)
    for _ in range(3 * PER_SHARD + 10):  # into the fourth shard; the buffer spans the third
        next(items)
    state = pipe.state_dict()
    opened: list[str] = []
    original = wds.read.opener.open_url

    def counting(url: str, **options: Any) -> Any:
        opened.append(os.path.basename(url))
        return original(url, **options)

    monkeypatch.setattr(wds.read.opener, "open_url", counting)
    again = wds.WebDataset(epoch_shards.spec, seed=3).buffer_shuffle(50, initial=50, seed=4)
    again.load_state_dict(state)
    next(iter(again))
    stages = state["stages"]
    refs = array("q", stages["5:BufferShuffler"]["buffer"])
    shard, _offset = stages["4:SampleGrouper"]["next"]
    needed = {f"s-{index}.tar" for index in [*refs[::2], shard]}  # no shard shuffle
    assert set(opened) == needed  # no other shard
    assert len(opened) <= len(needed) + 1  # once each; the current one again to read on
    assert "s-0.tar" not in opened


def key_of(sample: dict[str, Any]) -> str:
    return str(sample["__key__"])


@pytest.mark.parametrize("damage", ["cut", "gone"])
@pytest.mark.parametrize("kind", ["tar", "cbor"])
def test_a_shard_broken_where_the_state_resumes_leaves_the_next_shard_whole(
    tmp_path: Path, kind: str, damage: str
) -> None:
    """The saved offset is that of its shard: if the shard is cut or gone when the pipeline
    resumes, the handler skips it, and the next shard is read from its start."""
    for shard in range(3):
        path = tmp_path / f"s-{shard}.{kind}"
        with wds.TarWriter(str(path)) if kind == "tar" else wds.CborWriter(path) as sink:
            for index in range(5):
                sink.write({"__key__": f"{shard}-{index}", "txt": "x" * 100})

    def build() -> IterDataPipe[Any]:
        opened = wds.ShardList(f"{tmp_path}/s-{{0..2}}.{kind}").open_shards(
            handler=wds.warn_and_continue
        )
        handler = wds.warn_and_continue
        if kind == "tar":
            return opened.load_tar(handler=handler).group_samples().map_samples(key_of)
        return opened.load_cbor(handler=handler).map_samples(key_of)

    pipe = build()
    items = iter(pipe)
    assert [next(items) for _ in range(7)][-1] == "1-1"
    state = pipe.state_dict()
    [(shard, offset, *_)] = [p["next"] for p in state["stages"].values() if p and "next" in p]
    assert shard == 1 and offset > 0  # the second shard (index 1), after its second sample
    broken = tmp_path / f"s-1.{kind}"
    if damage == "cut":  # in the next sample
        broken.write_bytes(broken.read_bytes()[: offset + 10])
    else:
        broken.unlink()
    again = build()
    again.load_state_dict(state)
    with pytest.warns(wds.DataWarning, match="s-1"):
        rest = list(again)
    assert rest == [f"2-{index}" for index in range(5)]


def batches(urls: str | list[str]) -> IterDataPipe[Any]:
    return webdataset(urls).batched(16, collation_fn=None)


def batches_in_threads(urls: str | list[str]) -> IterDataPipe[Any]:
    return in_threads(urls).batched(16, collation_fn=None)


BATCHES = EPOCH // 16

DATALOADER2_CUTS = {
    "first batch": 1,
    "mid-epoch": 23,
    "at an epoch boundary": BATCHES,
    "in the second epoch": BATCHES + 9,
}


def from_state(workers: int) -> Callable[[dict[str, Any]], Any]:
    def restore(state: dict[str, Any]) -> Any:
        dl2 = dataloader2()
        service = dl2.MultiProcessingReadingService(
            num_workers=workers, multiprocessing_context="fork"
        )
        return dl2.DataLoader2.from_state(state, service)

    return restore


@pytest.mark.dataloader2
@pytest.mark.slow
@pytest.mark.parametrize("pipeline", [batches, batches_in_threads], ids=["batches", "threads"])
@pytest.mark.parametrize(
    ("workers", "how"),
    [
        (0, "load_state_dict"),
        pytest.param(2, "load_state_dict", marks=pytest.mark.loaders),
        pytest.param(2, "from_state", marks=pytest.mark.loaders),
    ],
)
def test_dataloader2_resumes_exactly(
    epoch_shards: Shards, workers: int, how: str, pipeline: Callable[[str], IterDataPipe[Any]]
) -> None:
    """The batches after the restore are those the uninterrupted run delivered next: the
    workers' prefetched batches are not lost, and the workers take their turns as before (with
    samples decoded in threads, those in flight are read again)."""
    build = lambda: pipeline(epoch_shards.spec)  # noqa: E731
    expected, _ = run(build(), workers, 2, kind="dataloader2")
    assert [len(epoch) for epoch in expected] == [EPOCH, EPOCH] and expected[0] != expected[1]
    restore = from_state(workers) if how == "from_state" else None
    for cut, stop in DATALOADER2_CUTS.items():
        got = resumed_run(build, workers, 2, stop, kind="dataloader2", restore=restore)
        assert got == expected, f"{workers} workers, {how}, cut {cut} (after {stop} batches)"


def once_each(epochs: Iterable[list[str]]) -> bool:
    counts = Counter(key for epoch in epochs for key in epoch)
    return len(counts) == EPOCH and set(counts.values()) == {1}


@pytest.mark.slow
@pytest.mark.loaders
@pytest.mark.parametrize(
    ("kind", "shards"),
    [("stateful", "local"), pytest.param("dataloader2", "local", marks=DL2), ("stateful", "pipe:")],
)
def test_a_state_of_two_workers_loads_into_other_worker_counts(
    epoch_shards: Shards, kind: str, shards: str
) -> None:
    """The rest of the epoch delivers every sample not yet delivered once; the next epoch is a
    whole one. (Before, another worker count was refused.) ``pipe:`` shards are read ahead."""
    urls: str | list[str] = epoch_shards.spec
    if shards == "pipe:":
        urls = [f"pipe:cat {shlex.quote(path)}" for path in epoch_shards.paths]
    before, state = run(batches(urls), 2, 1, stop=11, kind=kind)
    assert state is not None
    for workers in (0, 1, 3):
        after, _ = run(batches(urls), workers, 2, state=state, kind=kind)
        assert once_each([before[0], after[0]]), f"{kind}: 2 workers into {workers}"
        assert once_each([after[1]]), f"{kind}: the epoch after, {workers} workers"


def test_another_pipeline_or_shard_list_is_refused(epoch_shards: Shards, tmp_path: Path) -> None:
    pipe = webdataset(epoch_shards.spec)
    items = iter(pipe)
    next(items)
    state = pipe.state_dict()
    other = wds.WebDataset(epoch_shards.spec).to_tuple("__key__", "cls")
    with pytest.raises(ResumeError, match="saved from another pipeline"):
        other.load_state_dict(state)
    with pytest.raises(ResumeError, match="not a wdspipes pipeline state"):
        other.load_state_dict({"format": "something else"})
    fewer = epoch_shards.spec.replace(f"{{0..{SHARDS - 1}}}", "{0..3}")
    renamed = webdataset(fewer)
    renamed.load_state_dict(state)
    with pytest.raises(ResumeError, match="the shards differ"):
        list(renamed)


def test_one_readers_state_in_another_reader_is_refused(epoch_shards: Shards) -> None:
    """Reader 0's state alone does not say what reader 1 had left: it loads into reader 0 of
    the same split only (the states of all readers merged load anywhere: test_elastic.py)."""
    pipe = webdataset(epoch_shards.spec)
    wds_apply_sharding(pipe, 2, 0)
    items = iter(pipe)
    next(items)
    state = pipe.state_dict()
    for readers, reader in [(2, 1), (3, 0), (1, 0)]:
        again = webdataset(epoch_shards.spec)
        wds_apply_sharding(again, readers, reader)
        with pytest.raises(ResumeError, match=r"reader 0's of a job .* among 2 readers .*"):
            again.load_state_dict(state)


def wds_apply_sharding(pipe: IterDataPipe[Any], instances: int, index: int) -> None:
    from torch.utils.data.graph_settings import apply_sharding

    apply_sharding(pipe, instances, index)


def evens(items: Any) -> Any:
    return (item for item in items if int(item["__key__"]) % 2 == 0)


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda urls: wds.DataPipeline(urls, wds.tarfile_to_samples(), evens), "IteratorStage"),
        (
            lambda urls: wds.WebDataset(urls).shuffle(buffer_size=10).to_tuple("__key__"),
            r"ShufflerIterDataPipe \(shuffle\)",
        ),
        (
            lambda urls: wds.WebDataset(urls).batched(7, collation_fn=None).buffer_shuffle(3),
            r"Batcher \(batched\)",
        ),
        (
            lambda urls: wds.WebDataset(urls).batched(7, collation_fn=None).unbatched(),
            r"Unbatcher \(unbatched\)",
        ),
        (lambda urls: wds.ShardList(urls).open_shards().load_tar(), "the end of the pipeline"),
    ],
)
def test_a_stage_that_cannot_save_its_state_is_named(
    epoch_shards: Shards, build: Callable[[str], IterDataPipe[Any]], named: str
) -> None:
    pipe = build(epoch_shards.spec)
    items = iter(pipe)
    next(items)
    with pytest.raises(ResumeError, match=named):
        pipe.state_dict()


def test_stages_after_the_buffer_keep_their_counts(epoch_shards: Shards) -> None:
    def build() -> IterDataPipe[Any]:
        return (
            wds.WebDataset(epoch_shards.spec, resampled=True, seed=1)
            .buffer_shuffle(100, seed=2)
            .with_epoch(250)
            .islice(3, None, 2)
            .batched(4, collation_fn=None)
        )

    expected = [[s["__key__"] for s in batch] for batch in build()]
    pipe = build()
    first = [[s["__key__"] for s in batch] for batch in take(pipe, 10)]
    again = build()
    again.load_state_dict(pipe.state_dict())
    rest = [[s["__key__"] for s in batch] for batch in again]
    assert first + rest == expected


def take(pipe: IterDataPipe[Any], count: int) -> list[Any]:
    items = iter(pipe)
    return [next(items) for _ in range(count)]


def kill_at_step(common: list[str], directory: Path, step: int) -> None:
    """Run the example slowly and SIGKILL it once it has trained ``step`` steps."""
    child = subprocess.Popen([*common, "--directory", str(directory), "--slow"])
    try:
        deadline = time.monotonic() + 240
        while _steps(directory) < step:
            assert child.poll() is None, "the training process ended before it was killed"
            assert time.monotonic() < deadline
            time.sleep(0.2)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL


@pytest.mark.dataloader2
@pytest.mark.slow
@pytest.mark.loaders
def test_training_resumes_after_sigkill(epoch_shards: Shards, tmp_path: Path) -> None:
    """A training process writes a checkpoint, is killed with SIGKILL, and a new process
    goes on from the checkpoint: the samples trained on are those of an uninterrupted run."""
    common = [sys.executable, str(EXAMPLE), "--shards", epoch_shards.spec]
    common += ["--epochs", "2", "--workers", "2", "--checkpoint-every", "25"]
    whole = tmp_path / "whole"
    subprocess.run([*common, "--directory", str(whole)], check=True, timeout=300)
    expected = json.loads((whole / "trained.json").read_text())
    assert len(expected) == 2 * EPOCH

    killed = tmp_path / "killed"
    kill_at_step(common, killed, 80)  # past the checkpoint at step 75, in the second epoch
    subprocess.run([*common, "--directory", str(killed)], check=True, timeout=300)
    assert json.loads((killed / "trained.json").read_text()) == expected


@pytest.mark.slow
@pytest.mark.loaders
@pytest.mark.parametrize(
    ("loader", "workers"), [pytest.param("dataloader2", 3, marks=DL2), ("stateful", 0)]
)
def test_training_resumes_with_another_worker_count(
    epoch_shards: Shards, tmp_path: Path, loader: str, workers: int
) -> None:
    """The example killed mid-epoch with 2 workers, restarted with another count: each epoch
    trains on every sample once."""
    common = [sys.executable, str(EXAMPLE), "--shards", epoch_shards.spec, "--loader", loader]
    common += ["--epochs", "2", "--checkpoint-every", "25"]
    kill_at_step([*common, "--workers", "2"], tmp_path, 30)  # past step 25, in the first epoch
    done = subprocess.run(
        [*common, "--workers", str(workers), "--directory", str(tmp_path)],
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert f"resuming epoch 0 at step 25 with {workers} workers" in done.stdout
    assert f"epoch 0: {EPOCH} samples, {EPOCH} distinct" in done.stdout
    assert f"epoch 1: {EPOCH} samples, {EPOCH} distinct" in done.stdout


def _steps(directory: Path) -> int:
    log = directory / "trained.log"
    return len(log.read_text().splitlines()) if log.exists() else 0
