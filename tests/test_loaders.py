"""wdspipes pipelines under real loaders: DataLoader2, plain DataLoader and ``for`` loops.

What this file proves, for ``WebDataset(...)``, the ``DataPipeline(...)`` form and the functional
chain alike:

- exactly once: every epoch yields every sample exactly once, under DataLoader2 with two worker
  processes or in process, under plain DataLoader with two workers (persistent or not), and in
  a plain ``for`` loop; worker processes really share the work;
- seeding: shard shuffles (and shard resampling) upstream of the sharding filter agree across
  workers, so the shard order splits disjointly; the order changes from epoch to epoch; a fixed
  ``seed=`` makes it depend only on the seed and the epoch number; without one,
  ``DataLoader2.seed(n)`` decides; a sample shuffle downstream of the filter runs a stream of
  its own in each worker;
- resampling: ``nshards`` draws per epoch in total, split among the workers, each read once;
- abandoning: breaking out of an epoch leaves no child process behind (running or zombie) and
  no unclosed file or pipe (the pytest configuration turns ResourceWarning into errors).

Shard orders are compared through ``draws_by_reader``: the shards each reader (worker process)
started, in its own order. The sharding filter hands the i-th shard of the shuffled list to
worker ``i % num_workers``, so an in-process order predicts the per-worker sequences exactly,
without relying on how a loader interleaves its workers' outputs.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shlex
import signal
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterDataPipe

with warnings.catch_warnings():
    # the message starts with a banner of newlines: match across them
    warnings.filterwarnings("ignore", message=r"(?s).*deprecated", category=UserWarning)
    with contextlib.suppress(ImportError):  # torchdata 0.10+: tests marked dataloader2 skip
        from torchdata.dataloader2 import (
            DataLoader2,
            InProcessReadingService,
            MultiProcessingReadingService,
        )

import shardgen

import wdspipes as wds

pytestmark = pytest.mark.loaders
DL2 = pytest.mark.dataloader2  # needs DataLoader2: skipped with torchdata 0.10+ (conftest)

Sample = dict[str, Any]
Signature = list[tuple[str, ...]]

NSHARDS = 6
PER_SHARD = 20
ORDER_SHARDS = 8  # 8! orders: two epochs agreeing by chance is negligible
ORDER_PER_SHARD = 3
EPOCHS = 3
WORKERS = 2


# --- pipelines under test (module level, so that they pickle) -------------------------------


def webdataset(urls: list[str]) -> IterDataPipe[Sample]:
    return wds.WebDataset(urls, shardshuffle=True)


def datapipeline(urls: list[str]) -> IterDataPipe[Sample]:
    return wds.DataPipeline(
        wds.SimpleShardList(urls),
        wds.shuffle(100),
        wds.split_by_node,
        wds.split_by_worker,
        wds.tarfile_to_samples(),
    )


def functional(urls: list[str]) -> IterDataPipe[Sample]:
    return wds.ShardList(urls).shuffle().sharding_filter().open_shards().load_tar().group_samples()


BUILDERS = [webdataset, datapipeline, functional]


def tag_reader(sample: Sample) -> Sample:
    """Record which process read the sample: one process per worker."""
    sample["__pid__"] = os.getpid()
    return sample


# --- readers: each returns the samples of each epoch ----------------------------------------


def mp_service(num_workers: int) -> MultiProcessingReadingService:
    return MultiProcessingReadingService(num_workers=num_workers, multiprocessing_context="fork")


def service_for(num_workers: int) -> InProcessReadingService | MultiProcessingReadingService:
    return mp_service(num_workers) if num_workers else InProcessReadingService()


def read_dataloader2(
    pipe: IterDataPipe[Sample],
    epochs: int,
    service: Any = None,
    loader_seed: int | None = None,
) -> list[list[Sample]]:
    """Iterate one DataLoader2 ``epochs`` times; always shut it down."""
    loader = DataLoader2(pipe, reading_service=service)
    try:
        if loader_seed is not None:
            loader.seed(loader_seed)
        return [list(loader) for _ in range(epochs)]
    finally:
        loader.shutdown()


def read_dataloader(
    pipe: IterDataPipe[Sample], epochs: int, num_workers: int = 0, persistent_workers: bool = False
) -> list[list[Sample]]:
    """Iterate one plain DataLoader (no batching) ``epochs`` times."""
    options: dict[str, Any] = {}
    if num_workers:
        options = {"multiprocessing_context": "fork", "persistent_workers": persistent_workers}
    loader = DataLoader(pipe, batch_size=None, num_workers=num_workers, **options)
    return [list(loader) for _ in range(epochs)]


def read_for_loop(pipe: IterDataPipe[Sample], epochs: int) -> list[list[Sample]]:
    return [list(pipe) for _ in range(epochs)]


# --- what to compare ------------------------------------------------------------------------


def all_keys(nshards: int, per_shard: int) -> list[str]:
    return sorted(
        f"{shard:03d}-{sample:05d}" for shard in range(nshards) for sample in range(per_shard)
    )


def keys_per_epoch(epochs: list[list[Sample]]) -> list[list[str]]:
    return [sorted(sample["__key__"] for sample in samples) for samples in epochs]


def assert_exactly_once(epochs: list[list[Sample]], expected: list[str]) -> None:
    """Each epoch holds every expected key once: sorted lists, so duplicates count."""
    for number, keys in enumerate(keys_per_epoch(epochs), start=1):
        counts = Counter(keys)
        duplicated = sorted(key for key, count in counts.items() if count > 1)
        missing = sorted(set(expected) - counts.keys())
        assert keys == expected, (
            f"epoch {number}: {len(keys)} samples for {len(expected)} keys; "
            f"duplicated {duplicated[:5]}, missing {missing[:5]}"
        )


def readers(samples: list[Sample]) -> set[int]:
    return {sample["__pid__"] for sample in samples}


def draws_by_reader(samples: list[Sample]) -> Signature:
    """The shards each reader started (a shard starts at its sample 00000), in that reader's
    order: one tuple per reader, sorted, so the result does not depend on worker numbering or
    on how the loader interleaved the workers."""
    per_reader: dict[int, list[str]] = {}
    for sample in samples:
        shard, _, index = sample["__key__"].partition("-")
        if int(index) == 0:
            per_reader.setdefault(sample.get("__pid__", 0), []).append(shard)
    return sorted(tuple(draws) for draws in per_reader.values())


def split_among(order: tuple[str, ...], num_workers: int) -> Signature:
    """What each worker reads of a shard order: the sharding filter deals the order out."""
    return sorted(tuple(order[worker::num_workers]) for worker in range(num_workers))


def in_process_order(signature: Signature) -> tuple[str, ...]:
    (order,) = signature  # one reader
    return order


def child_processes() -> dict[int, str]:
    """``pid -> state`` (``R``, ``S``, ``Z`` for zombie, ...) of every child of this process."""
    me = os.getpid()
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat_file:
                stat = stat_file.read()
        except OSError:  # ended meanwhile
            continue
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if int(ppid) == me:
            children[int(entry)] = state
    return children


@contextlib.contextmanager
def no_processes_left_behind() -> Iterator[set[int]]:
    """Fail if, once the block is done and garbage collected, a child process started inside
    it still exists: running, or a zombie nobody reaped. Yields the children present before."""
    before = set(child_processes())
    yield before
    gc.collect()
    left = {pid: state for pid, state in child_processes().items() if pid not in before}
    zombies = sorted(pid for pid, state in left.items() if state == "Z")
    assert not left, f"child processes left behind (pid: state): {left}; zombies: {zombies}"


# --- shards -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return shardgen.write_shards(tmp_path_factory.mktemp("shards"), NSHARDS, PER_SHARD)


@pytest.fixture(scope="module")
def order_shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return shardgen.write_shards(tmp_path_factory.mktemp("order"), ORDER_SHARDS, ORDER_PER_SHARD)


# --- 1-3: exactly once per epoch ----------------------------------------------------------------


@pytest.mark.dataloader2
@pytest.mark.parametrize("build", BUILDERS)
def test_dataloader2_workers_read_every_sample_once_per_epoch(
    shards: list[str], build: Callable[[list[str]], IterDataPipe[Sample]]
) -> None:
    epochs = read_dataloader2(build(shards).map(tag_reader), EPOCHS, mp_service(WORKERS))
    assert_exactly_once(epochs, all_keys(NSHARDS, PER_SHARD))
    for samples in epochs:
        assert len(readers(samples)) == WORKERS, "the workers did not share the work"


IN_PROCESS_READERS = [
    pytest.param(
        lambda pipe: read_dataloader2(pipe, EPOCHS, InProcessReadingService()),
        id="dl2-in-process",
        marks=pytest.mark.dataloader2,
    ),
    pytest.param(
        lambda pipe: read_dataloader2(pipe, EPOCHS, MultiProcessingReadingService(num_workers=0)),
        id="dl2-mp-0-workers",
        marks=[
            pytest.mark.dataloader2,
            pytest.mark.filterwarnings("ignore:Please use `InProcessReadingService`:UserWarning"),
        ],
    ),
    pytest.param(lambda pipe: read_dataloader2(pipe, EPOCHS), id="dl2-no-service", marks=DL2),
    pytest.param(lambda pipe: read_for_loop(pipe, EPOCHS), id="for-loop"),
]


@pytest.mark.parametrize("read", IN_PROCESS_READERS)
@pytest.mark.parametrize("build", BUILDERS)
def test_in_process_reading_yields_every_sample_once_per_epoch(
    shards: list[str],
    build: Callable[[list[str]], IterDataPipe[Sample]],
    read: Callable[[IterDataPipe[Sample]], list[list[Sample]]],
) -> None:
    assert_exactly_once(read(build(shards)), all_keys(NSHARDS, PER_SHARD))


@pytest.mark.parametrize("persistent_workers", [False, True], ids=["fresh-workers", "persistent"])
@pytest.mark.parametrize("build", BUILDERS)
def test_dataloader_workers_read_every_sample_once_per_epoch(
    shards: list[str], build: Callable[[list[str]], IterDataPipe[Sample]], persistent_workers: bool
) -> None:
    with no_processes_left_behind():  # persistent workers too end with their loader
        epochs = read_dataloader(
            build(shards).map(tag_reader), 2, WORKERS, persistent_workers=persistent_workers
        )
    assert_exactly_once(epochs, all_keys(NSHARDS, PER_SHARD))
    for samples in epochs:
        assert len(readers(samples)) == WORKERS, "the workers did not share the work"


# --- 4-5: shard order across epochs, runs and loaders -------------------------------------------


def read_shard_orders(
    urls: list[str],
    num_workers: int,
    seed: int | None = None,
    loader_seed: int | None = None,
    epochs: int = EPOCHS,
) -> list[Signature]:
    """Per epoch, the shards each reader of a DataLoader2 over a shard-shuffled WebDataset
    started, checking on the way that every sample came exactly once."""
    pipe = wds.WebDataset(urls, shardshuffle=True, seed=seed).map(tag_reader)
    samples = read_dataloader2(pipe, epochs, service_for(num_workers), loader_seed)
    assert_exactly_once(samples, all_keys(ORDER_SHARDS, ORDER_PER_SHARD))
    return [draws_by_reader(epoch) for epoch in samples]


ORDER_CASES = [
    pytest.param(7, None, 0, id="seed=7-in-process"),
    pytest.param(7, None, WORKERS, id="seed=7-2-workers"),
    pytest.param(None, 123, 0, id="loader.seed-in-process"),
    pytest.param(None, 123, WORKERS, id="loader.seed-2-workers"),
    pytest.param(None, None, 0, id="unseeded-in-process"),
    pytest.param(None, None, WORKERS, id="unseeded-2-workers"),
]


@pytest.mark.dataloader2
@pytest.mark.parametrize(("seed", "loader_seed", "num_workers"), ORDER_CASES)
def test_shard_order_changes_across_epochs(
    order_shards: list[str], seed: int | None, loader_seed: int | None, num_workers: int
) -> None:
    """ "shardshuffle: shuffle the shard order each epoch" (WebDataset): with ``seed=``, with
    ``DataLoader2.seed(n)``, or with neither, in process or with workers."""
    orders = read_shard_orders(order_shards, num_workers, seed, loader_seed)
    distinct = {tuple(order) for order in orders}
    assert len(distinct) == EPOCHS, f"the shard order repeats across epochs: {orders}"


@pytest.mark.dataloader2
def test_fixed_seed_gives_the_same_orders_in_every_dataloader2_run(order_shards: list[str]) -> None:
    workers = read_shard_orders(order_shards, WORKERS, seed=7)
    workers_again = read_shard_orders(order_shards, WORKERS, seed=7)
    in_process = read_shard_orders(order_shards, 0, seed=7)
    in_process_again = read_shard_orders(order_shards, 0, seed=7)
    assert workers == workers_again
    assert in_process == in_process_again
    # both workers shuffled alike, as the in-process run does, and dealt the order out
    assert workers == [split_among(in_process_order(order), WORKERS) for order in in_process]
    other_seed = read_shard_orders(order_shards, 0, seed=8)
    assert other_seed[0] != in_process[0]


@pytest.mark.dataloader2
def test_loader_seed_decides_the_order_without_a_pipeline_seed(order_shards: list[str]) -> None:
    first = read_shard_orders(order_shards, 0, loader_seed=123)
    second = read_shard_orders(order_shards, 0, loader_seed=123)
    other = read_shard_orders(order_shards, 0, loader_seed=124)
    workers = read_shard_orders(order_shards, WORKERS, loader_seed=123, epochs=1)
    assert first == second
    assert other[0] != first[0]
    assert workers[0] == split_among(in_process_order(first[0]), WORKERS)


def dl2_workers(pipe: IterDataPipe[Sample]) -> list[list[Sample]]:
    return read_dataloader2(pipe, EPOCHS, mp_service(WORKERS))


def dataloader_in_process(pipe: IterDataPipe[Sample]) -> list[list[Sample]]:
    return read_dataloader(pipe, EPOCHS)


def dataloader_workers(pipe: IterDataPipe[Sample]) -> list[list[Sample]]:
    return read_dataloader(pipe, EPOCHS, WORKERS)


def dataloader_persistent_workers(pipe: IterDataPipe[Sample]) -> list[list[Sample]]:
    return read_dataloader(pipe, EPOCHS, WORKERS, persistent_workers=True)


def for_loop(pipe: IterDataPipe[Sample]) -> list[list[Sample]]:
    return read_for_loop(pipe, EPOCHS)


@pytest.mark.dataloader2
@pytest.mark.parametrize(
    ("read", "num_workers"),
    [
        pytest.param(dl2_workers, WORKERS, id="dl2-2-workers"),
        pytest.param(dataloader_in_process, 0, id="dataloader-in-process"),
        pytest.param(for_loop, 0, id="for-loop"),
    ],
)
def test_fixed_seed_order_depends_only_on_seed_and_epoch(
    order_shards: list[str],
    read: Callable[[IterDataPipe[Sample]], list[list[Sample]]],
    num_workers: int,
) -> None:
    """``seed=``: DataLoader2 (any number of workers), plain DataLoader without workers and a
    ``for`` loop number epochs alike, so they give the same orders (wdspipes.core.context)."""
    reference = read_shard_orders(order_shards, 0, seed=7)
    expected = [split_among(in_process_order(order), max(num_workers, 1)) for order in reference]
    epochs = read(wds.WebDataset(order_shards, shardshuffle=True, seed=7).map(tag_reader))
    assert_exactly_once(epochs, all_keys(ORDER_SHARDS, ORDER_PER_SHARD))
    assert [draws_by_reader(samples) for samples in epochs] == expected


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(dataloader_workers, id="dataloader-2-workers"),
        pytest.param(dataloader_persistent_workers, id="dataloader-persistent"),
    ],
)
def test_fixed_seed_order_under_plain_dataloader_workers_is_reproducible(
    order_shards: list[str], read: Callable[[IterDataPipe[Sample]], list[list[Sample]]]
) -> None:
    """Plain DataLoader seeds an epoch more than once, so its epochs are numbered apart from
    the other loaders': still reproducible from the seed, new each epoch, shared by workers."""

    def orders() -> list[list[tuple[str, ...]]]:
        epochs = read(wds.WebDataset(order_shards, shardshuffle=True, seed=7).map(tag_reader))
        assert_exactly_once(epochs, all_keys(ORDER_SHARDS, ORDER_PER_SHARD))
        return [draws_by_reader(samples) for samples in epochs]

    first = orders()
    assert orders() == first
    assert len({tuple(epoch) for epoch in first}) == EPOCHS


@pytest.mark.dataloader2
@pytest.mark.parametrize(
    ("seed", "loader_seed"),
    [pytest.param(5, None, id="dl2-seed=5"), pytest.param(None, None, id="dl2-unseeded")],
)
def test_sample_shuffle_after_the_split_differs_per_dataloader2_worker(
    shards: list[str], seed: int | None, loader_seed: int | None
) -> None:
    pipe = wds.WebDataset(shards).buffer_shuffle(bufsize=60, initial=60, seed=seed)
    epochs = read_dataloader2(pipe.map(tag_reader), 2, mp_service(WORKERS), loader_seed)
    assert_worker_streams_differ(epochs)


@pytest.mark.parametrize("seed", [5, None], ids=["seed=5", "unseeded"])
def test_sample_shuffle_after_the_split_differs_per_dataloader_worker(
    shards: list[str], seed: int | None
) -> None:
    """Plain DataLoader hands every worker the same seed: the stage must tell them apart."""
    pipe = wds.WebDataset(shards).buffer_shuffle(bufsize=60, initial=60, seed=seed)
    assert_worker_streams_differ(read_dataloader(pipe.map(tag_reader), 2, WORKERS))


def assert_worker_streams_differ(epochs: list[list[Sample]]) -> None:
    """Without shard shuffling worker w reads shards w, w+2, w+4; a sample's place within
    its worker's share is (shard // 2, index). Equal streams would put the same places in the
    same order in both workers."""
    assert_exactly_once(epochs, all_keys(NSHARDS, PER_SHARD))
    for number, samples in enumerate(epochs, start=1):
        places: dict[int, list[tuple[int, int]]] = {}
        for sample in samples:
            shard, _, index = sample["__key__"].partition("-")
            places.setdefault(sample["__pid__"], []).append((int(shard) // 2, int(index)))
        assert len(places) == WORKERS
        first, second = places.values()
        assert sorted(first) == sorted(second)
        assert first != sorted(first), f"epoch {number}: samples were not shuffled"
        assert first != second, f"epoch {number}: both workers shuffled their samples alike"


# --- 6: resampling -------------------------------------------------------------------------------

RESAMPLED_DRAWS = 12


def read_resampled(
    urls: list[str], num_workers: int, seed: int | None, loader_seed: int | None
) -> list[list[Sample]]:
    pipe = wds.WebDataset(urls, resampled=True, nshards=RESAMPLED_DRAWS, seed=seed)
    return read_dataloader2(pipe.map(tag_reader), EPOCHS, service_for(num_workers), loader_seed)


@pytest.mark.dataloader2
@pytest.mark.parametrize(
    ("seed", "loader_seed"),
    [pytest.param(3, None, id="seed=3"), pytest.param(None, 3, id="loader.seed")],
)
def test_resampled_draws_are_split_among_workers(
    shards: list[str], seed: int | None, loader_seed: int | None
) -> None:
    epochs = read_resampled(shards, WORKERS, seed, loader_seed)
    signatures = []
    for number, samples in enumerate(epochs, start=1):
        assert len(samples) == RESAMPLED_DRAWS * PER_SHARD, f"epoch {number}"
        draws = draws_by_reader(samples)
        assert [len(share) for share in draws] == [RESAMPLED_DRAWS // WORKERS] * WORKERS
        # each draw read whole, once: a key appears as often as its shard was drawn
        drawn = Counter(shard for share in draws for shard in share)
        expected = Counter(
            {
                f"{shard}-{index:05d}": times
                for shard, times in drawn.items()
                for index in range(PER_SHARD)
            }
        )
        assert Counter(sample["__key__"] for sample in samples) == expected, f"epoch {number}"
        signatures.append(draws)
    assert len({tuple(draws) for draws in signatures}) == EPOCHS, (
        f"the shard draws repeat across epochs: {signatures}"
    )
    # the workers took turns through one stream of draws: with seed=, the one an in-process run
    # makes (torchdata hands out loader seeds differently in and out of process)
    if seed is not None:
        in_process = [
            draws_by_reader(samples) for samples in read_resampled(shards, 0, seed, loader_seed)
        ]
        assert signatures == [split_among(in_process_order(d), WORKERS) for d in in_process]


# --- the full pipeline: decode, sample shuffle, to_tuple, batched -------------------------------


@pytest.fixture(scope="module")
def decodable_shards(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """5 shards x 12 samples whose ``cls`` is the sample's number and ``json`` its key."""
    directory = tmp_path_factory.mktemp("decodable")
    paths = []
    for shard in range(5):
        members = []
        for index in range(12):
            key = f"{shard:03d}-{index:05d}"
            number = shard * 12 + index
            members += [(f"{key}.cls", str(number).encode()), (f"{key}.json", f'"{key}"'.encode())]
        path = directory / f"decodable-{shard}.tar"
        path.write_bytes(shardgen.make_tar(members))
        paths.append(str(path))
    return paths


def training_pipeline(urls: list[str]) -> IterDataPipe[Any]:
    return (
        wds.WebDataset(urls, shardshuffle=True)
        .decode()
        .buffer_shuffle(bufsize=20, initial=5)
        .to_tuple("cls", "json")
        .batched(7)
    )


def read_batches(urls: list[str], loader_seed: int | None, epochs: int = 2) -> list[list[int]]:
    """The class numbers of each epoch, in the order the batches arrived."""
    batches = read_dataloader2(training_pipeline(urls), epochs, mp_service(WORKERS), loader_seed)
    return [[int(c) for classes, _ in epoch for c in classes] for epoch in batches]


@pytest.mark.dataloader2
def test_full_pipeline_under_dataloader2_yields_every_sample_once(
    decodable_shards: list[str],
) -> None:
    loader = DataLoader2(training_pipeline(decodable_shards), reading_service=mp_service(WORKERS))
    try:
        for _ in range(2):
            batches = list(loader)
            classes = [int(c) for classes, _ in batches for c in classes]
            keys = [key for _, keys in batches for key in keys]
            assert sorted(classes) == list(range(60))
            assert sorted(keys) == sorted(f"{n // 12:03d}-{n % 12:05d}" for n in range(60))
            assert all(classes.dtype == torch.int64 for classes, _ in batches)
            assert all(len(classes) <= 7 for classes, _ in batches)
    finally:
        loader.shutdown()


@pytest.mark.dataloader2
def test_loader_seed_makes_a_multi_worker_run_reproducible(decodable_shards: list[str]) -> None:
    first = read_batches(decodable_shards, loader_seed=11)
    assert read_batches(decodable_shards, loader_seed=11) == first
    assert first[0] != first[1]  # epochs differ
    assert read_batches(decodable_shards, loader_seed=12) != first  # seeds differ


# --- uneven work: torchdata's round-robin, mended (wdspipes.loaders) ----------------------------


@pytest.mark.dataloader2
@pytest.mark.parametrize(
    ("nshards", "workers", "batch"),
    [(3, 2, None), (1, 2, None), (1, 2, 4), (5, 3, None), (2, 3, 7)],
    ids=["3-on-2", "1-on-2", "1-on-2-batched", "5-on-3", "fewer-shards-than-workers"],
)
def test_workers_with_uneven_shares_read_every_sample_once(
    tmp_path: Path, nshards: int, workers: int, batch: int | None
) -> None:
    """torchdata 0.9 alone fails here ("Can not expect any response without submitted
    request", pytorch/data#1310) as soon as one worker runs dry before another."""
    urls = shardgen.write_shards(tmp_path, nshards, 10)
    pipe: IterDataPipe[Any] = wds.WebDataset(urls, shardshuffle=True)
    if batch:
        pipe = pipe.batch(batch)
    epochs = read_dataloader2(pipe, 2, mp_service(workers))
    if batch:
        epochs = [[sample for items in epoch for sample in items] for epoch in epochs]
    assert_exactly_once(epochs, all_keys(nshards, 10))


@pytest.mark.dataloader2
def test_a_worker_error_reaches_the_main_process_with_its_type(tmp_path: Path) -> None:
    urls = shardgen.write_shards(tmp_path, 3, 10)
    Path(urls[1]).write_bytes(Path(urls[1]).read_bytes()[:1500])  # cut inside a member
    with pytest.raises(wds.TruncatedShardError, match=r"shard-001\.tar"):
        read_dataloader2(wds.WebDataset(urls), 1, mp_service(WORKERS))


@pytest.mark.dataloader2
@pytest.mark.parametrize("first", ["wdspipes", "torchdata"])
def test_the_mend_is_in_place_whichever_is_imported_first(tmp_path: Path, first: str) -> None:
    urls = shardgen.write_shards(tmp_path, 1, 2)
    imports = ["import wdspipes", "import torchdata.dataloader2 as dl2"]
    script = "\n".join(
        [
            "import warnings; warnings.simplefilter('ignore')",
            *(imports if first == "wdspipes" else imports[::-1]),
            "from torchdata.dataloader2.communication.iter import _IterateQueueDataPipes as Q",
            f"dl2.DataLoader2(wdspipes.WebDataset({urls!r}))",
            "assert Q._wdspipes_fixed",
        ]
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def mended_prefetcher() -> Any:
    from torchdata.datapipes.iter import IterableWrapper

    from wdspipes.loaders import dataloader2

    dataloader2()  # imports and mends
    return IterableWrapper


class CountingWaits:
    """Counts the calls of ``time.sleep`` in the process: polling shows as thousands."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import time

        self.calls = 0
        sleep = time.sleep

        def counting(seconds: float) -> None:
            self.calls += 1
            sleep(seconds)

        monkeypatch.setattr(time, "sleep", counting)


def slowly(item: int) -> int:
    import time

    time.sleep(0.002)  # a stage that takes time: a polling reader would look many times
    return item


@pytest.mark.dataloader2
def test_the_prefetch_buffer_waits_without_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper = mended_prefetcher()
    waits = CountingWaits(monkeypatch)
    items = list(wrapper(range(50)).map(slowly).prefetch(3))
    assert items == list(range(50))
    assert waits.calls == 50  # the stage's own sleeps: none from the buffer


@pytest.mark.dataloader2
def test_the_prefetch_buffer_passes_errors_and_stops_early() -> None:
    wrapper = mended_prefetcher()

    def fail(item: int) -> int:
        if item == 7:
            raise ValueError("item 7")
        return item

    with pytest.raises(ValueError, match="item 7"):
        list(wrapper(range(20)).map(fail).prefetch(4))
    pipe = wrapper(range(1000)).prefetch(2)
    iterator = iter(pipe)
    assert [next(iterator) for _ in range(5)] == [0, 1, 2, 3, 4]
    pipe.pause()
    pipe.resume()
    assert next(iterator) == 5
    pipe.reset()  # ends the thread


@pytest.mark.dataloader2
def test_dataloader2_main_process_waits_without_polling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = shardgen.write_shards(tmp_path, 4, 20)
    loader = DataLoader2(
        wds.WebDataset(urls).map(slowly_sample), reading_service=mp_service(WORKERS)
    )
    try:
        waits = CountingWaits(monkeypatch)  # in the main process (the workers sleep apart)
        samples = iter(loader)
        keys = [next(samples)["__key__"]]  # the epoch has begun: the workers are running
        waits.calls = 0
        keys += [sample["__key__"] for sample in samples]
    finally:
        loader.shutdown()
    assert sorted(keys) == all_keys(4, 20)
    # 79 samples of 5 ms on 2 workers: a reader polling each millisecond would sleep hundreds
    # of times, one polling its prefetch buffer every 0.1 ms thousands.
    assert waits.calls < 10


def slowly_sample(sample: dict[str, Any]) -> dict[str, Any]:
    import time

    time.sleep(0.005)
    return sample


# --- 7: abandoning an epoch -------------------------------------------------------------------


def pipe_urls(paths: list[str]) -> list[str]:
    return [f"pipe:cat {shlex.quote(path)}" for path in paths]


@pytest.mark.dataloader2
@pytest.mark.parametrize("scheme", ["file", "pipe"])
def test_abandoned_dataloader2_epoch_leaves_no_processes(shards: list[str], scheme: str) -> None:
    urls = shards if scheme == "file" else pipe_urls(shards)
    with no_processes_left_behind() as before:
        loader = DataLoader2(webdataset(urls), reading_service=mp_service(WORKERS))
        try:
            for count, _ in enumerate(loader):
                if count == 4:
                    assert len(set(child_processes()) - before) == WORKERS
                    break
        finally:
            loader.shutdown()


@pytest.mark.parametrize("scheme", ["file", "pipe"])
def test_abandoned_dataloader_epoch_leaves_no_processes(shards: list[str], scheme: str) -> None:
    urls = shards if scheme == "file" else pipe_urls(shards)
    with no_processes_left_behind() as before:
        loader = DataLoader(
            webdataset(urls), batch_size=None, num_workers=WORKERS, multiprocessing_context="fork"
        )
        for count, _ in enumerate(loader):
            if count == 4:
                assert len(set(child_processes()) - before) == WORKERS
                break
        del loader


@pytest.mark.parametrize(
    "per_shard", [20, 400], ids=["command-finished-writing", "command-still-writing"]
)
@pytest.mark.parametrize("build", BUILDERS)
def test_abandoned_for_loop_ends_its_shard_commands(
    tmp_path: Path, build: Callable[[list[str]], IterDataPipe[Sample]], per_shard: int
) -> None:
    """A 400-sample shard (~800 KiB) outgrows the pipe buffer, so its ``cat`` is still
    writing when the loop stops; a 20-sample one has finished and waits to be reaped."""
    pipe = build(pipe_urls(shardgen.write_shards(tmp_path, 3, per_shard)))
    with no_processes_left_behind() as before:
        for count, _ in enumerate(pipe):
            if count == 2:
                assert set(child_processes()) - before, "no shard command is running"
                break


KILLED_WORKER = """
import json, multiprocessing, os, signal, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np
import wdspipes as wds
from wdspipes.loaders import dataloader2
from wdspipes.samples import handover

dl2 = dataloader2()
pipe = wds.WebDataset(sys.argv[1:]).decode().to_tuple("npy").batched(4)  # 1.2 MB: in slots
service = dl2.MultiProcessingReadingService(num_workers=2, multiprocessing_context="fork")
loader = dl2.DataLoader2(pipe, reading_service=service)
items = iter(loader)
taken = [next(items) for _ in range(3)]
workers = [process.pid for process, _, _ in loader.reading_service._worker_processes]
os.kill(workers[1], signal.SIGKILL)
try:
    while True:
        taken.append(next(items))
except Exception as exn:
    error = [type(exn).__name__, str(exn)]
del taken
print(json.dumps({
    "error": error,
    "children": [child.pid for child in multiprocessing.active_children()],
    "slots of the workers": [m.owner() for m in handover._mappings.values()],
    "workers": workers,
}))
"""


@pytest.mark.dataloader2
@pytest.mark.slow
def test_a_killed_worker_is_an_error_naming_it_not_a_hang(tmp_path: Path) -> None:
    """SIGKILL one of two DataLoader2 workers, as the out-of-memory killer does: the loop gets a
    WorkerError naming the worker and the signal (before: it waited forever), the other worker
    is ended, and the main process lets go of the workers' shared-memory batch slots. The run
    is bounded only as a guard against a hang."""
    urls = []
    for shard in range(4):
        path = tmp_path / f"s-{shard}.tar"
        with wds.TarWriter(str(path)) as sink:
            for index in range(20):
                sink.write({"__key__": f"{shard}-{index}", "npy": np.zeros(300_000, np.uint8)})
        urls.append(str(path))
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WORKER, *urls],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its group is ended if it hangs: no process left behind
    )
    try:
        out, _ = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        pytest.fail("the loader waited for the dead worker (a hang)")
    report = json.loads(out.splitlines()[-1])
    kind, message = report["error"]
    dead = report["workers"][1]
    assert kind == "WorkerError"
    assert f"worker 1 (pid {dead}) exited unexpectedly: killed by SIGKILL" in message
    assert report["children"] == []
    assert not set(report["slots of the workers"]) & set(report["workers"])


@pytest.mark.parametrize("kind", [pytest.param("dataloader2", marks=DL2), "dataloader"])
def test_workers_agree_on_the_shard_order_however_often_they_read_it(
    tmp_path: Path, kind: str
) -> None:
    """webdataset's pattern (issue 27): a seeded shard shuffle, split_by_worker and
    with_epoch(80) under 2 workers, over shards of 50, 50 and 60 samples. One worker has one
    shard and reads it again to make 80 samples; it reads its own shard again, as the shard
    order stays the epoch's in both workers. (Before, reading again began a new epoch of the
    shard shuffle in that worker alone, which then read a shard the other one had: 141
    distinct samples of 160.) A shard of 50 or 60 cannot give 80 distinct samples: the epoch
    holds the other worker's 80 and all of the short worker's shard, read again in part."""
    for shard, size in enumerate([50, 50, 60]):
        with wds.TarWriter(str(tmp_path / f"s-{shard}.tar")) as sink:
            for index in range(size):
                sink.write({"__key__": f"{shard}-{index:02d}", "txt": "x"})
    pipe = wds.DataPipeline(
        wds.SimpleShardList(f"{tmp_path}/s-{{0..2}}.tar"),
        wds.shuffle(100, seed=3),
        wds.split_by_worker,
        wds.tarfile_to_samples(),
        wds.shuffle(20),
    ).with_epoch(80)
    if kind == "dataloader2":
        loader: Any = DataLoader2(pipe, reading_service=mp_service(2))
    else:
        loader = DataLoader(pipe, batch_size=None, num_workers=2, multiprocessing_context="fork")
    try:
        for _ in range(2):
            counts = Counter(sample["__key__"] for sample in loader)
            read_again = {key.split("-")[0] for key, count in counts.items() if count > 1}
            assert sum(counts.values()) == 160 and max(counts.values()) == 2
            (shard,) = read_again  # one shard, the short worker's own
            assert len(counts) == 80 + (60 if shard == "2" else 50)
    finally:
        if kind == "dataloader2":
            loader.shutdown()
