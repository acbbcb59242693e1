"""What the demo does: its options, without loading torch (the ``wdspipes`` command shows their
defaults in its help)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DemoOptions"]


@dataclass(frozen=True)
class DemoOptions:
    """What the demo does; the defaults take one to three minutes on two CPU cores.

    Raises:
        ValueError: a count below 1, or ``workers`` or ``seed`` below 0, naming the option.
    """

    output: Path = Path("wdspipes-demo")
    train_samples: int = 10_000
    val_samples: int = 2_000
    per_shard: int = 500
    epochs: int = 5
    batch_size: int = 64
    workers: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("train_samples", "val_samples", "per_shard", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("workers", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
