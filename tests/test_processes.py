"""This process's memory allocator (wdspipes/core/processes.py): memory that a batch's images
free together is kept for the next batch, not given back and faulted in again."""

from __future__ import annotations

import resource

import numpy as np
import pytest

from wdspipes.core import processes

IMAGE = 256 * 256 * 3  # bytes of a decoded 256 x 256 RGB image
BATCH = 64


def faults_of_batches(batches: int) -> int:
    """Minor page faults of decoding ``batches`` batches' worth of images into fresh arrays
    (written, as a decoder does) and freeing each batch's together once stacked."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(batches):
        images = [np.ones(IMAGE, np.uint8) for _ in range(BATCH)]
        del images
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(processes._glibc() is None, reason="glibc's allocator only")
def test_a_batch_of_images_freed_together_is_kept_for_the_next() -> None:
    assert processes.keep_heap_for(IMAGE * BATCH)
    faults_of_batches(1)  # the heap grows to a batch once
    pages = 4 * IMAGE * BATCH // 4096
    assert faults_of_batches(4) < pages // 10  # given back, each batch faulted all its pages


def test_keep_heap_for_never_lowers_and_is_harmless_twice() -> None:
    first = processes.keep_heap_for(1 << 22)
    assert processes.keep_heap_for(1 << 20) == first
    assert processes.keep_heap_for(1 << 22) == first
