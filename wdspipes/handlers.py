"""webdataset's ``webdataset.handlers`` module path, where programs import its names from: a
facade over :mod:`wdspipes.webdataset.handlers`, which holds them (see
docs/webdataset-modules.md)."""

from wdspipes.webdataset.handlers import *  # noqa: F403
from wdspipes.webdataset.handlers import __all__ as __all__
