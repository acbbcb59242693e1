"""webdataset's ``webdataset.utils`` module path, where programs import its names from: a
facade over :mod:`wdspipes.webdataset.utils`, which holds them (see
docs/webdataset-modules.md). A name of webdataset's that wdspipes does not provide is an
``AttributeError`` saying what to use instead."""

from wdspipes.webdataset.utils import *  # noqa: F403
from wdspipes.webdataset.utils import __all__ as __all__
from wdspipes.webdataset.utils import __getattr__ as __getattr__
