"""``import wdspipes`` loads no torch (wdspipes/core/loading.py), and programs still find every
name and every functional stage, whatever they import first. Each case runs in a new Python
process, since the order of first imports is what it is about."""

from __future__ import annotations

import subprocess
import sys

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


@pytest.mark.parametrize(
    "first",
    [
        "import wdspipes; import torch",  # wdspipes first: registered when torch loads
        "import torch; import wdspipes",  # torch first: registered on import, as before
        pytest.param(  # torch loaded through another package (torchdata 0.8 and 0.9's DataPipes)
            "import wdspipes; import torchdata.datapipes", marks=pytest.mark.dataloader2
        ),
    ],
)
def test_every_stage_is_registered_once_both_are_imported(first: str) -> None:
    out = run(
        f"{first}\n"
        "from torch.utils.data import IterDataPipe as D\n"
        "print(sorted({'load_tar', 'group_samples', 'buffer_shuffle'} - set(D.functions)))\n"
    )
    assert out == "[]\n"


def test_chaining_works_after_importing_a_stage_module_first() -> None:
    """torch loads while wdspipes.read.tar is half-imported: the stages cannot all load then,
    and the first functional name asked of a torch DataPipe loads them."""
    out = run(
        "import wdspipes.read.tar\n"
        "from torch.utils.data.datapipes.iter import IterableWrapper\n"
        "pipe = IterableWrapper(['a.tar']).open_shards().load_tar().group_samples()\n"
        "print(type(pipe).__name__)\n"
        "try:\n"
        "    IterableWrapper([1]).no_such_stage()\n"
        "except AttributeError as exn:\n"
        "    print('AttributeError', 'no_such_stage' in str(exn))\n"
    )
    assert out.splitlines() == ["SampleGrouper", "AttributeError True"]


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
