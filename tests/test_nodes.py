"""The torchdata.nodes front end (``wds.as_node``): ``torchdata.nodes.Loader`` over a wdspipes
pipeline restored from a state saved after any item (with a sample shuffle buffer and batches,
mid-epoch, at an epoch's end, across epochs) delivers what the uninterrupted run delivers;
where torchdata has no nodes (0.9), ``as_node`` says so. ``make test`` runs this module with
torchdata 0.11 too (the ``torchdata`` mark)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from shardgen import Shards

import wdspipes as wds
from wdspipes.errors import ResumeError, TorchdataVersionError, WdsError

pytestmark = pytest.mark.torchdata

try:
    HAS_NODES = importlib.util.find_spec("torchdata.nodes") is not None
except ImportError:
    HAS_NODES = False
needs_nodes = pytest.mark.skipif(not HAS_NODES, reason="torchdata.nodes is in torchdata 0.10+")

SHARDS, PER_SHARD, EPOCHS = 3, 7, 3


@pytest.fixture(scope="module")
def node_shards(tmp_path_factory: pytest.TempPathFactory) -> Shards:
    """``SHARDS`` tar shards of ``PER_SHARD`` samples with a ``txt`` naming the sample."""
    shards = Shards.numbered(tmp_path_factory.mktemp("nodes"), "n", SHARDS)
    for shard, path in enumerate(shards.paths):
        with wds.TarWriter(path) as sink:
            for index in range(PER_SHARD):
                sink.write({"__key__": f"{shard}{index:02d}", "txt": f"{shard}-{index}"})
    return shards


def pipeline(shards: Shards, batched: bool = True) -> Any:
    """Shards shuffled, samples shuffled in a buffer, batched by 2 (the last batch short)."""
    samples = (
        wds.WebDataset(shards.spec, shardshuffle=True, seed=1)
        .map_dict(txt=bytes.decode)
        .buffer_shuffle(5, initial=3, seed=2)
        .to_tuple("txt")
    )
    return samples.batched(2) if batched else samples


def loader(shards: Shards) -> Any:
    from torchdata.nodes import Loader

    return Loader(wds.as_node(pipeline(shards)))


def loader_with_nodes_after(shards: Shards) -> Any:
    """The pipeline without its batches, then torchdata's own nodes: a prefetching thread and
    batches of 2."""
    from torchdata.nodes import Batcher, Loader, Prefetcher

    node = wds.as_node(pipeline(shards, batched=False))
    return Loader(Batcher(Prefetcher(node, prefetch_factor=3), batch_size=2, drop_last=False))


def uninterrupted(shards: Shards, make: Any = loader) -> list[list[Any]]:
    """Every epoch of an uninterrupted run, each a list of batches."""
    run = make(shards)
    return [list(run) for _ in range(EPOCHS)]


def cut_and_resume(shards: Shards, cut: int, make: Any = loader) -> list[Any]:
    """The batches of a run whose state is saved after its first ``cut`` batches, followed by
    those of a new loader restored from that state, up to the uninterrupted run's count."""
    first = make(shards)
    taken: list[Any] = []
    state = None
    while state is None:
        for batch in first:
            taken.append(batch)
            if len(taken) == cut:
                state = first.state_dict()
                break
        if cut == 0 and state is None:
            state = first.state_dict()
    total = epoch_length(shards) * EPOCHS
    resumed = make(shards)
    resumed.load_state_dict(state)
    rest: list[Any] = []
    while len(taken) + len(rest) < total:
        rest.extend(resumed)
    return taken + rest


def epoch_length(shards: Shards) -> int:
    return -(-SHARDS * PER_SHARD // 2)


@needs_nodes
def test_the_node_is_a_torchdata_node_and_each_epoch_shuffles_anew(node_shards: Shards) -> None:
    from torchdata.nodes import BaseNode

    node = wds.as_node(pipe := pipeline(node_shards))
    assert isinstance(node, BaseNode) and node.pipeline is pipe
    epochs = uninterrupted(node_shards)
    assert [len(epoch) for epoch in epochs] == [epoch_length(node_shards)] * EPOCHS
    names = sorted(name for batch in epochs[0] for name in batch[0])
    assert names == sorted(f"{s}-{i}" for s in range(SHARDS) for i in range(PER_SHARD))
    assert epochs[0] != epochs[1] != epochs[2]


@needs_nodes
@pytest.mark.parametrize(
    "cut",
    [0, 1, 5, 10, 11, 12, 16, 22, 33],  # epochs of 11 batches: their ends, past them, mid-way
)
def test_loader_resumes_exactly_after_any_batch(node_shards: Shards, cut: int) -> None:
    expected = [batch for epoch in uninterrupted(node_shards) for batch in epoch]
    assert cut_and_resume(node_shards, cut) == expected


@needs_nodes
@pytest.mark.parametrize("cut", [3, 11, 15])
def test_torchdatas_nodes_after_it_resume_exactly_too(node_shards: Shards, cut: int) -> None:
    expected = uninterrupted(node_shards, loader_with_nodes_after)
    assert [len(epoch) for epoch in expected] == [epoch_length(node_shards)] * EPOCHS
    flat = [batch for epoch in expected for batch in epoch]
    assert cut_and_resume(node_shards, cut, loader_with_nodes_after) == flat


@needs_nodes
def test_a_state_saved_as_an_epoch_begins_resumes_that_epoch(node_shards: Shards) -> None:
    """The state of a loader whose second epoch began but delivered nothing yet."""
    first = loader(node_shards)
    epoch_0 = list(first)
    iter(first)
    state = first.state_dict()
    resumed = loader(node_shards)
    resumed.load_state_dict(state)
    rest = [list(resumed) for _ in range(EPOCHS - 1)]
    assert [epoch_0, *rest] == uninterrupted(node_shards)


@needs_nodes
def test_set_epoch_numbers_the_nodes_next_epoch(node_shards: Shards) -> None:
    epochs = uninterrupted(node_shards)
    node = wds.as_node(pipeline(node_shards))
    node.pipeline.set_epoch(2)
    from torchdata.nodes import Loader

    assert list(Loader(node)) == epochs[2]


@needs_nodes
def test_a_pipeline_that_cannot_resume_says_why() -> None:
    from torch.utils.data.datapipes.iter import IterableWrapper

    node = wds.as_node(IterableWrapper([{"a": 1}, {"a": 2}]).batched(2))
    with pytest.raises(
        ResumeError, match=r"\(batched\), at the end of the pipeline, cannot resume"
    ):
        node.state_dict()


def test_as_node_refuses_what_is_no_pipeline() -> None:
    with pytest.raises(TypeError, match="list has no state_dict, load_state_dict"):
        wds.as_node([1, 2])


@pytest.mark.skipif(HAS_NODES, reason="torchdata has nodes")
def test_as_node_says_torchdata_has_no_nodes(node_shards: Shards) -> None:
    import torchdata

    needs = r"torchdata\.nodes, in torchdata 0\.10"
    with pytest.raises(TorchdataVersionError, match=needs) as info:
        wds.as_node(pipeline(node_shards))
    assert f"this is torchdata {torchdata.__version__}" in str(info.value)
    assert isinstance(info.value, WdsError) and isinstance(info.value, ImportError)
