"""Shards taken from a directory that producers fill: webdataset's ``DirectoryShardList``, as
the ``claim_shards`` stage.

A reader claims a shard by renaming it, atomically, to ``NAME._PID_`` (its process id), so that
no other reader (a worker, another process on the machine) takes it too, and yields it as
webdataset does, ``{"url": path}``.
When the stage after it asks for the next shard, the one before is done with: it is removed
(``mode="unlink"``), renamed ``NAME._done_`` (``"keep"``), or put back as ``NAME`` for another
turn (``"resample"``). Shards are picked at random or oldest first. With nothing to claim, the
reader waits ``poll`` seconds and looks again, for ``timeout`` seconds without a new shard at
most; ``poll=None`` ends the epoch instead.

Claims left by a process that is gone (killed mid-shard) are put back as ``NAME`` whenever a
reader finishes a shard, so that their shards are read again rather than lost. webdataset does
with them what the reader's mode says (removes them under ``"unlink"``, a shard read in part).
A claim made in a process that lives on (an epoch cut short by ``with_epoch``) stays until that
process is gone, as in webdataset.

The directory must be local to the machine: the claims rely on renames in one file system and
on process ids of this machine.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

import braceexpand

from wdspipes.core.context import EpochContext
from wdspipes.core.processes import alive
from wdspipes.core.protocol import register, stage_name
from wdspipes.core.stage import Stage
from wdspipes.errors import ResumeError

__all__ = ["ShardClaimer"]

MODES = ("resample", "keep", "unlink")
SELECTS = ("random", "oldest")
_CLAIMED = re.compile(r"^(.*)\._(\d+)_$")
_LAST_EXTENSION = re.compile(r"\.[^.]*$")


@register("claim_shards")
class ShardClaimer(Stage[dict[str, str]]):
    """Take shards from directories that producers fill (functional name: ``claim_shards``).

    Each directory of the source is read in turn: its shards are claimed one at a time, as
    producers write them.

    See the module for how shards are claimed and what becomes of them. Every worker and
    process claims shards of its own: the stage declares ``per_worker_shards``, and needs no
    split among workers (a sharding filter after it would drop shards others never see).

    Args:
        source_datapipe: yields local directories, read one after the other.
        pattern: the shards' names, a glob pattern with ``{a,b}`` alternatives.
        poll: seconds to wait before looking again when there is nothing to claim; None ends
            the directory's turn then.
        timeout: the most seconds to wait for a new shard.
        mode: what becomes of a shard once read: ``"resample"`` (put back), ``"keep"``
            (renamed ``NAME._done_``), ``"unlink"`` (removed).
        select: which shard to claim: ``"random"`` or ``"oldest"`` (by modification time).
        fate: taken and left aside, as in webdataset.

    Yields:
        Each shard claimed, as webdataset's shard lists yield them: ``{"url": path}`` with
        the path ``DIRECTORY/NAME._PID_`` (every stage that takes shard items takes them:
        see :mod:`wdspipes.io.items`).

    Raises:
        ValueError: an unknown ``mode`` or ``select``.
        NotADirectoryError: a directory of the source is none.

    >>> import pathlib, tempfile
    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> queue = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("a.tar", "b.tar"):
    ...     _ = (queue / name).write_bytes(b"")
    >>> claimed = IterableWrapper([str(queue)]).claim_shards(
    ...     pattern="*.tar", select="oldest", mode="keep", poll=None)
    >>> [pathlib.Path(shard["url"]).name.split("._")[0] for shard in claimed]
    ['a.tar', 'b.tar']
    >>> sorted(path.name for path in queue.iterdir())
    ['a.tar._done_', 'b.tar._done_']
    """

    per_worker_shards = True

    def __init__(
        self,
        source_datapipe: Iterable[str],
        pattern: str = "*.{tar,tgz,tar.tgz}",
        poll: float | None = 1,
        timeout: float = 1e12,
        mode: str = "resample",
        select: str = "random",
        fate: object = None,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if select not in SELECTS:
            raise ValueError(f"select must be one of {', '.join(SELECTS)}, got {select!r}")
        self.source_datapipe = source_datapipe
        self.pattern = pattern
        self.poll = poll
        self.timeout = timeout
        self.mode = mode
        self.select = select
        self.fate = fate

    def open(
        self, source: Iterable[str], context: EpochContext, part: Any = None
    ) -> Iterator[dict[str, str]]:
        rng = random.Random()  # which file to try: fresh in every process, or all would race
        for path in source:
            yield from self._claims(path, rng)

    def _claims(self, path: str, rng: random.Random) -> Iterator[dict[str, str]]:
        if not os.path.isdir(path):
            raise NotADirectoryError(f"claim_shards: {path!r} is not a directory")
        directory = os.path.join(path, "")  # its URLs begin with it: a name cannot be a scheme
        last = time.monotonic()
        while time.monotonic() - last < self.timeout:
            candidates = self._candidates(directory)
            if not candidates:
                if self.poll is None:
                    return
                time.sleep(self.poll)
                continue
            if self.select == "oldest":
                candidate = min(candidates, key=_modified)
            else:
                candidate = rng.choice(candidates)
            claimed = f"{candidate}._{os.getpid()}_"
            try:
                os.rename(candidate, claimed)
            except FileNotFoundError:  # another reader claimed it first
                continue
            last = time.monotonic()
            yield {"url": claimed}
            self.recycle(claimed)
            self.cleanup_files_without_processes(directory)

    def _candidates(self, directory: str) -> list[str]:
        found = {
            name
            for pattern in braceexpand.braceexpand(self.pattern)
            for name in glob.glob(glob.escape(directory) + pattern)
        }
        return sorted(found)

    def recycle(self, claimed: str) -> None:
        """Do with the shard claimed as ``claimed`` what the mode says (see the module); a
        shard removed by someone else meanwhile is left gone."""
        with contextlib.suppress(FileNotFoundError):
            if self.mode == "unlink":
                os.unlink(claimed)
            elif self.mode == "keep":
                os.rename(claimed, _LAST_EXTENSION.sub("", claimed) + "._done_")
            else:
                os.rename(claimed, _LAST_EXTENSION.sub("", claimed))

    def cleanup_files_without_processes(self, directory: str | None = None) -> None:
        """Put back the shards claimed by processes that are gone, in ``directory`` (each of
        the source's if None)."""
        directories = list(self.source_datapipe) if directory is None else [directory]
        for path in directories:
            for claimed in glob.glob(os.path.join(glob.escape(path), "*._*_")):
                match = _CLAIMED.match(claimed)
                if match is not None and not alive(int(match.group(2))):
                    with contextlib.suppress(FileNotFoundError):  # put back by another reader
                        os.rename(claimed, match.group(1))

    def refusal(self) -> ResumeError:
        """It cannot resume (it declares no way to): the shards it reads are consumed as it
        goes."""
        return ResumeError(
            f"{stage_name(self)} (DirectoryShardList) cannot save its place: the shards "
            "it reads are claimed and consumed as it goes, and cannot be read again"
        )


def _modified(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:  # claimed meanwhile: the rename will say so
        return float("inf")
