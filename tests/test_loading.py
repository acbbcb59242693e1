"""``import wdspipes`` loads no torch and changes nothing of it (wdspipes/core/loading.py), and
programs find every name and, once torch is loaded and a name of wdspipes used (or torch was
loaded first), every functional stage. Each case runs in a new Python
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


def test_importing_the_package_loads_no_torch_and_a_name_loads_it() -> None:
    out = run(
        "import sys, wdspipes\n"
        "print('torch' in sys.modules, wdspipes.__version__ != '')\n"
        "print(wdspipes.WebDataset.__module__, 'torch' in sys.modules)\n"
    )
    assert out.splitlines() == ["False True", "wdspipes.pipeline True"]


def test_torch_first_registers_every_stage_on_import() -> None:
    out = run(
        "import torch; import wdspipes\n"
        "from torch.utils.data import IterDataPipe as D\n"
        "from torch.utils.data.datapipes.iter import IterableWrapper\n"
        "print(sorted({'load_tar', 'group_samples', 'buffer_shuffle'} - set(D.functions)))\n"
        "print(type(IterableWrapper(['a.tar']).open_shards().load_tar()).__name__)\n"
    )
    assert out.splitlines() == ["[]", "TarLoader"]


@pytest.mark.parametrize(
    "first",
    [
        "import wdspipes; import torch",
        pytest.param(  # torch loaded through another package (torchdata 0.8 and 0.9's DataPipes)
            "import wdspipes; import torchdata.datapipes", marks=pytest.mark.dataloader2
        ),
        "import wdspipes.read.tar",  # a stage module first: torch loads half-way through it
    ],
)
def test_wdspipes_first_changes_nothing_of_torch_and_a_name_registers_the_stages(
    first: str,
) -> None:
    """No import hook: torch's import system, ``IterDataPipe.__getattr__`` and its registry
    stay torch's; the stages' functional names come with the first name of wdspipes."""
    out = run(
        "import sys\n"
        "hooks = list(sys.meta_path)\n"
        f"{first}\n"
        "import torch\n"
        "from torch.utils.data import IterDataPipe as D\n"
        "from torch.utils.data.datapipes.datapipe import IterDataPipe as Torchs\n"
        "from torch.utils.data.datapipes.iter import IterableWrapper\n"
        "print(sys.meta_path == hooks, D.__getattr__ is Torchs.__getattr__)\n"
        "try:\n"
        "    IterableWrapper(['a.tar']).group_samples()\n"
        "except AttributeError as exn:\n"
        "    print('AttributeError', 'group_samples' in str(exn))\n"
        "import wdspipes as wds\n"
        "wds.ShardList  # the first name of wdspipes: the api loads\n"
        "print(type(IterableWrapper(['a.tar']).open_shards().load_tar().group_samples()).__name__)\n"
        "print(type(D.functions) is dict)\n"
    )
    assert out.splitlines() == ["True True", "AttributeError True", "SampleGrouper", "True"]


def test_names_star_import_and_missing_names() -> None:
    out = run(
        "import wdspipes\n"
        "from wdspipes import *\n"
        "print(TarLoader.__name__, 'WebDataset' in dir(wdspipes), len(wdspipes.__all__) > 50)\n"
        "try:\n"
        "    wdspipes.NoSuchName\n"
        "except AttributeError as exn:\n"
        "    print(exn)\n"
    )
    assert out.splitlines() == [
        "TarLoader True True",
        "module 'wdspipes' has no attribute 'NoSuchName'",
    ]


def test_webdatasets_module_paths_load_torch_only_for_names_that_need_it() -> None:
    """A program's own reader, from ``wdspipes.tariterators`` and the helpers of ``filters``,
    ``utils``, ``shardlists``, ``handlers`` and ``gopen``, runs without torch; a stage loads it."""
    out = run(
        "import io, sys, tarfile\n"
        "from wdspipes.tariterators import group_by_keys, tar_file_expander, url_opener\n"
        "from wdspipes.filters import _shuffle, getfirst, pipelinefilter\n"
        "from wdspipes.utils import pytorch_worker_seed\n"
        "from wdspipes.shardlists import expand_urls\n"
        "from wdspipes.handlers import warn_and_continue\n"
        "from wdspipes import gopen\n"
        "import wdspipes as wds\n"
        "buf = io.BytesIO()\n"
        "with tarfile.open(fileobj=buf, mode='w') as tf:\n"
        "    info = tarfile.TarInfo('a.txt'); info.size = 1\n"
        "    tf.addfile(info, io.BytesIO(b'1'))\n"
        "shards = [{'url': 'm.tar', 'stream': io.BytesIO(buf.getvalue())}]\n"
        "samples = group_by_keys(tar_file_expander(shards, handler=warn_and_continue))\n"
        "shuffled = _shuffle(samples, 10, seed=pytorch_worker_seed())\n"
        "print([getfirst(s, 'jpg;txt') for s in shuffled])\n"
        "print(expand_urls('a-{0..1}.tar'), callable(wds.gopen), gopen is wds.gopen)\n"
        "print('torch' in sys.modules)\n"
        "from wdspipes.shardlists import SimpleShardList\n"
        "print('torch' in sys.modules)\n"
    )
    assert out.splitlines() == [
        "[b'1']",
        "['a-0.tar', 'a-1.tar'] True True",
        "False",
        "True",
    ]


def test_the_core_stages_read_and_shuffle_shards_without_torch(tmp_path: Path) -> None:
    """What ``wdspipes cat`` and ``reshard`` read through: the core classes of the read path
    and the shuffle buffer, with their state, load no torch."""
    shard = tmp_path / "s.tar"
    with tarfile.open(shard, "w") as archive:
        for index in range(6):
            info = tarfile.TarInfo(f"{index:02d}.txt")
            info.size = 1
            archive.addfile(info, io.BytesIO(b"%d" % index))
    out = run(
        "import sys\n"
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
