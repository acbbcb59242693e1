"""The documentation site's sources. A package only so that pytest imports its conftest.py
as ``docs.conftest``, apart from ``tests/conftest.py``."""
