"""A webdataset program moved to wdspipes by changing its imports only (issue 27, item 5):
tests/webdataset_program.py, written for webdataset 1.0.2 (a resampler of its own, a grouper
built from ``tariterators`` functions, a ``PipelineStage`` shard shuffle driven by an epoch
counter shared with the workers, ``WebLoader(..., shuffle=False)``, two workers), runs on both
libraries, resampled and not: every epoch gives the same samples on both, shuffled.

It needs nothing of wdspipes' epochs (``set_epoch``): the program counts its epochs itself, as
such programs do."""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from reference import quietly, wdsref
from shardgen import make_tar

pytestmark = pytest.mark.loaders

PROGRAM = Path(__file__).with_name("webdataset_program.py")
SHARDS, PER_SHARD, EPOCHS = 6, 5, 2


def program(library: str) -> ModuleType:
    """The program, with its imports of webdataset changed to ``library``'s."""
    source = PROGRAM.read_text()
    if library == "wdspipes":
        source, count = re.subn(r"^(import|from) webdataset\b", r"\1 wdspipes", source, flags=re.M)
        assert count == 5, "the imports change, and nothing else"
    name = f"webdataset_program_on_{library}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    sys.modules[name] = module  # the workers are forked: nothing is pickled by name
    exec(compile(source, str(PROGRAM), "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The shards' spec: six shards of five samples."""
    directory = tmp_path_factory.mktemp("migration")
    for shard in range(SHARDS):
        members = []
        for index in range(PER_SHARD):
            key, label = f"{shard}-{index}", shard * PER_SHARD + index
            members += [(f"{key}.cls", b"%d" % label), (f"{key}.txt", f"text {key}".encode())]
        (directory / f"shard-{shard}.tar").write_bytes(make_tar(members))
    return f"{directory}/shard-{{0..{SHARDS - 1}}}.tar"


Batch = list[tuple[str, int, str]]


def epochs(library: str, urls: str, resampled: bool) -> list[list[Batch]]:
    """The batches of each epoch, each a list of (key, label, text)."""
    module = program(library)
    shared_epoch = module.SharedEpoch()
    loader = module.get_wds_loader(urls, resampled=resampled, shared_epoch=shared_epoch)
    result = []
    for epoch in range(EPOCHS):
        shared_epoch.set_value(epoch)
        result.append(
            [
                [
                    (key, int(label), text)
                    for key, label, text in zip(keys, labels, texts, strict=True)
                ]
                for keys, labels, texts in loader
            ]
        )
    return result


def in_tar_order(batch: Batch) -> bool:
    """Whether a batch's samples follow one another as in their shards (the next sample of
    the same shard, or the first of the next shard): what every batch is when the sample
    shuffle is off."""
    places = [tuple(map(int, key.split("-"))) for key, _, _ in batch]
    return all(
        (index == last_index + 1 and shard == last_shard)
        or (index == 0 and last_index == PER_SHARD - 1)
        for (last_shard, last_index), (shard, index) in itertools.pairwise(places)
    )


@pytest.mark.parametrize("resampled", [False, True], ids=["shard-list", "resampled"])
def test_the_program_runs_on_wdspipes_with_its_imports_changed(urls: str, resampled: bool) -> None:
    ours = epochs("wdspipes", urls, resampled)
    theirs = quietly(lambda _: epochs("webdataset", urls, resampled), wdsref)
    every = sorted(
        (f"{shard}-{index}", shard * PER_SHARD + index, f"text {shard}-{index}")
        for shard in range(SHARDS)
        for index in range(PER_SHARD)
    )
    for epoch, (batches, their_batches) in enumerate(zip(ours, theirs, strict=True)):
        mine = [sample for batch in batches for sample in batch]
        reference = [sample for batch in their_batches for sample in batch]
        assert sorted(mine) == sorted(reference), f"epoch {epoch}: other samples"
        if not resampled:
            assert sorted(mine) == every, f"epoch {epoch}: each sample once"
        else:  # 2 workers x 3 shards drawn apart, each read whole
            assert len(mine) == 2 * 3 * PER_SHARD and set(mine) <= set(every)
        assert not all(map(in_tar_order, batches)), f"epoch {epoch}: not shuffled"
    assert ours[0] != ours[1]  # a new order each epoch
