"""The data loading of a training program written for webdataset 1.0.2, in the style of a widely
used open-source training codebase: a resampler of its own, a "nothrow" grouper built from
webdataset's ``tariterators`` functions, a ``PipelineStage`` that shuffles shards by a seed and
an epoch counter shared with the loader's workers, and ``WebLoader(..., shuffle=False)``.

tests/test_migration.py runs it as it is, and with ``webdataset`` changed to ``wdspipes`` in
its imports and nothing else (it is a test's data: nothing imports it as it stands).
"""

import logging
import random
from multiprocessing import Value

import webdataset as wds
from torch.utils.data import IterableDataset
from webdataset.filters import _shuffle
from webdataset.shardlists import expand_urls
from webdataset.tariterators import base_plus_ext, tar_file_expander, url_opener, valid_sample
from webdataset.utils import pytorch_worker_seed


def log_and_continue(exn):
    logging.warning(f"Handling webdataset error ({exn!r}). Ignoring.")
    return True


class SharedEpoch:
    """The epoch, set in the main process and read in the loader's workers."""

    def __init__(self, epoch=0):
        self.shared_epoch = Value("i", epoch)

    def set_value(self, epoch):
        self.shared_epoch.value = epoch

    def get_value(self):
        return self.shared_epoch.value


def group_by_keys_nothrow(data, keys=base_plus_ext, lcase=True, suffixes=None, handler=None):
    """Samples of consecutive files with one key; a repeated name starts a new sample instead
    of raising."""
    current_sample = None
    for filesample in data:
        if not filesample:  # the end of a shard
            if valid_sample(current_sample):
                yield current_sample
            current_sample = None
            continue
        fname, value = filesample["fname"], filesample["data"]
        prefix, suffix = keys(fname)
        if prefix is None:
            continue
        if lcase:
            suffix = suffix.lower()
        if (
            current_sample is None
            or prefix != current_sample["__key__"]
            or suffix in current_sample
        ):
            if valid_sample(current_sample):
                yield current_sample
            current_sample = dict(__key__=prefix, __url__=filesample["__url__"])
        if suffixes is None or suffix in suffixes:
            current_sample[suffix] = value
    if valid_sample(current_sample):
        yield current_sample


def tarfile_to_samples_nothrow(src, handler=log_and_continue):
    streams = url_opener(src, handler=handler)
    files = tar_file_expander(streams, handler=handler)
    samples = group_by_keys_nothrow(files, handler=handler)
    return samples


class DetShuffle(wds.PipelineStage):
    """The shard order of an epoch, the same in every worker: from the seed and the epoch."""

    def __init__(self, bufsize=1000, initial=100, seed=0, epoch=-1):
        self.bufsize = bufsize
        self.initial = initial
        self.seed = seed
        self.epoch = epoch

    def run(self, src):
        if isinstance(self.epoch, SharedEpoch):
            epoch = self.epoch.get_value()
        else:
            self.epoch += 1
            epoch = self.epoch
        rng = random.Random()
        rng.seed(self.seed + epoch)
        return _shuffle(src, self.bufsize, self.initial, rng)


class ResampledShards2(IterableDataset):
    """Shards drawn with replacement, apart in each worker, from the worker's seed and the
    epoch."""

    def __init__(self, urls, nshards, worker_seed=None, epoch=-1):
        super().__init__()
        self.urls = expand_urls(urls)
        self.nshards = nshards
        self.rng = random.Random()
        self.worker_seed = worker_seed
        self.epoch = epoch

    def __iter__(self):
        if isinstance(self.epoch, SharedEpoch):
            epoch = self.epoch.get_value()
        else:
            self.epoch += 1
            epoch = self.epoch
        self.rng.seed(self.worker_seed() + epoch)
        for _ in range(self.nshards):
            yield dict(url=self.rng.choice(self.urls))


def has_text(sample):
    return "txt" in sample


def get_wds_loader(urls, resampled, shared_epoch, batch_size=4, num_workers=2, nshards=3):
    if resampled:
        pipeline = [
            ResampledShards2(urls, nshards, worker_seed=pytorch_worker_seed, epoch=shared_epoch)
        ]
    else:
        pipeline = [
            wds.SimpleShardList(urls),
            DetShuffle(bufsize=100, initial=10, seed=7, epoch=shared_epoch),
            wds.split_by_node,
            wds.split_by_worker,
        ]
    pipeline += [
        tarfile_to_samples_nothrow,
        wds.shuffle(bufsize=50, initial=10),
        wds.select(has_text),
        wds.decode(),
        wds.rename(label="cls", text="txt"),
        wds.to_tuple("__key__", "label", "text"),
        wds.batched(batch_size, partial=True),
    ]
    dataset = wds.DataPipeline(*pipeline)
    return wds.WebLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=num_workers,
        multiprocessing_context="fork",
    )
