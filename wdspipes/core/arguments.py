"""Checks of the arguments stages and tools take, one message for each kind of mistake. No torch.

>>> int_at_least("batchsize", 64)
64
>>> int_at_least("nepochs", None, least=0, none=True) is None
True
>>> int_at_least("bufsize", True)
Traceback (most recent call last):
...
ValueError: bufsize must be an int >= 1, got True
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["int_at_least"]

Value = TypeVar("Value", bound="int | None")


def int_at_least(name: str, value: Value, least: int = 1, *, none: bool = False) -> Value:
    """``value``, the argument ``name``, if it is an int of at least ``least`` (a bool is no
    int here), or None where ``none`` allows it.

    Raises:
        ValueError: it is not, naming the argument, what it must be and what it got.
    """
    if value is None and none:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        allowed = " or None" if none else ""
        raise ValueError(f"{name} must be an int >= {least}{allowed}, got {value!r}")
    return value
