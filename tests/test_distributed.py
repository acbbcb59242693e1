"""Distributed reading with real process groups: two ranks on gloo over 127.0.0.1.

Each test starts two rank processes (``torch.multiprocessing`` spawn, as ``torchrun`` would),
runs a scenario in both, and compares what the ranks read. Worker processes inside the ranks
are forked. What this file proves, over two epochs each:

- DataLoader2 with ``DistributedReadingService`` alone and with ``MultiProcessingReadingService``
  (2 workers), over ``WebDataset(...)``, ``DataPipeline(...)`` and a functional chain: ranks read
  disjoint shards, together every sample exactly once per epoch; the shard order changes each
  epoch; ``DataLoader2.seed(s)`` reproduces it, another seed does not;
- plain DataLoader (0 and 2 workers) under ``torch.distributed``: the same guarantee;
- uneven shards: every rank yields the same number of items (FullSync under DataLoader2,
  ``full_sync`` under DataLoader), no sample twice, no hang, and a warning saying how the
  shards split;
- resampled shards with ``with_epoch``: the same number of batches on every rank, distinct
  streams per rank and worker, new draws each epoch, reproducible from one seed;
- too few shards for the ranks: every rank fails with an error naming the counts, none hangs.

A runner that outlives its deadline kills both ranks and fails the test, so a hang is a
failure, not a stuck suite.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import shardgen
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES
from torchdata.stateful_dataloader import StatefulDataLoader
from workers import two_workers

import wdspipes as wds
from wdspipes.loaders import dataloader2

pytestmark = pytest.mark.loaders
DL2 = pytest.mark.dataloader2  # needs DataLoader2: skipped with torchdata 0.10+ (conftest)

WORLD = 2
SEED = 1234
TIMEOUT = 30  # seconds for any collective: a hang fails well inside the runner's deadline
DEADLINE = 150  # seconds for a whole two-rank run
ROOT = Path(__file__).resolve().parent.parent
LOCALHOST = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}

Item = list[Any]  # a (key, url) sample, or a batch of keys and urls
Epochs = list[list[Item]]


# ---------------------------------------------------------------------------------------------
# the runner


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_ranks(
    scenario: str, directory: Path, world: int = WORLD, **options: Any
) -> list[dict[str, Any]]:
    """Run ``SCENARIOS[scenario](directory, **options)`` on ``world`` ranks (two by default);
    their results by rank. The ranks meet through a file of their own (a port found free
    here could be taken by another process before rank 0 listens on it)."""
    descriptor, rendezvous = tempfile.mkstemp(prefix=".rendezvous-", dir=directory)
    os.close(descriptor)
    context = mp.start_processes(
        _rank_main,
        args=(scenario, rendezvous, directory, world, options),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + DEADLINE
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"{scenario}: the ranks did not finish within {DEADLINE} s (a hang)")
    return [json.loads((directory / f"rank{rank}.json").read_text()) for rank in range(world)]


def _rank_main(
    rank: int, scenario: str, rendezvous: str, directory: Path, world: int, options: dict[str, Any]
) -> None:
    os.environ.update(LOCALHOST)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=TIMEOUT),
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = SCENARIOS[scenario](directory, **options)
        result["warnings"] = [
            str(warning.message) for warning in caught if warning.category is RuntimeWarning
        ]
        (directory / f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# what runs in each rank


def build(pipeline: str, urls: list[str]) -> IterDataPipe[Any]:
    """A fresh pipeline (each loader run gets its own: stages count their epochs)."""
    if pipeline == "webdataset":
        return wds.WebDataset(urls, shardshuffle=True).to_tuple("__key__", "__url__")
    if pipeline == "datapipeline":
        return wds.DataPipeline(
            urls,
            wds.shuffle(100),
            wds.split_by_node,
            wds.split_by_worker,
            wds.tarfile_to_samples(),
            wds.shuffle(5),
            wds.to_tuple("__key__", "__url__"),
        )
    if pipeline == "functional":
        return (
            wds.ShardList(urls)
            .buffer_shuffle(100)
            .sharding_filter()
            .open_shards()
            .load_tar()
            .group_samples()
            .buffer_shuffle(5)
            .to_tuple("__key__", "__url__")
        )
    if pipeline == "resampled":
        return wds.DataPipeline(
            wds.ResampledShards(urls),
            wds.tarfile_to_samples(),
            wds.shuffle(10),
            wds.to_tuple("__key__", "__url__"),
            wds.batched(3),
            wds.with_epoch(4),
        )
    raise ValueError(pipeline)


def read_epochs(
    pipe: IterDataPipe[Any], loader: str, workers: int, seed: int, sync: bool = False
) -> Epochs:
    """Two epochs of ``pipe`` through a DataLoader2 or plain DataLoader on this rank."""
    if loader == "dl2":
        dl2 = dataloader2()
        service = dl2.DistributedReadingService(timeout=TIMEOUT)
        if workers:
            service = dl2.SequentialReadingService(
                service,
                dl2.MultiProcessingReadingService(
                    num_workers=workers, multiprocessing_context="fork"
                ),
            )
        loader2 = dl2.DataLoader2(pipe, reading_service=service)
        loader2.seed(seed)
        try:
            return [[jsonable(item) for item in loader2] for _ in range(2)]
        finally:
            loader2.shutdown()
    plain = DataLoader(
        pipe,
        batch_size=None,
        num_workers=workers,
        multiprocessing_context="fork" if workers else None,
        generator=torch.Generator().manual_seed(seed),
    )
    return [
        [jsonable(item) for item in (wds.full_sync(plain) if sync else plain)] for _ in range(2)
    ]


def jsonable(item: Any) -> Item:
    return [list(part) if isinstance(part, list | tuple) else part for part in item]


def shards_of(directory: Path) -> list[str]:
    return sorted(str(path) for path in directory.glob("*.tar"))


def epochs_scenario(
    directory: Path, pipeline: str, loader: str, workers: int, sync: bool = False
) -> dict[str, Any]:
    """Two runs with one seed and one with another, two epochs each."""
    urls = shards_of(directory)
    runs = [
        read_epochs(build(pipeline, urls), loader, workers, seed, sync)
        for seed in (SEED, SEED, SEED + 1)
    ]
    return {"runs": runs}


def failing_scenario(directory: Path, pipeline: str, loader: str, workers: int) -> dict[str, Any]:
    """One epoch that must fail on this rank; the error's type and message."""
    try:
        read_epochs(build(pipeline, shards_of(directory)), loader, workers, SEED)
    except Exception as exn:
        return {"error": type(exn).__name__, "message": str(exn)}
    return {"error": None}


def dl2_service(workers: int) -> Any:
    dl2 = dataloader2()
    service = dl2.DistributedReadingService(timeout=TIMEOUT)
    if workers:
        multiprocessing = dl2.MultiProcessingReadingService(
            num_workers=workers, multiprocessing_context="fork"
        )
        service = dl2.SequentialReadingService(service, multiprocessing)
    return service


def resumable(urls: list[str]) -> IterDataPipe[Any]:
    """Batches of 2 keys: a shard shuffle and a sample buffer, both seeded."""
    return (
        wds.WebDataset(urls, shardshuffle=True, seed=11)
        .buffer_shuffle(6, initial=3, seed=12)
        .to_tuple("__key__")
        .batched(2, collation_fn=None)
    )


def make_loader(kind: str, urls: list[str], workers: int) -> Any:
    if kind == "dl2":
        return dataloader2().DataLoader2(resumable(urls), reading_service=dl2_service(workers))
    context = "fork" if workers else None
    return StatefulDataLoader(
        resumable(urls), batch_size=None, num_workers=workers, multiprocessing_context=context
    )


def batch_keys(batch: Any) -> list[str]:
    return [key for (key,) in batch]


def take(loader: Any, count: int | None) -> list[list[str]]:
    """The next ``count`` batches' keys (None: to the end of the epoch)."""
    taken = []
    for batch in loader:
        taken.append(batch_keys(batch))
        if len(taken) == count:
            break
    return taken


def close(loader: Any) -> None:
    if hasattr(loader, "shutdown"):
        loader.shutdown()


def dl2_resume_scenario(directory: Path, workers: int, cut: int) -> dict[str, Any]:
    """DataLoader2 on this rank: two epochs uninterrupted; then a run stopped after ``cut``
    batches, its state loaded into a new loader, which goes on to the end of the two epochs."""
    urls = shards_of(directory)
    loader = make_loader("dl2", urls, workers)
    whole = [take(loader, None) for _ in range(2)]
    close(loader)
    loader = make_loader("dl2", urls, workers)
    head = take(loader, cut)
    state = pickle.loads(pickle.dumps(loader.state_dict()))
    close(loader)
    loader = make_loader("dl2", urls, workers)
    loader.load_state_dict(state)
    rest = [take(loader, None) for _ in range(2)]
    close(loader)
    return {"whole": whole, "resumed": [head + rest[0], rest[1]]}


def save_scenario(directory: Path, kind: str, workers: int, cut: int) -> dict[str, Any]:
    """Stop after ``cut`` batches and checkpoint with torch.distributed.checkpoint, as
    docs/recipes/distributed.md says: each rank's loader state under a key of its own."""
    loader = make_loader(kind, shards_of(directory), workers)
    head = take(loader, cut)
    rank = dist.get_rank()
    state = {"loader": {f"rank{rank}": pickle.dumps(loader.state_dict())}}
    dcp.save(state, checkpoint_id=directory / "checkpoint")
    close(loader)
    return {"delivered": head}


def load_scenario(directory: Path, kind: str, workers: int) -> dict[str, Any]:
    """A job of another size: every rank reads all the old ranks' loader states, merges them,
    and goes on to the end of the epoch, then reads the next one."""
    path = directory / "checkpoint"
    saved = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    state: dict[str, Any] = {
        "loader": {key.split(".", 1)[1]: b"" for key in saved if key.startswith("loader.")}
    }
    dcp.load(state, checkpoint_id=path)
    loader = make_loader(kind, shards_of(directory), workers)
    loader.load_state_dict(wds.merge_states([pickle.loads(s) for s in state["loader"].values()]))
    rest = take(loader, None)
    after = take(loader, None)
    close(loader)
    return {"rest": rest, "after": after, "old ranks": len(state["loader"])}


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "epochs": epochs_scenario,
    "failing": failing_scenario,
    "dl2 resume": dl2_resume_scenario,
    "save": save_scenario,
    "load": load_scenario,
}


# ---------------------------------------------------------------------------------------------
# the tests


def write_shards(directory: Path, sizes: list[int]) -> set[str]:
    """Shards of the given sizes; returns every key written."""
    keys = set()
    for shard, size in enumerate(sizes):
        names = [f"{shard:03d}-{index:05d}" for index in range(size)]
        tar = shardgen.make_tar(shardgen.sample_members(names, ("cls",)))
        (directory / f"shard-{shard:03d}.tar").write_bytes(tar)
        keys.update(names)
    return keys


def keys_of(epoch: list[Item]) -> list[str]:
    return [item[0] for item in epoch]


def shard_order(epoch: list[Item]) -> list[str]:
    """The shards of one rank's epoch, in the order they first appear."""
    return list(dict.fromkeys(item[1] for item in epoch))


EXACT = [
    pytest.param("webdataset", "dl2", 0, marks=DL2),
    pytest.param("datapipeline", "dl2", 2, marks=DL2),
    pytest.param("functional", "dl2", 2, marks=DL2),
    ("webdataset", "dataloader", 0),
    ("datapipeline", "dataloader", 2),
]


@pytest.mark.parametrize(("pipeline", "loader", "workers"), EXACT)
def test_ranks_read_every_sample_exactly_once_per_epoch(
    tmp_path: Path, pipeline: str, loader: str, workers: int
) -> None:
    keys = write_shards(tmp_path, [5] * 8)
    ranks = run_ranks("epochs", tmp_path, pipeline=pipeline, loader=loader, workers=workers)
    first, again, other = zip(*(rank["runs"] for rank in ranks), strict=True)
    for epoch in range(2):
        by_rank = [run[epoch] for run in first]
        assert Counter(key for items in by_rank for key in keys_of(items)) == Counter(keys)
        shards = [set(shard_order(items)) for items in by_rank]
        assert not shards[0] & shards[1], "ranks read a shard twice"
        assert [len(items) for items in by_rank] == [20, 20]
    for rank_runs in first:  # the shard order moves on between epochs
        assert shard_order(rank_runs[0]) != shard_order(rank_runs[1])
    assert again == first, "the same seed read differently"
    assert other != first, "another seed read the same"
    assert all(not rank["warnings"] for rank in ranks)


@pytest.mark.parametrize(
    ("loader", "workers", "sync"),
    [
        pytest.param("dl2", 0, False, marks=DL2),
        pytest.param("dl2", 2, False, marks=DL2),
        ("dataloader", 2, True),
    ],
)
def test_uneven_shards_give_every_rank_the_same_count(
    tmp_path: Path, loader: str, workers: int, sync: bool
) -> None:
    """5 shards of 3 to 11 samples: ranks would yield different counts; FullSync (DataLoader2)
    and full_sync (DataLoader) stop both at the shorter, nobody waits forever."""
    keys = write_shards(tmp_path, [3, 5, 7, 9, 11])
    ranks = run_ranks(
        "epochs", tmp_path, pipeline="webdataset", loader=loader, workers=workers, sync=sync
    )
    for run in range(3):
        for epoch in range(2):
            by_rank = [rank["runs"][run][epoch] for rank in ranks]
            lengths = [len(items) for items in by_rank]
            assert lengths[0] == lengths[1] > 0
            read = [key for items in by_rank for key in keys_of(items)]
            assert len(read) == len(set(read)) and set(read) < keys
    warned = [message for rank in ranks for message in rank["warnings"]]
    if workers == 0:  # the warning comes from rank 0's first reader, here in the rank itself
        assert any(message.startswith("5 shards for 2 ranks: ranks get 3, 2") for message in warned)


def test_plain_dataloader_without_full_sync_yields_uneven_counts(tmp_path: Path) -> None:
    """The control for the test above: without full_sync the ranks do differ."""
    write_shards(tmp_path, [3, 5, 7, 9, 11])
    ranks = run_ranks("epochs", tmp_path, pipeline="webdataset", loader="dataloader", workers=0)
    totals = [sum(len(epoch) for epoch in rank["runs"][0]) for rank in ranks]
    assert totals[0] != totals[1]


@pytest.mark.parametrize(
    ("loader", "workers"), [pytest.param("dl2", 2, marks=DL2), ("dataloader", 2)]
)
def test_resampled_streams_are_distinct_equal_and_reproducible(
    tmp_path: Path, loader: str, workers: int
) -> None:
    write_shards(tmp_path, [6] * 4)
    ranks = run_ranks("epochs", tmp_path, pipeline="resampled", loader=loader, workers=workers)
    streams = []  # every reader's batches in one epoch: the loaders alternate their workers
    for rank in ranks:
        first, again, other = rank["runs"]
        assert [len(epoch) for epoch in first] == [4 * workers] * 2  # with_epoch(4) a reader
        assert first[0] != first[1], "an epoch repeated the last one's draws"
        assert again == first and other != first
        for worker in range(workers):
            streams.append([key for batch in first[0][worker::workers] for key in batch[0]])
    assert all(len(stream) == 12 for stream in streams)
    assert len({tuple(stream) for stream in streams}) == len(streams), "two readers drew alike"


@pytest.mark.dataloader2
@pytest.mark.parametrize(("nshards", "workers"), [(1, 0), (2, 2)])
def test_too_few_shards_for_the_ranks_fail_on_every_rank(
    tmp_path: Path, nshards: int, workers: int
) -> None:
    """One shard for two ranks; or two shards for 2 ranks x 2 workers, which DataLoader2 hands
    both to rank 0's workers. Every rank fails at once, naming the counts: no empty epoch,
    no hang."""
    write_shards(tmp_path, [4] * nshards)
    ranks = run_ranks("failing", tmp_path, pipeline="webdataset", loader="dl2", workers=workers)
    for rank in ranks:
        assert rank["error"] == "ShardSplitError", rank
        assert (
            f"{nshards} shard" in rank["message"] and "rank 1 would read nothing" in rank["message"]
        )


@pytest.mark.dataloader2
def test_the_example_trains_under_torchrun(tmp_path: Path) -> None:
    """examples/distributed_training.py, as its docstring says to run it, both recipes."""
    env = {**os.environ, **LOCALHOST, "OMP_NUM_THREADS": "1"}
    for recipe, loader in [("exact", "dataloader2"), ("resampled", "dataloader")]:
        summary = tmp_path / f"{recipe}.json"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            str(ROOT / "examples" / "distributed_training.py"),
            f"--data={tmp_path / 'data'}",
            f"--recipe={recipe}",
            f"--loader={loader}",
            "--epochs=2",
            f"--summary={summary}",
        ]
        result = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=DEADLINE, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(summary.read_text())
        assert len(report["epochs"]) == 2
        for epoch in report["epochs"]:
            assert epoch["batches_per_rank"][0] == epoch["batches_per_rank"][1] > 0
            if recipe == "exact":
                assert epoch["samples"] == epoch["distinct"] == report["dataset_size"]
        assert report["epochs"][-1]["accuracy"] > 0.5  # the model learns
        assert "epoch 2" in result.stdout


@pytest.mark.dataloader2
@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader2_resumes_each_rank_exactly(tmp_path: Path, workers: int) -> None:
    """DistributedReadingService alone and with 2 workers a rank: restored, every rank delivers
    the batches the uninterrupted run did."""
    write_shards(tmp_path, [5] * 8)
    for rank in run_ranks("dl2 resume", tmp_path, workers=workers, cut=3):
        assert rank["resumed"] == rank["whole"]
        assert rank["whole"][0] != rank["whole"][1]


@pytest.mark.parametrize(("kind", "workers"), [("stateful", 0), pytest.param("dl2", 2, marks=DL2)])
@pytest.mark.parametrize("world", [1, 3])
def test_a_two_rank_state_goes_on_with_another_number_of_ranks(
    tmp_path: Path, kind: str, workers: int, world: int
) -> None:
    """Two ranks checkpoint mid-epoch (torch.distributed.checkpoint, each rank's loader state
    under its own key); a job of 1 or 3 ranks merges the states and goes on: every sample not
    yet delivered is delivered once, and the next epoch is whole. Under DataLoader2 every rank
    then stops with the first that runs out (its FullSync), so the resumed epoch may end
    early on 3 ranks: no sample twice, and the epoch after is whole."""
    keys = write_shards(tmp_path, [5] * 8)
    before = run_ranks("save", tmp_path, kind=kind, workers=workers, cut=3)
    after = run_ranks("load", tmp_path, world=world, kind=kind, workers=workers)
    assert all(rank["old ranks"] == 2 for rank in after)
    delivered = [key for rank in before for batch in rank["delivered"] for key in batch]
    rest = [key for rank in after for batch in rank["rest"] for key in batch]
    counts = Counter(delivered + rest)
    assert max(counts.values()) == 1
    if kind == "stateful" or world == 1:
        assert set(counts) == keys
    else:  # FullSync: the ranks stop together
        assert len({len(rank["rest"]) for rank in after}) == 1
    again = [key for rank in after for batch in rank["after"] for key in batch]
    if kind == "stateful" or 8 % (world * workers or world) == 0:
        assert Counter(again) == Counter(keys)


# ---------------------------------------------------------------------------------------------
# the split check in one process: the layouts each loader gives the sharding filter


def opener_over(urls: list[str], *groups: tuple[int, int, SHARDING_PRIORITIES]) -> Any:
    """``WebDataset(urls)``'s opener, its sharding filter set as a loader would."""
    pipe = wds.WebDataset(urls)
    opener = pipe.source_datapipe.source_datapipe
    for readers, reader, group in groups:
        opener.source_datapipe.apply_sharding(readers, reader, group)
    return opener


def opened(opener: Any) -> list[str]:
    return [shard.url for shard in opener]


DISTRIBUTED, MULTIPROCESSING = SHARDING_PRIORITIES.DISTRIBUTED, SHARDING_PRIORITIES.MULTIPROCESSING


def test_dataloader2_layout_with_fewer_shards_than_readers_warns(tmp_path: Path) -> None:
    write_shards(tmp_path, [1] * 6)
    urls = shards_of(tmp_path)
    first = opener_over(urls, (2, 0, DISTRIBUTED), (4, 0, MULTIPROCESSING))
    with pytest.warns(RuntimeWarning) as caught:
        assert opened(first) == urls[:1]
    (message,) = [str(warning.message) for warning in caught]
    assert message.startswith(
        "6 shards for 2 ranks x 4 workers = 8 readers: 2 readers get none; ranks get 4, 2 "
        "shards, so they run out at different times"
    )
    assert message.endswith("a multiple of 8 shards splits evenly")
    with warnings.catch_warnings():  # the others read quietly: one warning per job
        warnings.simplefilter("error")
        assert opened(opener_over(urls, (2, 1, DISTRIBUTED), (4, 1, MULTIPROCESSING))) == [urls[5]]
        assert opened(opener_over(urls, (2, 1, DISTRIBUTED), (4, 3, MULTIPROCESSING))) == []


def test_dataloader2_layout_leaving_a_rank_without_shards_is_an_error(tmp_path: Path) -> None:
    write_shards(tmp_path, [1] * 4)
    for rank, worker in [(0, 0), (1, 2)]:
        opener = opener_over(
            shards_of(tmp_path), (2, rank, DISTRIBUTED), (4, worker, MULTIPROCESSING)
        )
        with pytest.raises(
            wds.ShardSplitError,
            match=r"^4 shards for 2 ranks x 4 workers = 8 "
            r"readers: rank 1 would read nothing.* use at least 8 shards",
        ):
            opened(opener)


def test_workers_of_a_plain_dataloader_are_told_they_split_unevenly(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The warning comes from worker 0, in its own process: it reaches the terminal."""
    write_shards(tmp_path, [2])
    loader = two_workers(wds.WebDataset(shards_of(tmp_path)))
    assert len(list(loader)) == 2
    assert (
        "RuntimeWarning: 1 shard for 2 workers: 1 reader gets none; a multiple of 2 shards "
        "splits evenly" in capfd.readouterr().err
    )


def test_a_pipeline_without_a_split_under_workers_is_told_it_reads_twice(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    write_shards(tmp_path, [2] * 2)
    pipe = wds.ShardList(shards_of(tmp_path)).open_shards().load_tar().group_samples()
    loader = two_workers(pipe)
    assert len(list(loader)) == 8  # what the warning is about: every sample twice
    assert "ShardOpener has no sharding_filter upstream, so each of the 2 readers" in (
        capfd.readouterr().err
    )


class WorkerResampler(torch.utils.data.IterableDataset[dict[str, str]]):
    """A program's own resampler, webdataset style: each worker draws its own shards."""

    def __init__(self, urls: list[str], draws: int) -> None:
        self.urls, self.draws = urls, draws

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        rng = random.Random(0 if info is None else info.id)
        return ({"url": rng.choice(self.urls)} for _ in range(self.draws))


class SizedWorkerResampler(WorkerResampler):
    """The same with a length, which says nothing of the split: it declares itself."""

    per_worker_shards = True

    def __len__(self) -> int:
        return self.draws


@pytest.mark.parametrize("source", [WorkerResampler, SizedWorkerResampler])
def test_a_source_that_draws_in_each_worker_is_not_told_it_reads_twice(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], source: type[WorkerResampler]
) -> None:
    """Issue 27: "ShardOpener has no sharding_filter upstream" was a false alarm for a source
    of shards drawn apart in each worker; it is for a shard list of known length only."""
    write_shards(tmp_path, [2] * 3)
    pipe = wds.DataPipeline(source(shards_of(tmp_path), draws=2), wds.tarfile_to_samples())
    loader = two_workers(pipe)
    assert len(list(loader)) == 8
    assert "sharding_filter" not in capfd.readouterr().err


def test_a_reader_of_an_unsized_shard_list_that_got_nothing_says_so(tmp_path: Path) -> None:
    write_shards(tmp_path, [1] * 2)
    specs = IterableWrapper([shards_of(tmp_path)])  # a spec list: its length is not known ahead
    pipe = specs.list_shards().sharding_filter()
    pipe.apply_sharding(3, 2, DISTRIBUTED)
    with pytest.warns(RuntimeWarning, match="^rank 2 of 3 ranks got no shard this epoch"):
        assert list(pipe.open_shards()) == []


def test_full_sync_without_a_process_group_passes_items_through() -> None:
    assert not dist.is_initialized()
    assert list(wds.full_sync(range(5))) == [0, 1, 2, 3, 4]
