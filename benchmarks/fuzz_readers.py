"""Fuzz the tar and stream readers: damaged shards by the thousand, and what every read must keep.

Builds small reference shards from the seed (tar: 3 or 4 samples of 2 or 3 fields, a member over
512 bytes, names in GNU long-name and PAX headers and a ustar prefix, directories; CBOR and
msgpack streams of 3 to 5 items), damages them in the families of ``tests/fuzzing.py`` and reads
every damaged shard twice through the public readers (``DataPipeline(..., tarfile_to_samples())``
or ``open_shards().load_tar().group_samples()``; ``cbors_to_samples``, ``msgpack_to_samples``):
alone with the default handler, then before a good shard with ``ignore_and_continue``.

Families: ``tar-cut``, ``cbor-cut`` and ``msgpack-cut`` cut the shard at every byte offset;
``gzip-cut``, ``bz2-cut``, ``xz-cut`` and ``zstd-cut`` the tar shard compressed; ``tar-flip``
changes one byte of a header block, ``tar-zero`` zeroes one, ``tar-forge`` changes header fields
and makes the checksum right again; ``*-garbage`` reads garbage (random bytes, compressor magic,
random archives), ``*-trailing`` a whole shard followed by garbage; ``cbor-flip`` and
``msgpack-flip`` change one byte.

The properties (``tests/fuzzing.py`` says them in full): errors are located ``WdsError``s;
never a partial or altered sample; no sample lost before the damage; no damage passed over in
silence; the good shard after a damaged one read whole; no file descriptor left open without
the garbage collector. For each family it prints the cases, the outcomes of the first read by
error type (``clean``: no error; ``ShardError <- X``: a generic failure caused by X), the
properties broken with their first cases, and a command that reads one of them again in
detail. It exits with status 1 if any property was broken.

Usage::

    python benchmarks/fuzz_readers.py          # all cuts of 3 shards a format, 2,000 cases a family
    python benchmarks/fuzz_readers.py --quick  # 1 shard, every 7th cut, 100 cases a family
    python benchmarks/fuzz_readers.py --family tar-forge --cases 20000 --seed 7
    python benchmarks/fuzz_readers.py --seed 14 --references 1 --family tar-cut --case 1073 -v

The shards are written to a temporary directory, one file per read.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from common import apply_size_defaults, format_table, import_libraries, print_header, verdict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzzing import (  # from tests/, on the path since the line above
    EXHAUSTIVE,
    FAMILIES,
    Case,
    Observation,
    Verdict,
    Violation,
    compress,
    family_cases,
    family_format,
    good_shard,
    run_case,
    short,
)

SEED = 14


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=SEED, help=f"the seed of every case ({SEED})")
    parser.add_argument("--cases", type=int, help="cases of each random family (2000; quick 100)")
    parser.add_argument("--references", type=int, help="reference shards a format (3; quick 1)")
    parser.add_argument("--stride", type=int, help="read every Nth cut of a shard (1; quick 7)")
    parser.add_argument(
        "--family", action="append", choices=FAMILIES, help="run this family (repeat; all)"
    )
    parser.add_argument("--case", type=int, help="run only this case of the one --family")
    parser.add_argument("--examples", type=int, default=3, help="cases shown per property (3)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show each case run")
    parser.add_argument("--quick", action="store_true", help="fewer cases: a smoke run")
    args = parser.parse_args(argv)
    apply_size_defaults(
        parser, args, {"cases": (2000, 100), "references": (3, 1), "stride": (1, 7)}
    )
    families = args.family or list(FAMILIES)
    if args.case is not None and len(families) != 1:
        parser.error("--case needs exactly one --family")
    versions = import_libraries(["wdspipes", "torch", "msgpack", "zstandard"])
    print_header(versions, "none: counts outcomes (seconds are for information)", False)
    print(f"cbor2 {importlib.metadata.version('cbor2')}")
    print(f"seed {args.seed}, {args.references} reference shards a format")

    rows = []
    broken: list[Violation] = []
    generic: dict[str, tuple[Case, str]] = {}
    with tempfile.TemporaryDirectory() as directory:
        for family in families:
            row, violations = run_family(family, Path(directory), args, generic)
            rows.append(row)
            broken += violations
    print()
    headers = ["family", "cases", "outcomes of the first read", "broken properties", "s", "max ms"]
    print(format_table(headers, rows, False))
    report(broken, args)
    if generic:
        print("\ngeneric failures (no property broken, but the reader did not say what is wrong):")
        for label, (case, message) in generic.items():
            print(f"  {label}: first in {case.name()}: {message}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    total = sum(int(row[1]) for row in rows)
    print(f"\npeak RSS {peak:.0f} MiB")
    print(f"every property kept in all {total} cases: {verdict(not broken)}")
    return 1 if broken else 0


def run_family(
    family: str, directory: Path, args: argparse.Namespace, generic: dict[str, tuple[Case, str]]
) -> tuple[list[str], list[Violation]]:
    """Run one family: its row of the summary table, and the properties it broke. Notes in
    ``generic`` the first case of each generic failure (a ``ShardError`` for another cause)."""
    fmt = family_format(family)
    good = directory / f"good.{fmt}"
    good.write_bytes(good_shard(fmt).data)

    def strided(index: int) -> bool:
        return index % args.stride == 0

    # Whatever the stride, the cuts in the last 16 bytes: a compressed stream's checksum.
    select, tail = (strided, 16) if family in EXHAUSTIVE and args.stride > 1 else (None, 0)
    if args.case is not None:
        select, tail = args.case.__eq__, 0
    outcomes: collections.Counter[str] = collections.Counter()
    violations: list[Violation] = []
    slowest = 0.0
    began = time.perf_counter()
    for case in family_cases(family, args.seed, args.references, args.cases, select, tail):
        start = time.perf_counter()
        result = run_case(case, directory, str(good))
        slowest = max(slowest, time.perf_counter() - start)
        outcomes[result.outcome] += 1
        violations += result.violations
        error = result.alone.error
        if error is not None and " <- " in result.outcome and result.outcome not in generic:
            generic[result.outcome] = (case, error.message)
        if args.verbose:
            show(case, result)
    seconds = time.perf_counter() - began
    count = sum(outcomes.values())
    print(f"  {family}: {count} cases in {seconds:.1f} s", file=sys.stderr)
    by_property = collections.Counter(v.prop for v in violations)
    row = [
        family,
        str(count),
        ", ".join(f"{name} {n}" for name, n in outcomes.most_common()),
        ", ".join(f"{prop} {n}" for prop, n in by_property.most_common()) or "none",
        f"{seconds:.1f}",
        f"{slowest * 1000:.0f}",
    ]
    return row, violations


def report(violations: list[Violation], args: argparse.Namespace) -> None:
    """Each broken property of each family: how often, its first cases, how to see one."""
    groups: dict[tuple[str, str], list[Violation]] = collections.defaultdict(list)
    for violation in violations:
        groups[violation.case.family, violation.prop].append(violation)
    for (family, prop), found in groups.items():
        cases = sorted({v.case.index for v in found})
        print(f"\n{family}: property {prop!r} broken {len(found)} times in {len(cases)} cases")
        for violation in found[: args.examples]:
            print(f"  {violation}")
        print(
            f"  reproduce: .venv/bin/python benchmarks/fuzz_readers.py --seed {args.seed} "
            f"--references {args.references} --family {family} --case {cases[0]} -v"
        )


def show(case: Case, result: Verdict) -> None:
    """A case in detail: the damage, the bytes around it, both reads, what they broke."""
    original = compress(case.family, case.reference.data)
    at = next(
        (i for i, (a, b) in enumerate(zip(case.data, original, strict=False)) if a != b),
        min(len(case.data), len(original)),
    )
    print(f"\n{case.name()}: {len(case.data)} bytes, the undamaged shard {len(original)}")
    print(f"  first difference at byte {at}: {case.data[max(0, at - 16) : at + 16].hex(' ')}")
    layout = [
        f"{short(s['__key__'])} {sorted(k for k in s if k != '__key__')}"
        for s in case.reference.samples
    ]
    print(f"  undamaged samples: {'; '.join(layout)}")
    expected = {
        "intact": case.intact,
        "at least": case.at_least,
        "exact": case.exact,
        "report": case.report,
        "whole": case.whole,
        "offsets": case.offsets,
    }
    print(f"  expected: {expected}")
    for name, observation in (("alone, raise", result.alone), ("then good, continue", result.both)):
        print(f"  read {name}: {describe(observation)}")
    for violation in result.violations:
        print(f"  BROKEN [{violation.prop}] read {violation.read}: {violation.detail}")


def describe(observation: Observation) -> str:
    samples = [
        f"{short(s.get('__key__'))} {sorted(str(k) for k in s if not str(k).startswith('__'))}"
        for s in observation.samples
    ]
    parts = [f"{len(samples)} samples {samples}"]
    if observation.error is not None:
        error = observation.error
        parts.append(f"{error.label()} at offset {error.offset!r}: {error.message}")
    parts += observation.warnings
    if observation.leaked_fds:
        parts.append(f"{observation.leaked_fds} fds left open")
    return "; ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
