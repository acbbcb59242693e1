"""Large raw fields handed from worker processes through shared-memory slots
(wdspipes/samples/raw_handover.py, over the slots of wdspipes/samples/handover.py).

The promise under test: what arrives in the training process is exactly what was read, in the
types it would have without slots (``bytes``, lists, tuples, dicts, SampleLists), under torch's
DataLoader and DataLoader2, batched and not; with no slot free the items cross pickled, as
before; a worker or a training process killed mid-epoch leaves no shared memory behind.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

import wdspipes as wds
from wdspipes.errors import WorkerError
from wdspipes.loaders.loader_state import Tagged
from wdspipes.samples import handover, raw_handover
from wdspipes.samples.batch import SampleList, collate
from wdspipes.samples.handover import RAW_MIN_BYTES, BytesColumn
from wdspipes.samples.raw_handover import CrossingBytes

BIG = 100_000  # bytes of a sample's ``bin``: over RAW_MIN_BYTES
SAMPLES = 24  # in 2 shards


def big(number: int) -> bytes:
    return hashlib.sha256(str(number).encode()).digest() * (BIG // 32) + bytes([number % 251])


# -- no worker process -----------------------------------------------------------------------


def test_outside_workers_columns_and_values_stay_plain() -> None:
    batch = collate([(big(n), str(n).encode()) for n in range(3)])
    assert [type(column) for column in batch] == [list, list]
    assert handover.pack_bytes([big(0)]) is None
    for value in (BytesColumn([big(1)]), SampleList([{"bin": big(2)}])):
        assert pickle.loads(ForkingPickler.dumps(value)) == value
    tagged = pickle.loads(ForkingPickler.dumps(Tagged((big(3), b"3"), 7, 1)))
    assert (tagged.value, tagged.number, tagged.epoch) == ((big(3), b"3"), 7, 1)


def test_outside_workers_a_front_end_iterates_as_its_stage() -> None:
    """The training process (or a test) iterates a pipeline with nothing added per item."""
    from wdspipes.core.stage import Stage

    pipe = wds.WebDataset(["a.tar"]).to_tuple("bin", "cls")
    assert type(iter(pipe)) is type(Stage.__iter__(pipe))
    assert type(pipe).__iter__ is not Stage.__iter__  # the front end's, which checks per epoch


def test_the_carriers_are_plain_types_to_pickle_and_keep_theirs_when_copied() -> None:
    column = BytesColumn([b"a", b"b"])
    assert type(copy.copy(column)) is BytesColumn  # torch's DataLoader copies lists so
    assert type(pickle.loads(pickle.dumps(column))) is list
    value = pickle.loads(pickle.dumps(CrossingBytes(b"abc")))
    assert type(value) is bytes and value == b"abc"


@pytest.mark.parametrize(
    "value,depth",
    [
        ((BytesColumn([big(0), big(1)]), [b"0", b"1"]), 3),
        (SampleList([{"__key__": "a", "bin": big(2), "cls": b"2"}, (big(3), b"3")]), 2),
        ({"__key__": "b", "bin": big(4), "txt": b"small"}, 3),
        ([big(5), [big(6)]], 1),  # the nested one is beyond the depth: it stays in place
    ],
)
def test_stripped_and_filled_again_a_value_is_itself(value: Any, depth: int) -> None:
    fields: list[bytes] = []
    skeleton = raw_handover._strip(value, fields, depth)
    assert fields and all(len(field) >= RAW_MIN_BYTES for field in fields)
    again = raw_handover._fill(pickle.loads(pickle.dumps(skeleton)), fields, depth)
    assert again == value
    assert type(again) is (list if type(value) is BytesColumn else type(value))


def test_a_value_without_large_fields_is_left_as_it_is() -> None:
    value = ({"bin": b"x" * (RAW_MIN_BYTES - 1)}, [b"y"])
    fields: list[bytes] = []
    assert raw_handover._strip(value, fields, 3) is value and not fields


# -- through the loaders ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def raw_shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("raw")
    urls = []
    for shard in range(2):
        path = str(Path(root, f"raw-{shard}.tar"))
        with wds.TarWriter(path, encoder=False) as writer:
            for number in range(shard * SAMPLES // 2, (shard + 1) * SAMPLES // 2):
                writer.write(
                    {"__key__": f"{number:04d}", "bin": big(number), "cls": b"%d" % number}
                )
        urls.append(path)
    return urls


def expected() -> dict[bytes, bytes]:
    return {b"%d" % number: big(number) for number in range(SAMPLES)}


def delivered(items: Iterator[Any], form: str) -> dict[bytes, bytes]:
    """The samples of an epoch by ``cls``, checking the types of what arrived."""
    found = {}
    for item in items:
        if form == "batched":
            bins, labels = item
            assert type(bins) is list and type(labels) is list
            rows = list(zip(labels, bins, strict=True))
        elif form == "samples":
            assert type(item) is SampleList and all(type(sample) is dict for sample in item)
            rows = [(sample["cls"], sample["bin"]) for sample in item]
        else:
            assert type(item) in (tuple, list)  # torch's DataLoader makes tuples lists
            rows = [(item[1], item[0])]
        for label, data in rows:
            assert type(data) is bytes and type(label) is bytes
            found[label] = data
    return found


def pipeline(urls: list[str], form: str) -> Any:
    if form == "samples":
        return wds.WebDataset(urls).batched(5, collation_fn=None)
    pipe = wds.WebDataset(urls).to_tuple("bin", "cls")
    return pipe.batched(5) if form == "batched" else pipe


class Unpacked:
    """Counts, in the training process, the items whose large values came through a slot."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        unpack = handover.unpack_bytes

        def counted(*args: Any) -> list[bytes]:
            self.count += 1
            return unpack(*args)

        # the reductions find it in raw_handover's module; the handover's is patched too, so
        # that a call by either name counts
        monkeypatch.setattr(handover, "unpack_bytes", counted)
        monkeypatch.setattr(raw_handover, "unpack_bytes", counted)


def under_dataloader(pipe: Any, context: str = "fork") -> Iterator[Any]:
    loader = DataLoader(pipe, batch_size=None, num_workers=2, multiprocessing_context=context)
    return iter(loader)


@pytest.mark.loaders
@pytest.mark.parametrize("form", ["batched", "samples", "unbatched"])
@pytest.mark.parametrize("slots", [True, False])
def test_under_dataloader_raw_bytes_arrive_as_read(
    raw_shards: list[str], form: str, slots: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not slots:
        monkeypatch.setattr(handover, "MAX_SLOTS", 0)  # forked workers inherit it
    unpacked = Unpacked(monkeypatch)
    assert delivered(under_dataloader(pipeline(raw_shards, form)), form) == expected()
    assert (unpacked.count > 0) == slots


@pytest.mark.loaders
@pytest.mark.parametrize("context", ["spawn", "forkserver"])
@pytest.mark.parametrize("form", ["batched", "unbatched"])
def test_under_dataloader_with_spawned_workers(
    raw_shards: list[str], context: str, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers not forked are workers too, and their parent is the training process (not the
    fork server): the slots' descriptors go to it."""
    unpacked = Unpacked(monkeypatch)
    items = under_dataloader(pipeline(raw_shards, form), context)
    assert delivered(items, form) == expected()
    assert unpacked.count > 0


@pytest.mark.loaders
def test_under_stateful_dataloader_raw_bytes_arrive_as_read(
    raw_shards: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    unpacked = Unpacked(monkeypatch)
    pipe = pipeline(raw_shards, "unbatched")
    loader = StatefulDataLoader(
        pipe, batch_size=None, num_workers=2, multiprocessing_context="fork"
    )
    assert delivered(iter(loader), "unbatched") == expected()
    assert unpacked.count > 0


def types_of(value: Any) -> Any:
    """The types of ``value`` and of what it holds, all the way down."""
    if isinstance(value, dict):
        return type(value), {key: types_of(each) for key, each in value.items()}
    if isinstance(value, list | tuple):
        return type(value), [types_of(each) for each in value]
    return type(value)


@pytest.mark.loaders
def test_under_dataloader_collating_in_its_workers_items_have_the_types_they_had(
    raw_shards: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's ``DataLoader`` batching the pipeline's samples itself (``batch_size=4``, its
    ``default_collate`` in the workers) gives what it gave without slots, in the same types."""

    def epoch() -> list[Any]:
        pipe = pipeline(raw_shards, "unbatched")
        loader = DataLoader(pipe, batch_size=4, num_workers=2, multiprocessing_context="fork")
        return list(loader)

    unpacked = Unpacked(monkeypatch)
    with_slots = epoch()
    assert unpacked.count > 0
    monkeypatch.setattr(handover, "MAX_SLOTS", 0)
    unpacked.count = 0
    without = epoch()
    assert unpacked.count == 0
    assert with_slots == without
    assert [types_of(item) for item in with_slots] == [types_of(item) for item in without]


def dataloader2(pipe: Any) -> Any:
    from wdspipes.loaders import dataloader2

    module = dataloader2()
    service = module.MultiProcessingReadingService(num_workers=2, multiprocessing_context="fork")
    return module.DataLoader2(pipe, reading_service=service)


@pytest.mark.dataloader2
@pytest.mark.loaders
@pytest.mark.parametrize("form", ["batched", "samples", "unbatched"])
@pytest.mark.parametrize("slots", [True, False])
def test_under_dataloader2_raw_bytes_arrive_as_read(
    raw_shards: list[str], form: str, slots: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not slots:
        monkeypatch.setattr(handover, "MAX_SLOTS", 0)
    unpacked = Unpacked(monkeypatch)
    loader = dataloader2(pipeline(raw_shards, form))
    try:
        assert delivered(iter(loader), form) == expected()
        assert delivered(iter(loader), form) == expected()  # the same workers, slots reused
    finally:
        loader.shutdown()
    assert (unpacked.count > 0) == slots


@pytest.mark.loaders
@pytest.mark.parametrize("form", ["batched", "unbatched"])
def test_values_larger_than_the_pool_allows_cross_pickled(
    raw_shards: list[str], form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How large a field is, the data says: one over what a worker's pool may hold (its bound
    made smaller than any item's raw values here) takes no slot, and arrives as read."""
    monkeypatch.setattr(handover, "MAX_POOL_BYTES", BIG)  # forked workers inherit it
    unpacked = Unpacked(monkeypatch)
    assert delivered(under_dataloader(pipeline(raw_shards, form)), form) == expected()
    assert unpacked.count == 0


def _pickle_ahead(connection: Any) -> None:
    """In a worker: pickle every batch before the parent reads any, so that slots run out."""
    batches = [
        collate([(big(n), b"%d" % n) for n in range(start, start + 2)]) for start in (0, 2, 4)
    ]
    pickled = [bytes(ForkingPickler.dumps(batch)) for batch in batches]
    pool = handover._pool
    connection.send(0 if pool is None else len(pool.slots))
    for each in pickled:
        connection.send_bytes(each)
    connection.recv()  # the parent has them all: the worker's descriptors may go now


@pytest.mark.loaders
def test_with_every_slot_busy_items_cross_pickled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handover, "MAX_SLOTS", 2)
    unpacked = Unpacked(monkeypatch)
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    child = context.Process(target=_pickle_ahead, args=(theirs,))
    child.start()
    try:
        assert ours.recv() == 2  # the third batch found no slot
        batches = [pickle.loads(ours.recv_bytes()) for _ in range(3)]
        ours.send("done")
    finally:
        child.join()
    assert child.exitcode == 0
    assert unpacked.count == 2
    for start, (bins, labels) in zip((0, 2, 4), batches, strict=True):
        assert type(bins) is list and bins == [big(start), big(start + 1)]
        assert labels == [b"%d" % start, b"%d" % (start + 1)]


# -- nothing left behind ---------------------------------------------------------------------


def slot_files(pid: int | str = "self") -> set[str]:
    """The inodes of the handover's slots that process ``pid`` maps or holds open."""
    found = set()
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if "memfd:wdspipes-batch" in line:
                found.add(line.split()[4])
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd) if fd.exists() else ""
            if target.startswith("/memfd:wdspipes-batch"):
                found.add(str(fd.stat().st_ino))
    except (FileNotFoundError, ProcessLookupError):
        pass
    return found


def shared_memory_files() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def settled(look: Any, seconds: float = 10.0) -> Any:
    """What ``look()`` finally gives: the first empty answer within ``seconds``, or the last."""
    deadline = time.monotonic() + seconds
    while (found := look()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def worker_slots(pid: int) -> set[str]:
    """The inodes of the slots of worker ``pid`` that this process maps."""
    return {str(key[1]) for key, mapping in handover._mappings.items() if mapping.owner() == pid}


@pytest.mark.dataloader2
@pytest.mark.loaders
def test_a_dataloader2_worker_killed_mid_epoch_leaves_no_slot(raw_shards: list[str]) -> None:
    before = shared_memory_files()
    loader = dataloader2(pipeline(raw_shards * 20, "batched"))
    items = iter(loader)
    next(items)
    service = loader.reading_service
    pids = [process.pid for process, _, _ in service._worker_processes]
    theirs = set().union(*(worker_slots(pid) for pid in pids))
    assert theirs
    os.kill(pids[0], signal.SIGKILL)
    with pytest.raises(WorkerError):
        for _ in items:
            pass
    loader.shutdown()
    gc.collect()
    assert not settled(lambda: theirs & slot_files())
    assert not settled(lambda: shared_memory_files() - before)


@pytest.mark.loaders
def test_a_dataloader_worker_killed_mid_epoch_leaves_no_slot(raw_shards: list[str]) -> None:
    before = shared_memory_files()
    loader = DataLoader(
        pipeline(raw_shards * 20, "batched"),
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
    )
    items = iter(loader)
    next(items)
    pids = [worker.pid for worker in items._workers]  # type: ignore[attr-defined]
    theirs = set().union(*(worker_slots(pid) for pid in pids))
    assert theirs
    # torch's handler of SIGCHLD raises wherever the test is when the worker's end is noticed
    # (in pytest's own code, once): without it, the loader finds the worker dead as it waits
    handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        # torch's error naming the worker; or, for an item in the pipe from the dead worker
        # whose slot crosses with its descriptor, the broken connection to fetch it (as torch's
        # own tensors crossing that way)
        with pytest.raises((RuntimeError, OSError, EOFError)):
            os.kill(pids[0], signal.SIGKILL)
            for _ in items:
                pass
    finally:
        items._shutdown_workers()  # type: ignore[attr-defined]
        signal.signal(signal.SIGCHLD, handler)
    del items
    gc.collect()
    # torch's DataLoader tells no one: the dead worker's slots go at the next slot mapped, or
    # as here when asked
    handover.forget_dead_workers()
    assert not settled(lambda: theirs & slot_files())
    assert not settled(lambda: shared_memory_files() - before)


TRAINING = str(Path(__file__).with_name("training_process.py"))


@pytest.mark.loaders
@pytest.mark.parametrize(
    "loader", ["dataloader", pytest.param("dataloader2", marks=pytest.mark.dataloader2)]
)
def test_a_training_process_killed_mid_epoch_leaves_no_slot(
    raw_shards: list[str], loader: str
) -> None:
    before = shared_memory_files()
    process = subprocess.Popen(
        [sys.executable, TRAINING, loader, "fork", raw_shards[0], "--raw"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "training"
    workers = children(process.pid)
    assert workers and all(slot_files(pid) for pid in workers)
    process.kill()
    process.wait()
    process.stdout.close()
    # the workers end by themselves within seconds, and their slots with them
    assert not settled(lambda: [pid for pid in workers if running(pid)], 30)
    assert not settled(lambda: shared_memory_files() - before)


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def running(pid: int) -> bool:
    """Whether process ``pid`` is there and not a zombie (whose files are all closed)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
