"""The grouper: FORMAT.md section 3 (key and field of a name) and section 4 (grouping), on both
of its paths (straight from a TarLoader, and from any other source of members)."""

from __future__ import annotations

import io

import pytest
from shardgen import make_tar
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes.core.names import is_meta, split_name
from wdspipes.io import ShardStream
from wdspipes.pipes import SampleGrouper
from wdspipes.read.walk import TarMember

# FORMAT.md section 3, verbatim.
KEY_AND_FIELD = [
    ("a.seg.jpg", ("a", "seg.jpg")),
    ("dir.x/file.jpg", ("dir.x/file", "jpg")),
    ("a/b.c/d.e", ("a/b.c/d", "e")),
    ("a/b/c.tar.gz", ("a/b/c", "tar.gz")),
    ("a.", ("a", "")),
    ("a..b", ("a", ".b")),
    ("a/.jpg", ("a/", "jpg")),
    ("dir/.x.jpg", ("dir/", "x.jpg")),
    ("sample 1.jpg", ("sample 1", "jpg")),
    ("a.JPG", ("a", "jpg")),
    (".hidden", None),
    (".hidden.jpg", None),
    ("noext", None),
    ("x/y.z/w", None),
    # where webdataset's regular expression stops at a newline, so do we
    ("a.b\n/c.d", None),
    ("x\n/a.jpg", ("x\n/a", "jpg")),
    ("./0001.jpg", ("./0001", "jpg")),
    ("Key.Jpg", ("Key", "jpg")),
]


@pytest.mark.parametrize(("name", "expected"), KEY_AND_FIELD)
def test_key_and_field(name: str, expected: tuple[str, str] | None) -> None:
    assert split_name(name) == expected


@pytest.mark.parametrize(
    ("name", "meta"),
    [
        ("__meta__", True),
        ("__x__/foo.jpg", True),
        ("___", True),
        ("__a__b__", True),
        ("a/__x__.jpg", False),
        ("__key__.txt", False),
        ("__x/y__/z.jpg", False),
        ("_x_.jpg", False),
    ],
)
def test_meta_files(name: str, meta: bool) -> None:
    assert is_meta(name) is meta


def members_pipe(shards: dict[str, list[tuple[str, bytes]]], fused: bool) -> SampleGrouper:
    """Members of in-memory shards, grouped: through a TarLoader (the fused path) or through a
    plain list of TarMember records."""
    if fused:
        streams = [ShardStream(url, io.BytesIO(make_tar(m))) for url, m in shards.items()]
        return IterableWrapper(streams, deepcopy=False).load_tar().group_samples()
    records = []
    for url, members in shards.items():
        records += [TarMember(name, data, 1024 * i, url) for i, (name, data) in enumerate(members)]
    return IterableWrapper(records).group_samples()


both_paths = pytest.mark.parametrize("fused", [True, False], ids=["from-load_tar", "from-members"])


@both_paths
def test_consecutive_members_form_samples_in_tar_order(fused: bool) -> None:
    shards = {"s.tar": [("0.jpg", b"J"), ("0.cls", b"1"), ("0.Txt", b""), ("1.cls", b"2")]}
    samples = list(members_pipe(shards, fused))
    assert [list(s.items()) for s in samples] == [
        [("__key__", "0"), ("__url__", "s.tar"), ("jpg", b"J"), ("cls", b"1"), ("txt", b"")],
        [("__key__", "1"), ("__url__", "s.tar"), ("cls", b"2")],
    ]


@both_paths
def test_interleaved_names_give_separate_samples(fused: bool) -> None:
    shards = {"s.tar": [("0.a", b"1"), ("1.a", b"2"), ("0.b", b"3")]}
    assert [(s["__key__"], sorted(s)) for s in members_pipe(shards, fused)] == [
        ("0", ["__key__", "__url__", "a"]),
        ("1", ["__key__", "__url__", "a"]),
        ("0", ["__key__", "__url__", "b"]),
    ]


@both_paths
def test_samples_never_span_shards(fused: bool) -> None:
    shards = {"a.tar": [("0.x", b"1"), ("7.x", b"2")], "b.tar": [("7.y", b"3")]}
    samples = list(members_pipe(shards, fused))
    assert [(s["__key__"], s["__url__"]) for s in samples] == [
        ("0", "a.tar"),
        ("7", "a.tar"),
        ("7", "b.tar"),
    ]


def test_same_shard_read_twice_in_a_row_gives_two_samples() -> None:
    """A resampler may draw one shard twice in a row: the URL repeats, the offset restarts."""
    tar = make_tar([("0.cls", b"1")])
    streams = [ShardStream("s.tar", io.BytesIO(tar)), ShardStream("s.tar", io.BytesIO(tar))]
    samples = list(IterableWrapper(streams, deepcopy=False).load_tar().group_samples())
    assert [s["__key__"] for s in samples] == ["0", "0"]


@both_paths
def test_meta_files_and_names_without_field_are_skipped(fused: bool) -> None:
    shards = {
        "s.tar": [
            ("__meta__", b"m"),
            ("__x__/0.jpg", b"m"),
            (".hidden", b"h"),
            ("noext", b"n"),
            ("0.jpg", b"J"),
            ("x/y.z/w", b"w"),
            ("0.cls", b"1"),
        ]
    }
    assert [list(s.items()) for s in members_pipe(shards, fused)] == [
        [("__key__", "0"), ("__url__", "s.tar"), ("jpg", b"J"), ("cls", b"1")]
    ]


DUPLICATES = [("0.jpg", b"J"), ("0.JPG", b"K"), ("0.cls", b"1"), ("1.cls", b"2")]


@both_paths
def test_duplicate_field_is_an_error_that_names_it(fused: bool) -> None:
    with pytest.raises(wds.DuplicateFieldError, match="duplicate field 'jpg'") as caught:
        list(members_pipe({"s.tar": DUPLICATES}, fused))
    error = caught.value
    assert (error.url, error.member, error.key) == ("s.tar", "0.JPG", "0")


@both_paths
def test_duplicate_dropped_when_continuing(fused: bool) -> None:
    pipe = members_pipe({"s.tar": DUPLICATES}, fused)
    pipe.handler = wds.ignore_and_continue
    assert [list(s.items())[2:] for s in pipe] == [[("jpg", b"J"), ("cls", b"1")], [("cls", b"2")]]


@both_paths
def test_duplicate_stops_after_the_sample_so_far(fused: bool) -> None:
    pipe = members_pipe({"s.tar": DUPLICATES}, fused)
    pipe.handler = wds.ignore_and_stop
    assert [list(s.items())[2:] for s in pipe] == [[("jpg", b"J")]]


@both_paths
@pytest.mark.parametrize("field", ["__key__", "__url__"])
def test_reserved_fields_are_duplicates(fused: bool, field: str) -> None:
    with pytest.raises(wds.DuplicateFieldError):
        list(members_pipe({"s.tar": [(f"0.{field}", b"x")]}, fused))


def test_group_by_keys_stage() -> None:
    stage = wds.group_by_keys(handler=wds.ignore_and_continue)
    pipe = stage(IterableWrapper([TarMember("0.a", b"1", 0, "s.tar")]))
    assert isinstance(pipe, SampleGrouper) and pipe.handler is wds.ignore_and_continue
    assert list(pipe) == [{"__key__": "0", "__url__": "s.tar", "a": b"1"}]


def test_split_name_matches_webdataset_on_every_short_name() -> None:
    """Exhaustive over an alphabet of the characters that matter, against webdataset's own
    function (the oracle), lower-casing its field as its grouper does."""
    from itertools import product

    from webdataset.tariterators import base_plus_ext

    alphabet = "a./\nA_"
    checked = 0
    for length in range(7):
        for letters in product(alphabet, repeat=length):
            name = "".join(letters)
            key, field = base_plus_ext(name)
            expected = None if key is None else (key, field.lower())
            assert split_name(name) == expected, repr(name)
            checked += 1
    assert checked == sum(6**n for n in range(7))


def test_is_meta_matches_webdataset() -> None:
    import re
    from itertools import product

    from webdataset.tariterators import meta_prefix, meta_suffix

    def webdataset_skips(name: str) -> bool:
        top_level = "/" not in name and name.startswith(meta_prefix) and name.endswith(meta_suffix)
        return top_level or re.match(r"__[^/]*__($|/)", name) is not None

    for length in range(8):
        for letters in product("_a/", repeat=length):
            name = "".join(letters)
            assert is_meta(name) == webdataset_skips(name), repr(name)
