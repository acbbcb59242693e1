"""Resuming with another number of readers (workers times ranks): the states of all the readers
of a job, merged, load into any other number of readers, and the rest of the epoch delivers
every sample not yet delivered exactly once; the epochs after it are normal epochs of the new
size. Readers are simulated in one process here (each a pipeline given its place in the split,
as a loader gives it); tests/test_resume.py runs the loaders' workers, and
tests/test_distributed.py ranks."""

from __future__ import annotations

import pickle
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from torch.utils.data import IterDataPipe
from torch.utils.data.graph_settings import apply_sharding

import wdspipes as wds
from wdspipes.errors import ResumeError
from wdspipes.io.urls import SCHEMES
from wdspipes.read.specs import expand_urls

pytestmark = pytest.mark.filterwarnings(r"ignore:\d+ shards for .*:RuntimeWarning")
"""Readers are simulated with shards that do not split evenly among them: the split check's
warning is expected."""

SIZES = [7, 9, 5, 11, 6, 8, 10, 4, 12, 3]
"""Samples per shard: uneven, so readers run out apart and shuffle buffers span shards."""


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The same samples as tar and as msgpack shards: a spec of each kind."""
    directory = tmp_path_factory.mktemp("elastic")
    for shard, size in enumerate(SIZES):
        with (
            wds.TarWriter(str(directory / f"s-{shard}.tar")) as tar,
            wds.MsgpackWriter(directory / f"s-{shard}.msgpack") as stream,
        ):
            for index in range(size):
                sample = {"__key__": f"{shard}-{index:02d}", "cls": index}
                tar.write(sample)
                stream.write(sample)
    last = len(SIZES) - 1
    return {kind: f"{directory}/s-{{0..{last}}}.{kind}" for kind in ("tar", "msgpack")}


ALL = {f"{shard}-{index:02d}" for shard, size in enumerate(SIZES) for index in range(size)}


def key_of(sample: dict[str, Any]) -> str:
    return str(sample["__key__"])


def keys_of(batch: list[dict[str, Any]]) -> list[str]:
    return [str(sample["__key__"]) for sample in batch]


def webdataset(specs: dict[str, str]) -> IterDataPipe[Any]:
    return (
        wds.WebDataset(specs["tar"], shardshuffle=True, seed=1)
        .buffer_shuffle(12, initial=5, seed=2)
        .map_samples(key_of)
    )


def data_pipeline(specs: dict[str, str]) -> IterDataPipe[Any]:
    return wds.DataPipeline(
        wds.SimpleShardList(specs["tar"]),
        wds.shuffle(100, seed=3),
        wds.split_by_node,
        wds.split_by_worker,
        wds.tarfile_to_samples(),
        wds.shuffle(8, seed=4),
        wds.decode(),
        wds.batched(3, collation_fn=None),
        wds.map(keys_of),
    )


def streams(specs: dict[str, str]) -> IterDataPipe[Any]:
    shards = wds.ShardList(specs["msgpack"]).buffer_shuffle(20, initial=20, seed=5)
    samples = shards.sharding_filter().open_shards().load_msgpack()
    return samples.buffer_shuffle(9, initial=4, seed=6).map_samples(key_of)


PIPELINES: dict[str, Callable[[dict[str, str]], IterDataPipe[Any]]] = {
    "WebDataset": webdataset,
    "DataPipeline, batches": data_pipeline,
    "msgpack streams": streams,
}


def reader(build: Callable[[], IterDataPipe[Any]], readers: int, index: int) -> IterDataPipe[Any]:
    """Reader ``index`` of ``readers``: the pipeline with its place in the split, as a loader
    gives it to a worker."""
    pipe = build()
    apply_sharding(pipe, readers, index)
    return pipe


def flat(items: list[Any]) -> list[str]:
    return [key for item in items for key in (item if isinstance(item, list) else [item])]


def saved_job(
    build: Callable[[], IterDataPipe[Any]], readers: int, rng: random.Random
) -> tuple[list[str], list[dict[str, Any]]]:
    """``readers`` readers, each stopped at a random point of its epoch: what they delivered,
    and their states as a checkpoint keeps them."""
    delivered: list[str] = []
    states = []
    for index in range(readers):
        everything = list(reader(build, readers, index))
        pipe = reader(build, readers, index)
        items = iter(pipe)
        head = [next(items) for _ in range(rng.randint(0, len(everything)))]
        assert head == everything[: len(head)]
        delivered += flat(head)
        states.append(pickle.loads(pickle.dumps(pipe.state_dict())))
    return delivered, states


@pytest.mark.parametrize("name", list(PIPELINES))
def test_the_rest_of_the_epoch_is_delivered_once_by_any_number_of_readers(
    shards: dict[str, str], name: str
) -> None:
    rng = random.Random(name)
    for _ in range(12):
        old, new = rng.randint(1, 4), rng.randint(1, 4)
        delivered, states = saved_job(lambda: PIPELINES[name](shards), old, rng)
        merged = wds.merge_states(states)
        rest = []
        for index in range(new):
            pipe = reader(lambda: PIPELINES[name](shards), new, index)
            pipe.load_state_dict(merged)
            rest += flat(list(pipe))
            fresh = reader(lambda: PIPELINES[name](shards), new, index)
            list(fresh)  # its epoch 0
            assert list(pipe) == list(fresh), "the next epoch is not epoch 1 of the new size"
        counts = Counter(delivered + rest)
        assert set(counts) == ALL and max(counts.values()) == 1, f"{old} readers into {new}"


def test_the_resumed_epoch_is_decided_by_the_state_and_the_counts(shards: dict[str, str]) -> None:
    delivered, states = saved_job(lambda: webdataset(shards), 3, random.Random(1))
    merged = pickle.loads(pickle.dumps(wds.merge_states(states)))

    def rest() -> list[list[str]]:
        runs = []
        for index in range(2):
            pipe = reader(lambda: webdataset(shards), 2, index)
            pipe.load_state_dict(merged)
            runs.append(list(pipe))
        return runs

    first = rest()
    assert first == rest()
    assert sum(map(len, first)) == len(ALL) - len(delivered) > 0


def resampled(specs: dict[str, str]) -> IterDataPipe[Any]:
    return (
        wds.WebDataset(specs["tar"], resampled=True, seed=7)
        .buffer_shuffle(10, initial=5, seed=8)
        .map_samples(key_of)
        .with_epoch(25)
    )


def test_a_resampled_epoch_keeps_its_budget(shards: dict[str, str]) -> None:
    """with_epoch(25) a reader: 3 readers make 75 samples an epoch, however many readers
    deliver the rest of it; the epoch after is 25 a reader of the new job."""
    rng = random.Random(3)
    for new in (1, 2, 4):
        delivered, states = saved_job(lambda: resampled(shards), 3, rng)
        merged = wds.merge_states(states)
        rest, after = [], []
        for index in range(new):
            pipe = reader(lambda: resampled(shards), new, index)
            pipe.load_state_dict(merged)
            rest += list(pipe)
            after.append(len(list(pipe)))
        assert len(delivered) + len(rest) == 3 * 25
        assert after == [25] * new


def test_one_readers_state_is_the_whole_job_and_loads_into_any_split(
    shards: dict[str, str],
) -> None:
    pipe = webdataset(shards)
    items = iter(pipe)
    head = [next(items) for _ in range(23)]
    state = pipe.state_dict()
    rest = []
    for index in range(3):
        again = reader(lambda: webdataset(shards), 3, index)
        again.load_state_dict(state)
        rest += list(again)
    assert Counter(head + rest) == Counter(ALL)


def test_merging_refuses_what_would_lose_or_repeat_samples(shards: dict[str, str]) -> None:
    _, states = saved_job(lambda: webdataset(shards), 3, random.Random(4))
    with pytest.raises(ResumeError, match=r"readers \[1\] of 3 are missing"):
        wds.merge_states([states[0], states[2]])
    with pytest.raises(ResumeError, match="reader 2's state twice"):
        wds.merge_states([*states, states[2]])
    merged = wds.merge_states(states)
    with pytest.raises(ResumeError, match="cannot be merged again"):
        wds.merge_states([merged])
    other = dict(states[1], epoch=5)
    with pytest.raises(ResumeError, match="different epochs"):
        wds.merge_states([states[0], other, states[2]])
    with pytest.raises(ResumeError, match="got none"):
        wds.merge_states([])


def test_a_stage_that_cannot_share_its_place_is_named(shards: dict[str, str]) -> None:
    def sliced() -> IterDataPipe[Any]:
        return webdataset(shards).islice(0, None, 2)

    _, states = saved_job(sliced, 2, random.Random(5))
    pipe = reader(sliced, 3, 0)
    with pytest.raises(ResumeError, match=r"ItemSlicer \(islice\) cannot resume with the shards"):
        pipe.load_state_dict(wds.merge_states(states))


def test_an_opener_that_does_not_read_the_split_directly_is_refused(
    shards: dict[str, str],
) -> None:
    """A stage between the sharding filter and the opener could change which index a shard
    has (a filter drops some): merged states are refused there."""

    def filtered() -> IterDataPipe[Any]:
        split = wds.ShardList(shards["tar"]).sharding_filter()
        return split.filter(bool).open_shards().load_tar().group_samples().map_samples(key_of)

    _, states = saved_job(filtered, 2, random.Random(7))
    pipe = reader(filtered, 3, 1)
    with pytest.raises(ResumeError, match=r"reads the sharding filter through FilterIterDataPipe"):
        pipe.load_state_dict(wds.merge_states(states))


def test_a_changed_shard_list_is_refused(shards: dict[str, str], tmp_path: Path) -> None:
    """The shards the merged state goes on in are checked by a checksum of their URLs."""
    _, states = saved_job(lambda: webdataset(shards), 2, random.Random(6))
    merged = wds.merge_states(states)
    renamed = dict(shards, tar=shards["tar"].replace("/s-{", "/./s-{"))
    pipe = reader(lambda: webdataset(renamed), 2, 0)
    pipe.load_state_dict(merged)
    with pytest.raises(ResumeError, match="not the one the state was saved with"):
        list(pipe)


@pytest.fixture
def signed(monkeypatch: pytest.MonkeyPatch, shards: dict[str, str]) -> Callable[[str], list[str]]:
    """The tar shards as URLs of the scheme ``signed:``, each with a query holding a signature
    (a secret: errors and ``__url__`` show it as ``***``)."""

    def open_signed(url: str) -> BinaryIO:
        return Path(url[len("signed:") :].partition("?")[0]).open("rb")

    monkeypatch.setitem(SCHEMES, "signed", open_signed)
    paths = expand_urls(shards["tar"])
    return lambda signature: [f"signed:{path}?sig={signature}" for path in paths]


@pytest.mark.parametrize(("old", "new"), [(3, 2), (2, 2)])
def test_urls_with_secrets_resume_signed_anew(
    signed: Callable[[str], list[str]], old: int, new: int
) -> None:
    """States keep checksums of the shard URLs as readers see them, secrets hidden: a merged
    state loads (before, the opener checked the whole URL against the reader's checksum of
    the URL shown, and refused), and so does a state whose URLs the restarted job signed
    anew; a shard list that changed is refused without showing a secret."""

    def build(urls: list[str]) -> IterDataPipe[Any]:
        pipe = wds.WebDataset(urls, shardshuffle=True, seed=1)
        return pipe.buffer_shuffle(12, initial=5, seed=2).map_samples(key_of)

    delivered, states = saved_job(lambda: build(signed("old-secret")), old, random.Random(5))
    merged = wds.merge_states(states)
    rest = []
    for index in range(new):
        pipe = reader(lambda: build(signed("new-secret")), new, index)
        pipe.load_state_dict(states[index] if old == new else merged)
        rest += list(pipe)
    assert Counter(delivered + rest) == Counter(ALL)
    changed = signed("new-secret")
    changed[:2] = changed[1::-1]
    pipe = reader(lambda: build(changed), new, 0)
    pipe.load_state_dict(states[0] if old == new else merged)
    with pytest.raises(ResumeError, match="saved with") as raised:
        list(pipe)
    assert "secret" not in str(raised.value)
