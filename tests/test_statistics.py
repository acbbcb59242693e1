"""Where a pipeline's time goes (wdspipes/core/statistics.py): per-stage statistics that a
program reads from its pipeline, on from the epoch that opens after it asks."""

from __future__ import annotations

import pickle
from typing import Any

from shardgen import Shards
from stage_examples import samples


def names_and_items(stats: Any) -> list[tuple[str, int]]:
    return [(record.name, record.items) for record in stats.stages]


def test_each_stage_is_counted_and_its_time_split(stage_shards: Shards) -> None:
    pipe = samples(stage_shards.paths).decode().to_tuple("cls", "txt").batched(5)
    stats = pipe.statistics()
    assert not stats.stages  # measured from the next epoch
    batches = list(pipe)
    assert len(batches) == 3
    assert names_and_items(stats) == [
        ("ShardList", 4),
        ("open_shards", 4),
        ("load_tar + group_samples", 12),
        ("decode", 12),
        ("to_tuple", 12),
        ("batched", 3),
    ]
    stats.finish()
    before = 0.0
    for record in stats.stages:
        assert record.busy >= 0 and record.waiting == before
        assert abs(record.busy + record.waiting - record.inclusive) < 1e-9 or record.busy == 0
        before = record.inclusive
    assert 0 <= stats.consumer <= stats.elapsed
    assert stats.bottleneck() in {"consumer", *(record.name for record in stats.stages)}
    document = stats.as_json()
    assert document["stages"][3]["stage"] == "decode" and document["stages"][3]["items"] == 12
    assert str(stats).splitlines()[-1].startswith("bottleneck: ")


def test_threads_and_prefetch_say_their_work_and_what_is_in_flight(stage_shards: Shards) -> None:
    pipe = samples(stage_shards.paths).prefetch_items(6).decode(threads=2)
    stats = pipe.statistics()
    assert len(list(pipe)) == 12
    *_, ahead, decode = stats.stages
    assert (ahead.name, ahead.ahead, ahead.items) == ("prefetch_items", True, 12)
    assert (decode.name, decode.threads, decode.items) == ("decode", 2, 12)
    assert decode.thread_work > 0 and decode.in_flight > 0


def test_each_epoch_has_its_own_and_the_measuring_goes_on(stage_shards: Shards) -> None:
    pipe = samples(stage_shards.paths)
    first = pipe.statistics()
    list(pipe)
    assert pipe.statistics() is first  # the last one measured
    list(pipe)
    second = pipe.statistics()
    assert second is not first and names_and_items(second) == names_and_items(first)
    copy = pickle.loads(pickle.dumps(pipe))  # a worker's copy measures too
    list(copy)
    assert names_and_items(copy.statistics()) == names_and_items(first)


def test_a_pipeline_not_asked_is_not_measured(stage_shards: Shards) -> None:
    """Measuring costs two clock readings per item and stage: only where asked."""
    pipe = samples(stage_shards.paths)
    items = iter(pipe)
    next(items)
    epoch = pipe._run().epoch
    assert epoch is not None and epoch.stats is None and not any(epoch.records)
    items.close()
