"""The Ray engine of :func:`~wdspipes.tools.reshard.reshard` (``engine="ray"``): the two
passes of the bucket shuffle (:mod:`~wdspipes.tools.buckets`) as Ray tasks, one per input
shard, then one per bucket, on storage that every node reaches.

The tasks call the same functions as the local engine, with the same
:class:`~wdspipes.tools.buckets.ShufflePlan`: each input shard is dealt into bucket files of
its own, whose records, joined in input order, are those the local engine writes into one
file per bucket; each bucket is then loaded, shuffled from ``(seed, bucket)`` and written into
shards of its own. So the shards are the same bytes under the same names as on one machine.
Only small descriptions of files cross the object store; the samples go through the shared
directory. Ray is imported here only, and only when a session starts (the ``ray`` extra).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

from wdspipes.tools.buckets import (
    Bucket,
    ReshardInput,
    Run,
    Scattered,
    ShufflePlan,
    Tally,
    Written,
    bucket_pattern,
    group_buckets,
    join_parts,
    order_buckets,
    scatter_source,
    total_size,
    write_buckets,
)
from wdspipes.tools.progress import byte_bar

__all__ = ["MAX_RETRIES", "RaySession"]

MAX_RETRIES = 3
"""How many times Ray runs a task again whose worker or node died. A task that raises is not
run again: the error (a shard that cannot be read) would come back."""
CONNECT_TIMEOUT = 5.0
"""Seconds to wait for the cluster's address to answer before giving up."""

T = TypeVar("T")


def import_ray() -> Any:
    """The ``ray`` module, or an error that names the extra to install."""
    try:
        import ray
    except ImportError as exn:
        raise ModuleNotFoundError(
            f"engine='ray' (--ray) needs Ray: pip install 'wdspipes[ray]' ({exn})", name="ray"
        ) from exn
    return ray


def check_reachable(address: str) -> None:
    """Raise ConnectionError unless ``HOST:PORT`` (or ``ray://HOST:PORT``) accepts a
    connection within :data:`CONNECT_TIMEOUT`; ``auto`` is left to Ray.

    >>> check_reachable("127.0.0.1:1")
    Traceback (most recent call last):
    ...
    ConnectionError: cannot reach the Ray cluster at '127.0.0.1:1': Connection refused
    """
    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if host is None or port is None:
        raise ValueError(f"a Ray address is auto, HOST:PORT or ray://HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as exn:
        reason = exn.strerror or str(exn) or type(exn).__name__
        raise ConnectionError(f"cannot reach the Ray cluster at {address!r}: {reason}") from exn


class RaySession:
    """A connection to Ray for one run: the cluster at ``address`` (``auto``, ``HOST:PORT``,
    ``ray://HOST:PORT``), or, without one, a Ray started in this process with ``cpus`` CPUs
    and shut down at the end. A Ray the caller has already initialised is used as it is.

    Raises:
        ModuleNotFoundError: Ray is not installed (the error names the extra).
        ConnectionError: the cluster cannot be reached.
    """

    def __init__(self, address: str | None = None, cpus: int | None = None) -> None:
        self.address = address
        self.cpus = cpus
        self._owned = False
        self.ray = import_ray()

    def __enter__(self) -> RaySession:
        ray = self.ray
        if self.address is not None:
            check_reachable(self.address)
        if ray.is_initialized():
            return self
        try:
            if self.address is None:
                ray.init(num_cpus=self.cpus, include_dashboard=False, logging_level=logging.WARNING)
            else:
                ray.init(address=self.address, logging_level=logging.WARNING)
        except ConnectionError as exn:
            message = f"cannot join the Ray cluster at {self.address!r}: {exn}"
            raise ConnectionError(message) from exn
        self._owned = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._owned:
            self._owned = False
            self.ray.shutdown()

    def shuffle(
        self,
        plan: ShufflePlan,
        sources: list[ReshardInput],
        staging: str,
        options: dict[str, Any],
        progress: bool,
    ) -> Run:
        """The bucket shuffle of ``sources`` into shards under ``staging``, as Ray tasks."""
        self._check_reached([staging, plan.directory])
        scatter = self._remote(scatter_source)
        shared = [source.shared() for source in sources]
        calls = {scatter.remote(plan, i, source): i for i, source in enumerate(shared)}
        with byte_bar(progress, "pass 1: buckets", total_size(sources)) as bar:
            scattered: list[Scattered] = self._results(
                calls, bar, "inputs", lambda i, done: sources[i].size or done.tally.bytes
            )
        read = Tally()
        for done in scattered:
            read.merge(done.tally)
        order = order_buckets(plan, join_parts(plan, [done.parts for done in scattered]))
        written = self._write(plan, order, staging, options, progress, read.bytes)
        tally = Tally()
        for bucket in written:
            tally.merge(bucket.tally)
        return Run(
            read,
            tally,
            [shard for bucket in written for shard in bucket.shards],
            passes=max((bucket.passes for bucket in written), default=2),
            largest=max((bucket.largest for bucket in written), default=0),
        )

    def _write(
        self,
        plan: ShufflePlan,
        order: list[Bucket],
        staging: str,
        options: dict[str, Any],
        progress: bool,
        size: int,
    ) -> list[Written]:
        """Pass 2: a task per run of buckets, each writing the shards of its place."""
        write = self._remote(write_buckets)
        runs = group_buckets(order, options["maxcount"], options["maxsize"])
        calls = {
            write.remote(plan, buckets, bucket_pattern(staging, position), options): position
            for position, buckets in enumerate(runs)
        }
        with byte_bar(progress, "pass 2: shards", size) as bar:
            return self._results(calls, bar, "bucket runs", lambda i, done: done.tally.bytes)

    def _remote(self, function: Callable[..., Any]) -> Any:
        return self.ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(function)

    def _results(
        self,
        calls: dict[Any, int],
        bar: Any,
        what: str,
        weight: Callable[[int, Any], int],
    ) -> list[Any]:
        """The results of the tasks, in the order of their numbers, as they finish; the
        first failure cancels the others and is raised as the task raised it."""
        ray = self.ray
        results: dict[int, Any] = {}
        pending = list(calls)
        bar.set_postfix_str(f"0/{len(calls)} {what}")
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for call in done:
                    number = calls[call]
                    results[number] = self._get(call)
                    bar.update(weight(number, results[number]))
                    bar.set_postfix_str(f"{len(results)}/{len(calls)} {what}")
        except BaseException:
            for call in pending:
                ray.cancel(call, force=True)
            ray.wait(pending, num_returns=len(pending), timeout=30)  # none writes on after
            raise
        return [results[number] for number in sorted(results)]

    def _get(self, call: Any) -> Any:
        """A task's result; the error it raised, as it raised it (not wrapped by Ray)."""
        try:
            return self.ray.get(call)
        except self.ray.exceptions.RayTaskError as exn:
            if isinstance(exn.cause, Exception):
                raise exn.cause from None
            raise

    def _check_reached(self, directories: list[str]) -> None:
        """Refuse to start unless every node sees the directories made for the run."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = self.ray.remote(max_retries=MAX_RETRIES)(missing_directories)
        nodes = [node["NodeID"] for node in self.ray.nodes() if node["Alive"]]
        calls = [
            probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote(directories)
            for node in nodes
        ]
        for node, missing in zip(nodes, self.ray.get(calls), strict=True):
            if missing:
                raise FileNotFoundError(
                    f"the Ray node {node[:8]} does not see {missing[0]!r}: the output and tmpdir "
                    "must be on storage every node reaches (a shared directory)"
                )


def missing_directories(directories: list[str]) -> list[str]:
    """Those of ``directories`` that are not directories here."""
    return [path for path in directories if not os.path.isdir(path)]
