"""The DataPipe front ends: each registered functional ``IterDataPipe`` of wdspipes is its
core class (torch-free, in ``read/``, ``samples/``, ...) with torch's ``IterDataPipe`` added
(:class:`~wdspipes.pipes.datapipe.StageDataPipe`, which pickles as
:mod:`~wdspipes.pipes.pickling` says) and its functional name registered on ``IterDataPipe``.
A front end adds nothing per item: it inherits its core class's ``__iter__``. Importing a
module of this folder loads torch, and registers every functional name of wdspipes, so that a
pipeline begun with any of wdspipes' DataPipes chains every stage.
"""

from wdspipes.pipes import read, samples  # noqa: F401  (registration)
from wdspipes.pipes.torch_names import install

install()  # the names torch and torchdata own, called webdataset's way on wdspipes' DataPipes
