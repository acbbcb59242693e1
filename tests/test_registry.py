"""One test over every registered wdspipes stage: it pickles, and a copy seeded alike gives the
same output, epoch after epoch. A new stage is covered by adding it to EXAMPLES
(tests/stage_examples.py, which tests/test_stage_state.py runs too); the walk fails until it is.
Also: wdspipes and torchdata import together, in either order, with no clash."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from shardgen import Shards
from stage_examples import EXAMPLES, comparable, registered_stages
from torch.utils.data import IterDataPipe
from torch.utils.data.graph_settings import apply_random_seed


def test_every_registered_stage_has_an_example() -> None:
    assert sorted(registered_stages()) == sorted(EXAMPLES)


def seeded_output(pipe: IterDataPipe[Any], seed: int) -> list[Any]:
    apply_random_seed(pipe, torch.Generator().manual_seed(seed))
    return [comparable(item) for item in pipe]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_stage_pickles_and_reiterates_the_same_with_the_same_seed(
    name: str, stage_shards: Shards
) -> None:
    """A pickled copy, seeded as the original is epoch after epoch, gives the same output."""
    pipe = EXAMPLES[name](stage_shards.paths)
    assert isinstance(pipe, registered_stages()[name])
    clone = pickle.loads(pickle.dumps(pipe))
    for seed in (1, 1, 2):  # a loader may hand out the same seed again
        output = seeded_output(pipe, seed)
        assert output, "an example must produce items"
        assert seeded_output(clone, seed) == output


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_stage_docstring_follows_the_template(name: str) -> None:
    doc = registered_stages()[name].__doc__ or ""
    assert doc.splitlines()[0].endswith(f"(functional name: ``{name}``).")
    assert "Args:" in doc and "Yields:" in doc and ">>>" in doc


@pytest.mark.slow
@pytest.mark.dataloader2  # torchdata.datapipes: 0.8 and 0.9 only
@pytest.mark.parametrize(
    "order",
    [("torchdata.datapipes", "wdspipes"), ("wdspipes", "torchdata.datapipes")],
    ids=["torchdata-first", "wdspipes-first"],
)
def test_imports_with_torchdata_in_either_order(order: tuple[str, str]) -> None:
    script = (
        "import warnings; warnings.simplefilter('ignore')\n"
        f"import {order[0]}; import {order[1]}\n"
        "import wdspipes  # every stage's name, at once, in either order\n"
        "from torch.utils.data import IterDataPipe as D\n"
        "assert {'load_tar', 'group_samples', 'load_from_tar', 'webdataset'} <= set(D.functions)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).parent)
