"""``wdspipes index``: write the index of existing shards (wids' ``widsindex create``), and the
offsets of each local shard's samples beside it, for reading them by index
(``wds.ShardListDataset``). The work is :func:`wdspipes.tools.index.index_shards`.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from wdspipes.cli.common import counted, expand_shards, format_size, progress, summarize

__all__ = ["index"]


@click.command()
@click.argument("shards", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    required=True,
    help="Where the index goes (index.json; - for standard output). Local shards are named "
    "relative to its directory.",
)
@click.option("-n", "--name", help="The dataset's name in the index (default: the file's name).")
@click.option("-b", "--base", help="A base URL for the index's relative URLs, written as is.")
@click.option(
    "-i",
    "--info",
    "info_file",
    type=click.Path(exists=True, dir_okay=False),
    help="A file whose text describes the dataset, written under 'info'.",
)
@click.option("--md5/--no-md5", default=True, show_default=True, help="Write each shard's MD5 sum.")
@click.option(
    "--sidecars/--no-sidecars",
    default=True,
    show_default=True,
    help="Write the offsets of each local shard's samples beside it (NAME.wdsidx).",
)
@click.option(
    "--ignore-zeros",
    is_flag=True,
    help="Read on past zero blocks, as GNU tar -i: archives joined with cat.",
)
def index(
    shards: Sequence[str],
    output: str,
    name: str | None,
    base: str | None,
    info_file: str | None,
    md5: bool,
    sidecars: bool,
    ignore_zeros: bool,
) -> None:
    """Write the index of SHARDS to OUTPUT: each shard's URL, samples, bytes and MD5 sum, as
    wids' widsindex create writes it, for reading the shards by index
    (wds.ShardListDataset, wids.ShardListDataset).

    Each shard is read once; its samples are counted as the readers group them, and their
    offsets are written beside each local shard (NAME.wdsidx), so that reading by index does
    not walk the shard again. A damaged shard is an error, and nothing is written.
    """
    from wdspipes.tools.index import index_shards

    urls = expand_shards(shards)
    info = None
    if info_file is not None:
        with open(info_file, encoding="utf-8") as file:
            info = file.read()
    with progress(urls, unit=" shards", desc="index") as bar:
        report = index_shards(
            bar,
            output,
            name=name,
            base=base,
            info=info,
            md5=md5,
            sidecars=sidecars,
            ignore_zeros=ignore_zeros,
        )
    if output != "-":
        sidecar_note = f"; offsets beside {counted(report.sidecars, 'shard')}" if sidecars else ""
        summarize(
            f"{output}: {counted(report.shards, 'shard')}, {counted(report.samples, 'sample')}, "
            f"{format_size(report.bytes)}{sidecar_note}"
        )
