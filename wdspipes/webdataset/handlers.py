"""webdataset's ``webdataset.handlers`` (``wdspipes.handlers``): the error handlers, wdspipes'
own (see :mod:`wdspipes.errors`).

They return what webdataset's return (True to skip and go on, False to stop; ``reraise``
raises); the ``warn_`` ones warn with a :class:`~wdspipes.errors.DataWarning` and do not sleep
0.5 s as webdataset's do.

>>> warn_and_continue is __import__("wdspipes.errors").errors.warn_and_continue
True
"""

from wdspipes.errors import (
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)

__all__ = [
    "ignore_and_continue",
    "ignore_and_stop",
    "reraise_exception",
    "warn_and_continue",
    "warn_and_stop",
]
