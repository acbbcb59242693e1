"""``wdspipes cat``: the samples of several shards, in one shard; optionally shuffled and sliced.

Samples are copied as they are read (raw bytes, ``__key__`` kept), through an optional
shuffle buffer, then an optional slice of the sample sequence with Python's semantics:

>>> list(slice_items(range(10), *parse_slice("-3:")))
[7, 8, 9]
>>> list(slice_items(range(10), *parse_slice("2:-5")))
[2, 3, 4]
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from typing import TYPE_CHECKING, TypeVar

import click

from wdspipes.cli.common import (
    COMPRESSIONS,
    NO_COMMANDS,
    UNSAFE_NAMES,
    Stopwatch,
    counted,
    expand_shards,
    format_size,
    output_compression,
    read_samples,
    shard_writer,
    summarize,
)

if TYPE_CHECKING:
    from wdspipes.core.stage import Sample

__all__ = ["cat", "parse_slice", "slice_items"]

T = TypeVar("T")
Bounds = tuple[int | None, int | None]


def parse_slice(text: str) -> Bounds:
    """``START:STOP`` as two optional ints, either of which may be empty or negative.

    >>> parse_slice("10:20"), parse_slice(":5"), parse_slice("-3:")
    ((10, 20), (None, 5), (-3, None))

    Raises:
        ValueError: the text is not of that form.
    """
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"a slice is START:STOP (either may be empty), got {text!r}")
    try:
        start, stop = (int(part) if part.strip() else None for part in parts)
    except ValueError:
        raise ValueError(f"a slice is START:STOP of integers, got {text!r}") from None
    return start, stop


def slice_items(items: Iterable[T], start: int | None, stop: int | None) -> Iterator[T]:
    """``list(items)[start:stop]``, streamed: negative bounds keep only ``-start`` or
    ``-stop`` items in memory, and non-negative ones stop reading at ``stop``.

    >>> [list(slice_items(range(5), a, b)) == list(range(5))[a:b]
    ...  for a, b in [(1, 3), (None, -1), (-2, None), (-4, 3), (-1, -3), (7, None)]]
    [True, True, True, True, True, True]
    """
    if (start is None or start >= 0) and (stop is None or stop >= 0):
        return itertools.islice(items, start, stop)
    if start is not None and start < 0:
        return _from_end(items, start, stop)
    return _delayed(items, start or 0, -stop if stop is not None else 0)


def _from_end(items: Iterable[T], start: int, stop: int | None) -> Iterator[T]:
    """A slice that starts ``-start`` items before the end: keep that many, decide at the end."""
    tail: deque[tuple[int, T]] = deque(enumerate(items), maxlen=-start)
    count = tail[-1][0] + 1 if tail else 0
    first, end, _ = slice(start, stop).indices(count)
    for index, item in tail:
        if first <= index < end:
            yield item


def _delayed(items: Iterable[T], start: int, margin: int) -> Iterator[T]:
    """Items from ``start`` on, except the last ``margin``: each comes out once ``margin``
    items have followed it."""
    pending: deque[T] = deque()
    for item in itertools.islice(items, start, None):
        pending.append(item)
        if len(pending) > margin:
            yield pending.popleft()


def _slice_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Bounds | None:
    if value is None:
        return None
    try:
        return parse_slice(value)
    except ValueError as exn:
        raise click.BadParameter(str(exn), ctx, param) from None


@click.command()
@click.argument("shards", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    required=True,
    help="The shard to write: a path, - for standard output, pipe:COMMAND or a store's URL "
    "(s3://...).",
)
@click.option(
    "--shuffle",
    "bufsize",
    type=click.IntRange(min=1),
    metavar="N",
    help="Shuffle the samples through a buffer of N samples.",
)
@click.option("--seed", type=int, help="Seed of --shuffle, for the same order every run.")
@click.option(
    "--slice",
    "bounds",
    metavar="START:STOP",
    callback=_slice_option,
    help="Keep only these samples (after shuffling), as a Python slice: 0:1000, -100:, :-1.",
)
@click.option(
    "--compress",
    type=click.Choice(COMPRESSIONS),
    help="Compress the whole shard (default: by the output's suffix, e.g. .tar.gz, else none).",
)
@click.option(
    "--ignore-zeros",
    is_flag=True,
    help="Read on past zero blocks, as GNU tar -i: reads archives joined with cat whole.",
)
@UNSAFE_NAMES
@NO_COMMANDS
def cat(
    shards: Sequence[str],
    output: str,
    bufsize: int | None,
    seed: int | None,
    bounds: Bounds | None,
    compress: str | None,
    ignore_zeros: bool,
    unsafe_names: bool,
) -> None:
    """Concatenate the samples of SHARDS into one shard.

    Samples are copied without decoding, keys kept, in input order or through a shuffle
    buffer, then sliced. The output appears only once it is complete (unless it is stdout).
    """
    if seed is not None and bufsize is None:
        raise click.UsageError("--seed is the seed of --shuffle: give --shuffle N too")
    clock = Stopwatch()
    urls = expand_shards(shards)
    compression = output_compression(output, compress)
    reader = read_samples(urls, desc=output, ignore_zeros=ignore_zeros)
    samples: Iterable[Sample] = reader
    if bufsize is not None:
        from wdspipes.samples.shuffle import BufferShuffler  # the core stage: no torch

        samples = BufferShuffler(reader, bufsize=bufsize, initial=bufsize, seed=seed)
    if bounds is not None:
        samples = slice_items(samples, *bounds)
    count = members = data_bytes = 0
    with closing(reader), shard_writer(output, compression, unsafe_names) as writer:
        for sample in samples:
            fields = {k: v for k, v in sample.items() if not k.startswith("__")}
            writer.write({"__key__": sample["__key__"], **fields})
            count += 1
            members += len(fields)
            data_bytes += sum(map(len, fields.values()))
    size = writer.size
    destination = "standard output" if output == "-" else output
    order = f", shuffled through a buffer of {bufsize:,}" if bufsize is not None else ""
    summarize(
        f"cat: wrote {counted(count, 'sample')} ({counted(members, 'member')}, "
        f"{format_size(data_bytes)} of data{order}) from {counted(len(urls), 'shard')} to "
        f"{destination} ({format_size(size)}) "
        f"in {clock.elapsed():.1f} s.",
        err=output == "-",
    )
