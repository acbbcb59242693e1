"""``wdspipes reshard``: rewrite shards into new ones, in order or uniformly shuffled.

The work is :func:`wdspipes.tools.reshard.reshard` (on Ray with ``--ray``); this module parses
the arguments, shows the progress bars and prints the summary, or the error of a failed run,
which wrote nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from wdspipes.cli.common import (
    COMPRESSIONS,
    NO_COMMANDS,
    SIZE,
    UNSAFE_NAMES,
    describe_error,
    expand_shards,
    format_size,
    one_line,
    summarize,
)
from wdspipes.errors import WdsError

if TYPE_CHECKING:
    from wdspipes.tools.reshard import ReshardReport

__all__ = ["describe", "job_arguments", "job_options", "reshard", "run_job"]


def job_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of a job that writes a series of shards (``reshard``, ``create`` with a
    pattern): --maxcount, --maxsize, --shuffle, --seed, --memory, --tmpdir, --ray, --cpus."""
    for option in reversed(_JOB_OPTIONS):
        command = option(command)
    return command


def job_arguments(
    shuffle: bool, seed: int | None, ray: str | None, cpus: int | None
) -> dict[str, Any]:
    """The engine arguments of :func:`~wdspipes.tools.reshard.reshard` for the options, the
    combinations that do not apply refused."""
    if seed is not None and not shuffle:
        raise click.UsageError("--seed applies only with --shuffle")
    if ray is not None and not shuffle:
        raise click.UsageError("--ray applies only with --shuffle")
    if cpus is not None and ray != "local":
        raise click.UsageError("--cpus applies only with --ray local")
    return {
        "engine": "local" if ray is None else "ray",
        "address": None if ray in (None, "local") else ray,
        "cpus": cpus,
    }


def run_job(job: Callable[[], ReshardReport], prefix: str = "") -> None:
    """Run a job; print its summary, or its error in one line saying nothing was written."""
    try:
        report = job()
    except (WdsError, ValueError, OSError, ModuleNotFoundError) as exn:
        raise click.ClickException(f"{one_line(describe_error(exn))}; nothing was written") from exn
    summarize(prefix + describe(report))


_JOB_OPTIONS = [
    click.option(
        "--maxcount",
        type=click.IntRange(min=1),
        default=100_000,
        show_default=True,
        help="The most samples per output shard.",
    ),
    click.option(
        "--maxsize",
        type=SIZE,
        default="3GB",
        show_default=True,
        help="The most bytes per output shard (K, M, G: powers of 1024; KB, MB, GB: of 1000).",
    ),
    click.option("--shuffle", is_flag=True, help="Write the samples in a uniformly random order."),
    click.option("--seed", type=int, help="Make the shuffle reproducible."),
    click.option(
        "--memory",
        type=SIZE,
        default="1GB",
        show_default=True,
        help="Memory budget for the samples held at once while shuffling.",
    ),
    click.option(
        "--tmpdir",
        type=click.Path(file_okay=False),
        help="Directory for the shuffle's bucket files (default: the output directory); they "
        "take about as much space as the samples.",
    ),
    click.option(
        "--ray",
        "ray",
        is_flag=False,
        flag_value="local",
        metavar="[ADDRESS]",
        help="Run the shuffle's passes as Ray tasks (the ray extra), writing the same shards: on "
        "a Ray started for the run (--ray local, or --ray before another option), or on the "
        "cluster at ADDRESS (auto, HOST:PORT, ray://HOST:PORT). Inputs, output and --tmpdir "
        "must be on storage every node reaches.",
    ),
    click.option(
        "--cpus",
        type=click.IntRange(min=1),
        help="With --ray local: the CPUs of the Ray started for the run (default: all).",
    ),
]
"""The options of :func:`job_options`, in their order in the help."""


@click.command("reshard")
@click.argument("shards", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    "pattern",
    required=True,
    metavar="PATTERN",
    help="Names of the output shards, printf-style: out/train-%06d.tar.",
)
@job_options
@click.option(
    "--compress", type=click.Choice(COMPRESSIONS), help="Compress the output shards as a whole."
)
@click.option(
    "--ignore-zeros",
    is_flag=True,
    help="Read on past zero blocks, as GNU tar -i: reads archives joined with cat whole.",
)
@UNSAFE_NAMES
@NO_COMMANDS
def reshard(
    shards: tuple[str, ...],
    pattern: str,
    maxcount: int,
    maxsize: int,
    shuffle: bool,
    seed: int | None,
    memory: int,
    tmpdir: str | None,
    compress: str | None,
    ignore_zeros: bool,
    ray: str | None,
    cpus: int | None,
    unsafe_names: bool,
) -> None:
    """Rewrite the samples of SHARDS into new shards of at most --maxcount samples and
    --maxsize bytes, in order, or with --shuffle in a uniformly random order.

    Samples are copied byte for byte, never decoded. The shuffle takes two passes: each
    sample goes to one of several bucket files at random, then each bucket in turn is
    loaded, shuffled and written, so memory stays near --memory however large the data.
    All or nothing: the shards are written in a hidden directory beside the output and get
    their names only once all are complete. A run that fails writes nothing (files already
    under the output names stay as they were) and removes its temporary files.

    \b
    Examples:
      wdspipes reshard 'raw-{000..099}.tar' -o 'train-%05d.tar' --maxcount 10000
      wdspipes reshard raw-*.tar -o out/train-%06d.tar --maxsize 1G --shuffle --seed 1
      wdspipes reshard raw-*.tar -o /shared/train-%06d.tar --shuffle --seed 1 --ray auto
    """
    engine = job_arguments(shuffle, seed, ray, cpus)
    from wdspipes.tools.reshard import reshard as reshard_shards  # torch, with the reading

    run_job(
        lambda: reshard_shards(
            expand_shards(shards),
            pattern,
            maxcount=maxcount,
            maxsize=maxsize,
            shuffle=shuffle,
            seed=seed,
            memory=memory,
            tmpdir=tmpdir,
            compress=compress,
            progress=True,
            ignore_zeros=ignore_zeros,
            unsafe_names=unsafe_names,
            **engine,
        )
    )


def describe(report: ReshardReport) -> str:
    """The closing summary of a run.

    >>> from wdspipes.tools.reshard import ReshardReport
    >>> describe(ReshardReport(samples=2000, bytes=3_000_000, shards=["a.tar", "b.tar"],
    ...     output_bytes=3_500_000, input_bytes=3_400_000, seconds=2.0, passes=2, buckets=3,
    ...     largest_bucket=1_500_000, seed=7))  # doctest: +NORMALIZE_WHITESPACE
    'wrote 2,000 samples (2.9 MiB of fields) into 2 shards (3.3 MiB) in 2.0 s, 1.5 MB/s;
     shuffled in 2 passes through 3 buckets (the largest 1.4 MiB), seed 7'
    """
    text = (
        f"wrote {report.samples:,} samples ({format_size(report.bytes)} of fields) into "
        f"{len(report.shards):,} shard{'s' if len(report.shards) != 1 else ''} "
        f"({format_size(report.output_bytes)}) in {report.seconds:.1f} s, "
        f"{report.mb_per_second:.1f} MB/s"
    )
    if report.buckets:
        text += (
            f"; shuffled in {report.passes} passes through {report.buckets:,} "
            f"bucket{'s' if report.buckets != 1 else ''} (the largest "
            f"{format_size(report.largest_bucket)}), seed {report.seed}"
        )
    if report.manifest:
        text += f"; their index: {report.manifest}"
    return text
