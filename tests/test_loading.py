"""``import wdspipes`` loads every name and registers every functional name at once, whatever
was imported before it or is imported after, and changes nothing of torch (no import hook, no
patched ``IterDataPipe``); the ``wdspipes`` command, launched through ``wdspipes_command`` as
its console script is, loads no torch (wdspipes/__init__.py). Each case runs in a new Python
process, since the order of first imports is what it is about."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # new Python processes


def run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# Run after the imports of each case: whether torch's import system and IterDataPipe are
# torch's own, whether every functional name of wdspipes' table is registered, and a chain of
# them on torch's own DataPipe.
CHAINS = """
import sys
import torch
from torch.utils.data import IterDataPipe as D
from torch.utils.data.datapipes.datapipe import IterDataPipe as Torchs
from torch.utils.data.datapipes.iter import IterableWrapper
from wdspipes.core.protocol import functional_names
print(sys.meta_path == hooks, D.__getattr__ is Torchs.__getattr__, type(D.functions) is dict)
print(sorted(set(functional_names()) - set(D.functions)), len(functional_names()) > 20)
sample = {"__key__": "a", "cls": b"3", "txt": b"hi"}
print(list(IterableWrapper([sample]).decode().to_tuple("cls", "txt")))
print(type(IterableWrapper(["a.tar"]).open_shards().load_tar().group_samples()).__name__)
"""

ORDERS = [
    "import wdspipes",
    "import wdspipes; import torch",
    "import torch; import wdspipes",
    "import wdspipes.read.tar",  # a submodule first: the package's __init__ runs before it
    "from wdspipes.tariterators import url_opener",  # one of webdataset's module paths
    pytest.param(  # torch loaded through another package (torchdata 0.8 and 0.9's DataPipes)
        "import torchdata.datapipes; import wdspipes", marks=pytest.mark.dataloader2
    ),
    pytest.param("import wdspipes; import torchdata.datapipes", marks=pytest.mark.dataloader2),
]


@pytest.mark.parametrize("first", ORDERS)
def test_the_functional_names_work_right_after_import_whatever_the_order(first: str) -> None:
    out = run(f"import sys\nhooks = list(sys.meta_path)\n{first}\n{CHAINS}")
    assert out.splitlines() == ["True True True", "[] True", "[(3, 'hi')]", "SampleGrouper"]


def test_importing_the_package_loads_every_name() -> None:
    out = run(
        "import sys, wdspipes\n"
        "print('torch' in sys.modules, wdspipes.WebDataset.__module__)\n"
        "paths = sys.modules['wdspipes.gopen']  # wdspipes.gopen is the function, as webdataset's\n"
        "print(wdspipes.filters.__name__, wdspipes.gopen is paths.gopen, callable(paths.gopen))\n"
    )
    assert out.splitlines() == ["True wdspipes.pipeline", "wdspipes.filters True True"]


def test_names_star_import_and_missing_names() -> None:
    out = run(
        "import wdspipes\n"
        "from wdspipes import *\n"
        "print(WebDataset.__name__, 'WebDataset' in dir(wdspipes), len(wdspipes.__all__) > 50)\n"
        "try:\n"
        "    wdspipes.NoSuchName\n"
        "except AttributeError as exn:\n"
        "    print(exn)\n"
    )
    assert out.splitlines() == [
        "WebDataset True True",
        "module 'wdspipes' has no attribute 'NoSuchName'",
    ]


def test_the_command_loads_no_torch_and_a_name_then_loads_the_api() -> None:
    """Launched as its console script launches it (``wdspipes_command`` imported first), the
    command's process imports the package without torch; a name of the package used there
    loads the api (and torch) on first use, as ``python -m wdspipes_command`` runs it too."""
    out = run(
        "import sys\n"
        "from wdspipes_command import main\n"
        "import wdspipes, wdspipes.read.tar\n"
        "print('torch' in sys.modules, wdspipes.COMMAND in sys.modules)\n"
        "print(wdspipes.ShardList.__name__, 'torch' in sys.modules)\n"
    )
    assert out.splitlines() == ["False True", "ShardList True"]
    done = subprocess.run(
        [sys.executable, "-m", "wdspipes_command", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith("wdspipes, version"), done.stderr


def test_the_core_stages_read_and_shuffle_shards_without_torch(tmp_path: Path) -> None:
    """What ``wdspipes cat`` and ``reshard`` read through, in the command's process: the core
    classes of the read path and the shuffle buffer, with their state, load no torch."""
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as archive:
        for index in range(6):
            info = tarfile.TarInfo(f"{index:02d}.txt")
            info.size = 1
            archive.addfile(info, io.BytesIO(b"%d" % index))
    out = run(
        "import sys\n"
        "import wdspipes_command  # as the command's console script: no torch\n"
        "from wdspipes.read.grouping import tar_samples\n"
        "from wdspipes.samples.shuffle import BufferShuffler\n"
        f"pipe = BufferShuffler(tar_samples([{str(shard)!r}]), bufsize=3, seed=1)\n"
        "items = iter(pipe)\n"
        "head = [next(items)['txt'] for _ in range(2)]\n"
        "again = BufferShuffler(tar_samples([" + repr(str(shard)) + "]), bufsize=3, seed=1)\n"
        "again.load_state_dict(pipe.state_dict())\n"
        "whole = head + [sample['txt'] for sample in again]\n"
        "print(sorted(whole) == [b'%d' % n for n in range(6)], 'torch' in sys.modules)\n"
    )
    assert out == "True False\n"
