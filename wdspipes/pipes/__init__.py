"""The DataPipe front ends: each registered functional ``IterDataPipe`` of wdspipes is its
core class (torch-free, in ``read/``, ``samples/``, ...) with torch's ``IterDataPipe`` added
(:class:`~wdspipes.core.datapipe.StageDataPipe`) and its functional name registered on
``IterDataPipe``. A front end adds nothing per item: it inherits its core class's
``__iter__``. Importing a module of this folder loads torch, and registers every functional
name of wdspipes (those of the stages that are still DataPipes themselves too), so that a
pipeline begun with any of wdspipes' DataPipes chains every stage.
"""

from wdspipes.pipes import read, samples  # noqa: F401  (registration)
from wdspipes.pipes.torch_names import install
from wdspipes.read import directory  # noqa: F401  (the DataPipes without a core class yet)
from wdspipes.samples import batch, mix  # noqa: F401

install()  # the names torch and torchdata own, called webdataset's way on wdspipes' DataPipes
