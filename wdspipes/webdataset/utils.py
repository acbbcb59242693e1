"""webdataset's ``webdataset.utils`` (``wdspipes.utils``): ``PipelineStage``, the base of
stages of your own (:mod:`wdspipes.pipeline`'s), and the rank and worker a program's own
stages seed from: ``pytorch_worker_info`` asks torch only where a program loaded it (no
worker and no process group exist otherwise).

>>> pytorch_worker_info(), pytorch_worker_seed()
((0, 1, 0, 1), 0)
"""

from __future__ import annotations

import os
import sys
from typing import Any

from wdspipes.pipeline import PipelineStage
from wdspipes.webdataset.missing import no_counterpart

__all__ = ["PipelineStage", "identity", "pytorch_worker_info", "pytorch_worker_seed"]


def pytorch_worker_info(group: Any = None) -> tuple[int, int, int, int]:
    """``(rank, world_size, worker, num_workers)``, as webdataset's: from the ``RANK`` and
    ``WORLD_SIZE`` environment variables (read now), else torch's process group (``group``,
    or the whole world); from ``WORKER`` and ``NUM_WORKERS``, else torch's DataLoader worker
    info. DataLoader2's workers are not torch DataLoader workers: each says 0 of 1 (wdspipes'
    stages tell its readers apart through the sharding filter instead).
    """
    rank, world_size, worker, num_workers = 0, 1, 0, 1
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    elif "torch.distributed" in sys.modules:
        dist = sys.modules["torch.distributed"]
        if dist.is_available() and dist.is_initialized():
            group = group or dist.group.WORLD
            rank, world_size = dist.get_rank(group=group), dist.get_world_size(group=group)
    if "WORKER" in os.environ and "NUM_WORKERS" in os.environ:
        worker, num_workers = int(os.environ["WORKER"]), int(os.environ["NUM_WORKERS"])
    elif "torch.utils.data" in sys.modules:
        info = sys.modules["torch.utils.data"].get_worker_info()
        if info is not None:
            worker, num_workers = info.id, info.num_workers
    return rank, world_size, worker, num_workers


def pytorch_worker_seed(group: Any = None) -> int:
    """``rank * 1000 + worker``, as webdataset's: a seed that differs per worker and rank and
    stays the same from run to run (see :func:`pytorch_worker_info`)."""
    rank, _, worker, _ = pytorch_worker_info(group=group)
    return rank * 1000 + worker


def identity(x: Any) -> Any:
    """``x`` itself."""
    return x


MISSING = {
    "make_seed": "it hashes strings, which Python salts per process; seed with an int "
    "(the seed= of wdspipes' random stages)",
    "repeatedly": "repeat_epochs(nepochs) in the pipeline (None: without end)",
    "repeatedly0": "repeat_epochs(nepochs) in the pipeline (None: without end)",
    "is_iterable": "isinstance(obj, collections.abc.Iterable)",
    "lookup_sym": "importlib.import_module",
    "safe_eval": "nothing: shard specs are not evaluated",
    "glob_with_braces": "wdspipes.expand_urls, then glob.glob on each",
    "fnmatch_with_braces": "wdspipes.expand_urls, then fnmatch on each",
    "guess_batchsize": "len() of a batch's first column",
    "compute_sample_weights": "RandomMix(datasets, probs=...)",
    "deprecated": "nothing",
    "obsolete": "nothing",
    "enforce_security": "nothing: data never runs a command, and pickles decode only with "
    "decode(..., trusted=True)",
    "ObsoleteException": "nothing",
}
"""webdataset's names that wdspipes does not provide here, and what to use instead."""


def __getattr__(name: str) -> Any:
    raise no_counterpart("wdspipes.utils", name, MISSING)
