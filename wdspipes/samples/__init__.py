"""Stages on samples, after the reader: decoding (:mod:`~wdspipes.samples.decoders`), fields
(:mod:`~wdspipes.samples.fields`), the shuffle buffer (:mod:`~wdspipes.samples.shuffle`),
batches (:mod:`~wdspipes.samples.batch`, handed from worker processes through shared memory by
:mod:`~wdspipes.samples.handover`), and epoch lengths (:mod:`~wdspipes.samples.epochs`).
Importing it makes webdataset's calls of the names torch and torchdata own (``shuffle``,
``map``, ``slice``, ``repeat``), as methods of wdspipes' stages, follow
:mod:`~wdspipes.samples.torch_names`.
"""

from wdspipes.samples.torch_names import install

install()  # the names torch and torchdata own, called webdataset's way
