"""``wdspipes demo``: the main job end to end, from drawing a dataset to a trained model.

The work is done by :mod:`wdspipes.demo`; this is its command line, also run by
``python -m wdspipes.demo``.
"""

from __future__ import annotations

from pathlib import Path

import click

from wdspipes.demo.options import DemoOptions

__all__ = ["demo"]

DEFAULTS = DemoOptions()
AT_LEAST_ONE = click.IntRange(min=1)


@click.command()
@click.option(
    "-o",
    "--output",
    default=str(DEFAULTS.output),
    show_default=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="The directory to write the shards and pictures to (created if missing).",
)
@click.option(
    "--train-samples",
    default=DEFAULTS.train_samples,
    show_default=True,
    type=AT_LEAST_ONE,
    help="Pictures to train on.",
)
@click.option(
    "--val-samples",
    default=DEFAULTS.val_samples,
    show_default=True,
    type=AT_LEAST_ONE,
    help="Pictures to validate on.",
)
@click.option(
    "--per-shard",
    default=DEFAULTS.per_shard,
    show_default=True,
    type=AT_LEAST_ONE,
    help="Samples per shard.",
)
@click.option(
    "--epochs", default=DEFAULTS.epochs, show_default=True, type=AT_LEAST_ONE, help="Epochs."
)
@click.option(
    "--batch-size",
    default=DEFAULTS.batch_size,
    show_default=True,
    type=AT_LEAST_ONE,
    help="Samples per batch.",
)
@click.option(
    "--workers",
    default=DEFAULTS.workers,
    show_default=True,
    type=click.IntRange(min=0),
    help="DataLoader2 worker processes that read the shards (0: read in the training process).",
)
@click.option(
    "--seed",
    default=DEFAULTS.seed,
    show_default=True,
    type=click.IntRange(min=0),
    help="Draws the dataset, the model's first weights and the reading order.",
)
def demo(
    output: Path,
    train_samples: int,
    val_samples: int,
    per_shard: int,
    epochs: int,
    batch_size: int,
    workers: int,
    seed: int,
) -> None:
    """Draw a dataset of shapes, write it as shards, train a small CNN on them through
    DataLoader2, and draw its predictions and loss curve: wdspipes at work, end to end.

    Writes DIR/shards/train-NNNN.tar and val-NNNN.tar (fields png and cls; shards of an
    earlier run are replaced), DIR/predictions.png and DIR/loss.png. The defaults take one to
    three minutes on two CPU cores.
    """
    from wdspipes.demo.run import run_demo  # with torch: only when the demo runs

    run_demo(
        DemoOptions(
            output=output,
            train_samples=train_samples,
            val_samples=val_samples,
            per_shard=per_shard,
            epochs=epochs,
            batch_size=batch_size,
            workers=workers,
            seed=seed,
        )
    )
