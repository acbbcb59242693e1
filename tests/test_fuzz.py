"""Seeded fuzzing of the tar and stream readers (issue 14): small shards cut at every kind of
offset, with flipped, zeroed or forged header bytes, of garbage, or followed by garbage, each
read through the public readers alone and before a good shard. The cases and the properties
every read must keep are in ``tests/fuzzing.py``; this file runs a few thousand of them, chosen
so that they cover every block position of the shards, in seconds.

A failure lists the properties broken, each with a case; to read that case again and see it::

    .venv/bin/python benchmarks/fuzz_readers.py --references 1 --family tar-cut --case 1234 -v

``benchmarks/fuzz_readers.py`` runs the same families with many more cases.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from fuzzing import (
    COMPRESSORS,
    EXHAUSTIVE,
    FAMILIES,
    Case,
    ErrorSeen,
    Observation,
    Sample,
    Violation,
    compress,
    family_cases,
    family_format,
    good_shard,
    judge,
    reference,
    run_case,
)

SEED = 14

pytestmark = [
    pytest.mark.skipif(
        not os.path.isdir("/proc/self/fd"), reason="counts open files in /proc/self/fd"
    ),
    pytest.mark.slow,  # thousands of damaged shards: about 10 s
]

# Where in a 512-byte block a cut is always tried: the block's edges, and inside a header the
# name, size, checksum, type and prefix fields.
BLOCK_POSITIONS = frozenset({0, 1, 100, 124, 148, 155, 156, 345, 511})


def tar_cuts(index: int) -> bool:
    return index % 512 in BLOCK_POSITIONS or index % 31 == 0


def compressed_cuts(index: int) -> bool:
    return index % 19 == 0  # and the last 16 bytes: the stream's checksum and length


def stream_cuts(index: int) -> bool:
    return index % 3 == 0


BUDGET: dict[str, int | Callable[[int], bool]] = {
    # family: random cases, or which cuts (by offset in the first reference shard)
    "tar-cut": tar_cuts,
    **{f"{name}-cut": compressed_cuts for name in COMPRESSORS},
    "cbor-cut": stream_cuts,
    "msgpack-cut": stream_cuts,
    "tar-flip": 150,
    "tar-zero": 30,
    "tar-forge": 200,
    "tar-garbage": 150,
    "tar-trailing": 15,
    "gzip-trailing": 15,
    "cbor-flip": 100,
    "cbor-garbage": 100,
    "cbor-trailing": 15,
    "msgpack-flip": 100,
    "msgpack-garbage": 100,
    "msgpack-trailing": 15,
}


def run_family(family: str, directory: Path) -> tuple[collections.Counter[str], list[Violation]]:
    """Run the test's share of ``family``: its outcomes by error type, and what they broke."""
    fmt = family_format(family)
    good = directory / f"good.{fmt}"
    good.write_bytes(good_shard(fmt).data)
    budget = BUDGET[family]
    if family in EXHAUSTIVE:
        assert callable(budget)
        cases = family_cases(family, SEED, select=budget, tail=16)
    else:
        assert isinstance(budget, int)
        cases = family_cases(family, SEED, count=budget)
    outcomes: collections.Counter[str] = collections.Counter()
    violations: list[Violation] = []
    for case in cases:
        verdict = run_case(case, directory, str(good))
        outcomes[verdict.outcome] += 1
        violations += verdict.violations
    return outcomes, violations


def summary(family: str, outcomes: collections.Counter[str], violations: list[Violation]) -> str:
    """The properties broken, how often, with the first cases that broke each."""
    by_property: dict[str, list[Violation]] = collections.defaultdict(list)
    for violation in violations:
        by_property[violation.prop].append(violation)
    lines = [f"{family}: {sum(outcomes.values())} cases, outcomes {dict(outcomes)}"]
    for prop, found in by_property.items():
        cases = {(v.case.family, v.case.index) for v in found}
        lines.append(f"property {prop!r} broken {len(found)} times, in {len(cases)} cases:")
        lines += [f"  {violation}" for violation in found[:3]]
    first = violations[0].case
    lines.append(
        f"reproduce: .venv/bin/python benchmarks/fuzz_readers.py --seed {SEED} --references 1 "
        f"--family {first.family} --case {first.index} -v"
    )
    return "\n".join(lines)


@pytest.mark.parametrize("family", FAMILIES)
def test_damaged_shards(family: str, tmp_path: Path) -> None:
    """Every property of tests/fuzzing.py holds for the test's share of the family's cases."""
    outcomes, violations = run_family(family, tmp_path)
    assert sum(outcomes.values()) >= 15
    if violations:
        pytest.fail(summary(family, outcomes, violations), pytrace=False)


@pytest.mark.parametrize("fmt", ["tar", *COMPRESSORS, "cbor", "msgpack"])
def test_undamaged_shards_read_whole(fmt: str, tmp_path: Path) -> None:
    """The control: the reference shards read whole and clean, by both readers, alone and
    before the good shard."""
    family = f"{fmt}-cut"
    shard = reference(family_format(family), SEED, 0)
    data = compress(family, shard.data)
    good = tmp_path / "good"
    good.write_bytes(good_shard(shard.fmt).data)
    n = len(shard.samples)
    for index in range(2):  # the case index picks which reader reads it alone
        case = Case("undamaged", index, shard.fmt, data, fmt, shard, n, n, whole=n, valid=True)
        verdict = run_case(case, tmp_path, str(good))
        assert verdict.outcome == "clean"
        assert not verdict.violations, [str(v) for v in verdict.violations]


def test_the_judge_sees_every_broken_property() -> None:
    """The properties can fail: made-up readings that break each one are caught."""
    shard = reference("tar", SEED, 0)
    url = "/shards/damaged.tar"
    n = len(shard.samples)
    case = Case("made-up", 0, "tar", b"", "cut", shard, n, 1, report=True, offsets=(512, 1000))
    whole = [{**sample, "__url__": url} for sample in shard.samples]
    good = [{**sample, "__url__": "good.tar"} for sample in good_shard("tar").samples]
    field = next(name for name in shard.samples[1] if name != "__key__")
    altered = {**whole[1], field: b"changed"}
    partial = {k: v for k, v in whole[1].items() if k != field}

    def error(kind: str = "TruncatedShardError", offset: object = 1000, at: str = url) -> ErrorSeen:
        ours = kind != "ValueError"
        return ErrorSeen(kind, ours, ours, at, offset, "made up", "")

    def broken(
        samples: list[Sample],
        seen: ErrorSeen | None,
        leaked: int = 0,
        finalised: tuple[str, ...] = (),
        continued: list[Sample] | None = None,
    ) -> set[str]:
        alone = Observation(samples, seen, [], leaked, list(finalised))
        both = Observation(whole[:1] + good if continued is None else continued, None, [], 0, [])
        return {v.prop for v in judge(case, url, alone, "raise", both, "continue")}

    assert broken(whole[:1], error()) == set()
    assert broken([whole[0], altered], error()) == {"sample"}
    assert broken([whole[0], partial], error()) == {"sample"}
    assert broken([], error()) == {"lost"}
    assert broken(whole[:1], error("ValueError")) == {"error"}
    assert broken(whole[:1], error(offset=None)) == {"error"}
    assert broken(whole[:1], error(offset=0)) == {"error"}
    assert broken(whole[:1], error(at="other.tar")) == {"error"}
    assert broken(whole[:1], None) == {"silent"}
    assert broken(whole[:1], error(), leaked=1) == {"fd"}
    assert broken(whole[:1], error(), finalised=("unclosed file",)) == {"fd"}
    assert broken(whole[:1], error(), continued=whole[:1] + good[:1]) == {"continue"}
    assert broken(whole[:1], error(), continued=[whole[0], partial, *good]) == {"sample"}
