"""``wdspipes create``: one shard from a directory tree or from a recipe file; or, with an
output pattern, a series of shards from those or from a tar of class tars, in order or
shuffled, on Ray with ``--ray`` (the work of :func:`~wdspipes.tools.reshard.reshard_sources`).

A directory gives every regular file under it, named relative to it, in the order of
``tar --sort=name`` (the entries of each directory sorted by name, byte by byte, depth
first), so the files of a sample are consecutive. A recipe lists ``archive-name source-path``
lines and is written in its own order.

>>> import pathlib, tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     root = pathlib.Path(tmp)
...     for name in ("b/1.txt", "a.txt", "b.txt", "a-1.txt"):
...         (root / name).parent.mkdir(exist_ok=True)
...         _ = (root / name).write_text(name)
...     [name for name, _ in tree_members(str(root))]
['a-1.txt', 'a.txt', 'b/1.txt', 'b.txt']
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click

from wdspipes.cli.common import (
    COMPRESSIONS,
    NO_COMMANDS,
    UNSAFE_NAMES,
    Stopwatch,
    counted,
    describe_error,
    format_size,
    one_line,
    output_compression,
    progress,
    shard_writer,
    summarize,
    warn,
)
from wdspipes.cli.reshard import job_arguments, job_options, run_job
from wdspipes.core.names import is_meta, split_name
from wdspipes.errors import WdsError
from wdspipes.write.shards import check_pattern

if TYPE_CHECKING:
    from wdspipes.tools.buckets import ReshardInput
    from wdspipes.tools.sources import ClassTar

__all__ = ["create", "read_recipe", "tree_members"]

Members = list[tuple[str, str]]
"""``(archive name, source path)`` pairs, in archive order."""


@click.command()
@click.argument("output", metavar="OUT")
@click.argument("source", metavar="SOURCE")
@click.option(
    "--compress",
    type=click.Choice(COMPRESSIONS),
    help="Compress the whole shard (default: by OUT's suffix, e.g. .tar.gz, else none).",
)
@click.option(
    "--classes",
    is_flag=True,
    help="SOURCE is a tar of one tar per class (n01440764.tar holding its images): each "
    "image is a sample with its class's number (its name's place in sorted order) as cls. "
    "OUT must be a pattern.",
)
@job_options
@UNSAFE_NAMES
@NO_COMMANDS
def create(
    output: str,
    source: str,
    compress: str | None,
    classes: bool,
    unsafe_names: bool,
    **job: Any,
) -> None:
    """Write the shard OUT from SOURCE, a directory or a recipe file; or, if OUT is a
    pattern (train-%06d.tar), a series of shards of at most --maxcount samples and
    --maxsize bytes, in order or with --shuffle in a uniformly random order, on Ray with
    --ray (as wdspipes reshard does).

    A directory: every regular file under it, named relative to it, in the order of
    tar --sort=name; symbolic links and special files are skipped with a warning. A recipe:
    lines "archive-name source-path" (source paths relative to the recipe's directory; quote
    names with spaces; blank lines and # comments ignored), written in the recipe's order.
    With --classes, a tar of class tars. OUT appears only once it is complete (a series:
    all at once); - writes to standard output, and a single OUT may be any URL the writers
    take (pipe:COMMAND, s3://...).

    \b
    Examples:
      wdspipes create train-0000.tar images/
      wdspipes create 'train-%06d.tar' images/ --maxcount 10000 --shuffle --seed 1
      wdspipes create 'in1k-%04d.tar' ILSVRC2012_img_train.tar --classes --maxsize 1G \\
          --shuffle --seed 0 --ray
    """
    if _is_pattern(output):
        _create_series(output, source, compress, classes, {**job, "unsafe_names": unsafe_names})
        return
    given = [f"--{name}" for name in job if _given(name)] + (["--classes"] if classes else [])
    if given:
        raise click.UsageError(f"{given[0]} applies only when OUT is a pattern (train-%06d.tar)")
    clock = Stopwatch()
    if os.path.isdir(source):
        members = tree_members(source)
        if not members:
            raise click.ClickException(f"{source}: the directory holds no regular files")
    elif os.path.isfile(source):
        members = read_recipe(source)
        if not members:
            raise click.ClickException(f"{source}: the recipe lists no files")
    else:
        raise click.ClickException(f"{source}: no such file or directory")
    compression = output_compression(output, compress)
    data_bytes, size = _write(output, members, compression, unsafe_names)
    samples = count_samples(name for name, _ in members)
    kind = f"{compression}-compressed" if compression else "uncompressed"
    destination = "standard output" if output == "-" else output
    summarize(
        f"create: wrote {counted(len(members), 'member')} in {counted(samples, 'sample')} "
        f"({format_size(data_bytes)} of data) to {destination} ({format_size(size)}, {kind}) "
        f"in {clock.elapsed():.1f} s.",
        err=output == "-",
    )


def _create_series(
    pattern: str, source: str, compress: str | None, classes: bool, job: dict[str, Any]
) -> None:
    """Write the samples of SOURCE into the shards of ``pattern``, as reshard does."""
    from wdspipes.tools.reshard import reshard_sources  # torch: only a series loads it
    from wdspipes.tools.sources import file_sources

    engine = job_arguments(job["shuffle"], job["seed"], job.pop("ray"), job.pop("cpus"))
    if classes:
        if not os.path.isfile(source):
            raise click.ClickException(f"{source}: not a tar of class tars (no such file)")
        sources: list[ReshardInput] = [*_classes(source)]
    elif os.path.isdir(source):
        sources = [*file_sources(tree_members(source))]
    elif os.path.isfile(source):
        sources = [*file_sources(read_recipe(source))]
    else:
        raise click.ClickException(f"{source}: no such file or directory")
    compression = output_compression(pattern % 0, compress)
    run_job(
        lambda: reshard_sources(
            sources, pattern, compress=compression, progress=True, **job, **engine
        ),
        prefix="create: ",
    )


def _classes(archive: str) -> list[ClassTar]:
    from wdspipes.tools.sources import class_sources

    try:
        return class_sources(archive)
    except (WdsError, ValueError, OSError) as exn:
        raise click.ClickException(one_line(describe_error(exn))) from exn


def _is_pattern(output: str) -> bool:
    try:
        check_pattern(output)
    except ValueError:
        return False
    return True


def _given(name: str) -> bool:
    """Whether the option of parameter ``name`` was on the command line."""
    source = click.get_current_context().get_parameter_source(name)
    return source is click.core.ParameterSource.COMMANDLINE


def _write(
    output: str, members: Members, compression: str | None, unsafe_names: bool
) -> tuple[int, int]:
    """Write the shard; return the bytes of member data and the size of the shard."""
    data_bytes = 0
    with shard_writer(output, compression, unsafe_names) as writer:
        for name, path in progress(members, unit=" files", desc=output):
            with open(path, "rb") as file:
                data = file.read()
            writer.add_member(name, data)
            data_bytes += len(data)
    return data_bytes, writer.size


def tree_members(root: str) -> Members:
    """Every regular file under ``root`` as ``(name relative to root, path)``, in the order of
    ``tar --sort=name``. Symbolic links (to files or directories) and special files are
    skipped, each with a warning."""
    members: Members = []
    _walk(root, "", members)
    return members


def _walk(directory: str, prefix: str, members: Members) -> None:
    with os.scandir(directory) as scan:
        entries = sorted(scan, key=lambda entry: os.fsencode(entry.name))
    for entry in entries:
        name = prefix + entry.name
        if entry.is_symlink():
            warn(f"skipping symbolic link {entry.path} (links are not followed)")
        elif entry.is_dir(follow_symlinks=False):
            _walk(entry.path, name + "/", members)
        elif entry.is_file(follow_symlinks=False):
            members.append((name, entry.path))
        else:
            warn(f"skipping {entry.path}: not a regular file")


def read_recipe(recipe: str) -> Members:
    """The ``(archive name, source path)`` lines of a recipe file, in order.

    Raises:
        click.ClickException: the recipe is not UTF-8 text, or naming the recipe and line, a
            line without exactly two fields, a source that is missing or not a regular file,
            or a name listed before.
    """
    members: Members = []
    lines_of: dict[str, int] = {}
    for number, line in enumerate(_recipe_text(recipe).splitlines(), 1):
        try:
            fields = shlex.split(line, comments=True)
        except ValueError as exn:
            raise _recipe_error(recipe, number, str(exn).lower()) from None
        if not fields:
            continue
        name, path = _recipe_entry(recipe, number, fields)
        if name in lines_of:
            raise _recipe_error(
                recipe, number, f"archive name {name!r} is already on line {lines_of[name]}"
            )
        lines_of[name] = number
        members.append((name, path))
    _warn_split_samples(recipe, members, lines_of)
    return members


def _recipe_text(recipe: str) -> str:
    with open(recipe, "rb") as file:
        data = file.read()
    try:
        if b"\0" in data:
            raise ValueError("it holds NUL bytes")
        return data.decode("utf-8")
    except ValueError as exn:
        reason = exn.reason if isinstance(exn, UnicodeDecodeError) else str(exn)
        raise click.ClickException(
            f"{recipe}: not a recipe, not UTF-8 text ({reason}); SOURCE must be a directory "
            "or a recipe file"
        ) from None


def _recipe_entry(recipe: str, number: int, fields: list[str]) -> tuple[str, str]:
    """The archive name and source path of a recipe line's fields, the source checked."""
    if len(fields) != 2:
        problem = f"expected 'archive-name source-path', got {len(fields)} field(s)"
        raise _recipe_error(recipe, number, problem)
    name, source = fields
    path = os.path.join(os.path.dirname(recipe), source)
    if not os.path.isfile(path):
        problem = "is not a regular file" if os.path.exists(path) else "does not exist"
        raise _recipe_error(recipe, number, f"source {path} {problem}")
    return name, path


def _recipe_error(recipe: str, number: int, problem: str) -> click.ClickException:
    return click.ClickException(f"{recipe}, line {number}: {problem}")


def _warn_split_samples(recipe: str, members: Members, lines_of: dict[str, int]) -> None:
    """Warn once if the recipe's order puts a key's members apart: readers would see them as
    separate samples."""
    seen: set[str] = set()
    current = None
    for name, _ in members:
        parts = split_name(name)
        if parts is None or is_meta(name) or parts[0] == current:
            continue
        current = parts[0]
        if current in seen:
            warn(
                f"{recipe}, line {lines_of[name]}: key {current!r} comes again after other keys;"
                " readers will see its members as separate samples (sort the recipe)"
            )
            return
        seen.add(current)


def count_samples(names: Iterable[str]) -> int:
    """How many samples a reader groups the member ``names`` into.

    >>> count_samples(["0.jpg", "0.cls", "1.jpg", "noext", "__meta__", "0.txt"])
    3
    """
    samples = 0
    current = None
    for name in names:
        parts = split_name(name)
        if parts is None or is_meta(name):
            continue
        if parts[0] != current:
            samples += 1
            current = parts[0]
    return samples
