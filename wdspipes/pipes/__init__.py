"""The DataPipe front end: every stage class of wdspipes (torch-free, in ``read/``,
``samples/``, ...) with torch's ``IterDataPipe`` added, made from the class on first use
(``StageClass.DataPipe``; see :mod:`wdspipes.pipes.datapipe`), and every functional name of the
table registered on ``IterDataPipe``. A front end adds nothing per item: it inherits its stage
class's ``__iter__``. torch's own stages take part in a pipeline through the adapters of
:mod:`wdspipes.pipes.torch_stages`. Importing this package loads torch.
"""

from wdspipes.pipes import datapipe, read, samples, torch_stages  # noqa: F401  (registration)
from wdspipes.pipes.torch_names import install

install()  # the names torch and torchdata own, called webdataset's way on wdspipes' DataPipes
