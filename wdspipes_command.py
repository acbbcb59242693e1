"""The ``wdspipes`` command's launcher: the console script runs :func:`main`, which runs
:func:`wdspipes.cli.main`.

It stands outside the package so that it is imported before the package: ``import wdspipes``
loads the whole api at once (torch, and every stage's functional name registered on
``IterDataPipe``), unless this module was imported first, which says that the process is the
command. The command creates, lists, copies and reshards shards without torch (2 to 4 s to
import), so it starts at once; a command that needs torch (``show`` decoding, ``demo``)
imports what it needs. ``python -m wdspipes_command ARGS`` runs it too.

>>> main(["--version"])  # doctest: +ELLIPSIS
wdspipes, version ...
0
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``wdspipes`` command with ``argv`` (default: ``sys.argv[1:]``); return its exit
    status (see :func:`wdspipes.cli.main`)."""
    from wdspipes.cli import main as run

    return run(argv)


if __name__ == "__main__":
    # Run as a script (``python -m wdspipes_command``), the module is ``__main__``: it is
    # the launcher under its own name too, so that the package sees the command.
    sys.modules.setdefault("wdspipes_command", sys.modules[__name__])
    sys.exit(main())
