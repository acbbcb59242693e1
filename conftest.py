"""What pytest collects, whichever torchdata the environment has (``make test`` runs the suite
with torchdata 0.9 and its loader tests again with 0.11; see the Makefile).

The module of the ``torchdata.nodes`` front end subclasses ``torchdata.nodes.BaseNode``, and
so imports only where torchdata has nodes (0.10 and later): elsewhere its doctests are not
collected (``wds.as_node`` then refuses before it imports it; tests/test_nodes.py checks both).
"""

from __future__ import annotations

from importlib.util import find_spec


def _has_nodes() -> bool:
    try:
        return find_spec("torchdata.nodes") is not None
    except ImportError:  # no torchdata at all
        return False


collect_ignore = [] if _has_nodes() else ["wdspipes/nodes/pipeline_node.py"]
