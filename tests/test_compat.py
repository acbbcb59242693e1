"""The torchdata mends (wdspipes/loaders/compat.py): applied only to the torchdata versions they
were checked against, and a dataset that is not a wdspipes pipeline behaves under StatefulDataLoader
and DataLoader2 exactly as it does without wdspipes imported."""

from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from stage_examples import samples, write_shards
from torch.utils.data.datapipes.datapipe import _IterDataPipeSerializationWrapper
from torch.utils.data.datapipes.iter import IterableWrapper
from torchdata.stateful_dataloader import StatefulDataLoader

from wdspipes.loaders import compat

pytestmark = pytest.mark.torchdata


def test_a_wdspipes_pipeline_gets_its_state_methods_in_a_stateful_dataloader(
    tmp_path: Path,
) -> None:
    pipe = samples(write_shards(tmp_path))
    loader = StatefulDataLoader(pipe, batch_size=None)
    assert type(loader.dataset) is compat.StatefulPipeline
    items = iter(loader)
    next(items)
    assert loader.dataset.state_dict() == pipe.state_dict()


def test_other_datasets_keep_torchdatas_wrapper_as_it_is() -> None:
    assert not hasattr(_IterDataPipeSerializationWrapper, "state_dict")  # no class patched
    loader = StatefulDataLoader(IterableWrapper(range(3)), batch_size=None)
    assert type(loader.dataset) is _IterDataPipeSerializationWrapper
    assert not hasattr(loader.dataset, "state_dict")
    plain = [1, 2, 3]
    assert StatefulDataLoader(plain, batch_size=None).dataset is plain


def test_the_stateful_dataloader_mend_skips_unchecked_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert compat.mend_stateful_dataloader()  # this torchdata is a checked one: in place
    before = (StatefulDataLoader.__init__, StatefulDataLoader.load_state_dict)
    monkeypatch.setattr(compat, "_mended", False)
    monkeypatch.setattr(sys.modules["torchdata"], "__version__", "0.12.0")
    assert not compat.mend_stateful_dataloader()
    assert (StatefulDataLoader.__init__, StatefulDataLoader.load_state_dict) == before


@pytest.mark.dataloader2
@pytest.mark.slow
def test_the_dataloader2_mend_skips_unchecked_versions() -> None:
    script = "\n".join(
        [
            "import warnings; warnings.simplefilter('ignore')",
            "import torchdata; torchdata.__version__ = '0.10.0'",
            "import torchdata.dataloader2",
            "import wdspipes",
            "from torchdata.dataloader2.communication.iter import _IterateQueueDataPipes as Q",
            "assert not getattr(Q, '_wdspipes_fixed', False)",
            "assert not wdspipes.fix_dataloader2()",
        ]
    )
    subprocess.run([sys.executable, "-c", script], check=True)


FOREIGN = """
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
import torchdata.dataloader2 as dl2  # first: importing wdspipes then mends DataLoader2
if sys.argv[1] == "with":
    import wdspipes
from torch.utils.data.datapipes.iter import IterableWrapper
from torchdata.dataloader2.communication.iter import _IterateQueueDataPipes
from torchdata.stateful_dataloader import StatefulDataLoader


def double(x):
    return 2 * x


def pipe():
    return IterableWrapper(range(24)).shuffle().sharding_filter().map(double)


def loader(workers):
    generator = torch.Generator().manual_seed(0)
    return StatefulDataLoader(pipe(), num_workers=workers, batch_size=None, generator=generator)


out = {"mended": getattr(_IterateQueueDataPipes, "_wdspipes_fixed", False)}
for workers in (0, 2):
    first = loader(workers)
    items = iter(first)
    head = [next(items) for _ in range(7)]
    state = first.state_dict()
    again = loader(workers)
    again.load_state_dict(state)
    out[f"stateful, {workers} workers"] = {
        "dataset": type(first.dataset).__name__,
        "has state_dict": hasattr(first.dataset, "state_dict"),
        "head": head,
        "state": repr(state),
        "rest": list(again),
    }
torch.manual_seed(0)
reading = dl2.MultiProcessingReadingService(num_workers=2)
two = dl2.DataLoader2(pipe(), reading_service=reading)
two.seed(0)
out["DataLoader2, 2 workers"] = [list(two), list(two)]
two.shutdown()
print(json.dumps(out))
"""


def run_foreign(variant: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", FOREIGN, variant],
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return json.loads(result.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.dataloader2
@pytest.mark.slow
@pytest.mark.loaders
def test_a_dataset_not_of_wdspipes_behaves_as_without_wdspipes() -> None:
    without, with_wdspipes = run_foreign("without"), run_foreign("with")
    assert (without.pop("mended"), with_wdspipes.pop("mended")) == (False, True)
    assert with_wdspipes == without
    assert without["stateful, 0 workers"]["head"]  # it did run


# A garbage collection that reaches an abandoned FullSync while a thread starts (as happened in
# a 2-rank run, tests/test_distributed.py): the collector runs inside threading's bookkeeping,
# which holds the lock every ending thread takes. This script finalizes a FullSync whose
# prefetch thread is alive right there; torchdata's own __del__ joins that thread and so waits
# for itself forever.
FULL_SYNC = """
import sys, threading, warnings
warnings.simplefilter("ignore")
import torchdata.dataloader2
from torchdata.datapipes.iter.util.distributed import FullSyncIterDataPipe, _PrefetchExecutor
from torch.utils.data.datapipes.iter import IterableWrapper
if sys.argv[1] == "with":
    import wdspipes
pipe = FullSyncIterDataPipe(IterableWrapper(range(3)))
pipe._executor = _PrefetchExecutor(iter(range(3)), 1, None, 10)
pipe._executor.return_next()  # the prefetch thread is running
with threading._shutdown_locks_lock:  # as inside threading's start of a new thread
    pipe.__del__()
print("released")
"""


@pytest.mark.dataloader2
@pytest.mark.slow
@pytest.mark.parametrize("wdspipes", ["with", "without"])
def test_a_collected_full_sync_does_not_wait_for_its_own_thread(wdspipes: str) -> None:
    command = [sys.executable, "-c", FULL_SYNC, wdspipes]
    if wdspipes == "without":  # the control: torchdata's __del__ hangs there
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run(command, capture_output=True, timeout=20)
        return
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == "released\n"


def test_dataloader2_says_what_to_use_where_torchdata_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With torchdata 0.10+ (as with 0.11 in ``make test``'s second environment) or none,
    asking wdspipes for DataLoader2 is one error that names the version and what to use."""
    import torchdata

    from wdspipes.errors import TorchdataVersionError, WdsError
    from wdspipes.loaders import dataloader2

    if importlib.util.find_spec("torchdata.dataloader2") is not None:  # 0.9: as 0.11 has it
        monkeypatch.setitem(sys.modules, "torchdata.dataloader2", None)
        monkeypatch.setattr(torchdata, "__version__", "0.11.0")
    with pytest.raises(TorchdataVersionError) as info:
        dataloader2()
    message = str(info.value)
    assert f"and this is torchdata {torchdata.__version__}: use " in message
    assert "StatefulDataLoader" in message and "wds.as_node(pipe)" in message
    assert isinstance(info.value, WdsError) and isinstance(info.value, ImportError)


@pytest.mark.skipif(
    "in_order" not in inspect.signature(StatefulDataLoader.__init__).parameters,
    reason="in_order is torchdata 0.11's",
)
def test_an_out_of_order_stateful_dataloader_refuses_to_save_or_load(tmp_path: Path) -> None:
    """torchdata 0.11's ``in_order=False`` with workers: its state cannot say which items were
    delivered, so a wdspipes pipeline's is refused rather than resumed with samples lost."""
    from wdspipes.errors import ResumeError

    pipe = samples(write_shards(tmp_path))
    loader = StatefulDataLoader(pipe, batch_size=None, num_workers=2, in_order=False)
    with pytest.raises(ResumeError, match=r"in_order=False\) delivers"):
        loader.state_dict()  # refused before any worker starts
    saved = StatefulDataLoader(pipe, batch_size=None).state_dict()
    with pytest.raises(ResumeError, match=r"use in_order=True \(the default\)"):
        loader.load_state_dict(saved)
    in_process = StatefulDataLoader(pipe, batch_size=None, in_order=False)  # no workers: in order
    assert in_process.state_dict()["dataset_state"] == pipe.state_dict()
