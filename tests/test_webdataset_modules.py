"""webdataset's module paths (wdspipes/{tariterators,filters,utils,shardlists,autodecode,
handlers,gopen}.py, facades over wdspipes/webdataset/, the layer that holds webdataset's
vocabulary): each name against webdataset 1.0.2's, on the same data. A program's own
reader built from ``tariterators`` functions, a webdataset-style grouper of either generation,
``PipelineStage`` subclasses and ``pipelinefilter`` functions run and compose with wdspipes'
stages; the names wdspipes does not provide say what to use instead."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pickle
import random
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reference import quietly, wdsref
from shardgen import make_tar, sample_members, write_shards
from torch.utils.data.datapipes.iter import IterableWrapper

import wdspipes as wds
from wdspipes import autodecode, filters, handlers, shardlists, tariterators, utils
from wdspipes.core.curried import Curried, is_stage_factory
from wdspipes.core.protocol import functional_names
from wdspipes.webdataset.stages import CurriedName

gopen_module = importlib.import_module("wdspipes.gopen")  # wdspipes.gopen is the function

MODULES = ["tariterators", "filters", "utils", "shardlists", "autodecode", "handlers", "gopen"]


@pytest.mark.parametrize("name", MODULES)
def test_webdatasets_module_paths_exist(name: str) -> None:
    """``import wdspipes.X`` and ``wds.X`` as ``import webdataset.X`` and ``webdataset.X``:
    modules, but ``wds.gopen``, the function (as webdataset's)."""
    module = importlib.import_module(f"wdspipes.{name}")
    if name == "gopen":
        assert wds.gopen is module.gopen is wds.api.gopen
        assert callable(wds.gopen) and callable(wdsref.gopen)
    else:
        assert getattr(wds, name) is module


def public_names(module: Any) -> set[str]:
    """The names webdataset's module defines for its users: its own functions, classes and
    values, not the modules and library names it imports, nor private ones."""
    names = set()
    for name, value in vars(module).items():
        origin = getattr(value, "__module__", None) or ""
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if (inspect.isclass(value) or inspect.isfunction(value)) and not origin.startswith(
            "webdataset"
        ):
            continue  # imported from another library (typing, itertools, ...)
        if name in IMPORTED:
            continue
        names.add(name)
    return names


IMPORTED = {"Any", "Callable", "Dict", "Iterable", "Iterator", "Optional", "Set", "Tuple"}
IMPORTED |= {"List", "Union", "PIPE", "Popen", "dataclass", "field", "islice", "reduce"}
IMPORTED |= {"fnmatch", "partial", "urlparse", "url2pathname"}


@pytest.mark.parametrize("name", MODULES)
def test_every_name_of_webdatasets_module_is_there_or_says_what_to_use(name: str) -> None:
    ours = importlib.import_module(f"wdspipes.{name}")
    theirs = public_names(importlib.import_module(f"webdataset.{name}"))
    for missing in sorted(theirs):
        try:
            getattr(ours, missing)
        except AttributeError as exn:
            assert "has no counterpart" in str(exn), missing


def test_the_page_lists_every_name() -> None:
    """docs/webdataset-modules.md names each module's names, given and not, in its section."""
    page = (Path(__file__).parent.parent / "docs" / "webdataset-modules.md").read_text()
    sections = dict(re.findall(r"\n## `webdataset\.(\w+)`\n(.*?)(?=\n## |\Z)", page, re.S))
    assert sorted(sections) == sorted(MODULES)
    for name in MODULES:
        module = importlib.import_module(f"wdspipes.webdataset.{name}")
        listed = set(re.findall(r"`(\w+)[`(]", sections[name]))
        unlisted = (set(module.__all__) | set(getattr(module, "MISSING", ()))) - listed
        assert not unlisted, f"webdataset.{name}: {sorted(unlisted)}"


@pytest.mark.parametrize("name", MODULES)
def test_each_module_path_is_a_facade_over_the_layer(name: str) -> None:
    """``wdspipes.X`` holds the names of ``wdspipes.webdataset.X``, the same objects, and says
    what to use for the names it does not provide as the layer does."""
    facade = importlib.import_module(f"wdspipes.{name}")
    layer = importlib.import_module(f"wdspipes.webdataset.{name}")
    assert facade.__all__ == layer.__all__
    assert all(getattr(facade, each) is getattr(layer, each) for each in layer.__all__)
    for missing in getattr(layer, "MISSING", ()):
        with pytest.raises(AttributeError, match=f"webdataset.{name}.{missing} has no"):
            getattr(facade, missing)


def test_top_level_names_of_webdatasets() -> None:
    assert wds.getfirst is filters.getfirst and wds.pipelinefilter is filters.pipelinefilter
    assert wds.PipelineStage is utils.PipelineStage
    from wdspipes import gopen

    assert gopen is gopen_module.gopen


SAME_OBJECTS = {
    "filters": [
        "batched",
        "decode",
        "detshuffle",
        "map",
        "map_dict",
        "map_tuple",
        "rename",
        "select",
        "shuffle",
        "slice",
        "to_tuple",
        "unbatched",
        "reraise_exception",
    ],
    "shardlists": [
        "ResampledShards",
        "SimpleShardList",
        "split_by_node",
        "split_by_worker",
        "DirectoryShardList",
        "expand_urls",
    ],
    "tariterators": ["tarfile_to_samples"],
    "handlers": [
        "reraise_exception",
        "ignore_and_continue",
        "warn_and_continue",
        "ignore_and_stop",
        "warn_and_stop",
    ],
    "autodecode": ["Continue", "handle_extension"],
}


@pytest.mark.parametrize(("module", "names"), list(SAME_OBJECTS.items()))
def test_the_stages_of_a_module_are_wdspipes_own(module: str, names: list[str]) -> None:
    for name in names:
        assert getattr(importlib.import_module(f"wdspipes.{module}"), name) is getattr(wds, name)


@pytest.mark.parametrize(
    ("module", "name", "advice"),
    [
        ("filters", "default_collation_fn", "wdspipes.collate"),
        ("shardlists", "non_empty", "ShardSplitError"),
        ("utils", "make_seed", "seed with an int"),
        ("autodecode", "torch_audio", "torchaudio"),
        ("gopen", "Pipe", "open_url"),
        ("tariterators", "shardlist", "SimpleShardList"),
    ],
)
def test_names_not_provided_say_what_to_use(module: str, name: str, advice: str) -> None:
    assert hasattr(importlib.import_module(f"webdataset.{module}"), name)
    with pytest.raises(AttributeError, match=f"webdataset.{module}.{name} has no counterpart"):
        getattr(importlib.import_module(f"wdspipes.{module}"), name)
    with pytest.raises(AttributeError, match=advice):
        getattr(importlib.import_module(f"wdspipes.{module}"), name)
    with pytest.raises(AttributeError, match="has no attribute 'nothing_such'"):
        getattr(importlib.import_module(f"wdspipes.{module}"), "nothing_" + "such")


# --- the curried names of DataPipeline ------------------------------------------------------

FROM_THE_TABLE = ["decode", "to_tuple", "map_tuple", "map_dict", "rename", "select"]
FROM_THE_TABLE += ["batched", "unbatched", "with_epoch", "with_length", "prefetch_items"]
"""The curried names that are a stage's functional name, with its arguments: webdataset's, and
wdspipes' own ``prefetch_items``."""


@pytest.mark.parametrize("name", FROM_THE_TABLE)
def test_a_curried_name_of_a_stages_name_is_made_from_the_table(name: str) -> None:
    """``wds.<name>`` is the table's stage waiting for its source: the stage's signature
    without the source, its docstring, and ``Curried(stage, *args, **kwargs)``."""
    curried, stage = getattr(wds, name), functional_names()[name]
    assert isinstance(curried, CurriedName) and curried.stage is stage and is_stage_factory(curried)
    assert curried.__doc__ == stage.__doc__ and curried.__name__ == name
    arguments = list(inspect.signature(stage.__init__).parameters)[2:]  # not self, the source
    assert list(inspect.signature(curried).parameters) == arguments
    assert name not in filters.__all__ or getattr(filters, name) is curried
    assert pickle.loads(pickle.dumps(curried)).stage is stage


def test_every_curried_name_that_is_a_functional_name_is_the_tables() -> None:
    top = {name for name in wds.__all__ if is_stage_factory(getattr(wds, name))}
    assert top & set(functional_names()) == set(FROM_THE_TABLE)


def test_curried_names_build_what_the_functional_names_build() -> None:
    samples = [{"__key__": f"{n}", "cls": b"%d" % n, "txt": b"t"} for n in range(5)]
    chained = IterableWrapper(samples).decode().rename(label="cls").to_tuple("label", "txt")
    chained = chained.batched(2, collation_fn=None).unbatched().with_epoch(4)
    stages = [wds.decode(), wds.rename(label="cls"), wds.to_tuple("label", "txt")]
    stages += [wds.batched(2, collation_fn=None), wds.unbatched, wds.with_epoch(4)]
    curried = wds.DataPipeline(IterableWrapper(samples), *stages)
    assert list(curried) == list(chained) == [(n, "t") for n in range(4)]
    assert [type(stage).__name__ for stage in (curried, chained)] == ["EpochLimiter"] * 2
    assert repr(wds.batched(2, collation_fn=None)) == "Batcher(2, collation_fn=None)"


def test_the_curried_names_take_the_stages_new_arguments() -> None:
    """Made from the table, a curried name takes what its stage takes: ``threads=`` (issue 34)
    on ``decode``, ``map_dict`` and ``map_tuple``, and on webdataset's ``map`` too."""
    samples = [{"__key__": f"{n}", "cls": b"%d" % n} for n in range(6)]
    stages = [wds.decode(threads=2), wds.map_dict(cls=str, threads=2)]
    stages += [wds.map(dict, threads=2), wds.to_tuple("cls"), wds.map_tuple(int, threads=2)]
    pipe = wds.DataPipeline(IterableWrapper(samples), *stages)
    assert list(pipe) == [(n,) for n in range(6)]


def test_a_curried_name_checks_its_arguments_as_it_is_called() -> None:
    with pytest.raises(TypeError, match=r"to_tuple\(\): got an unexpected keyword argument 'x'"):
        wds.to_tuple("cls", x=1)
    with pytest.raises(TypeError, match=r"with_epoch\(\): missing a required argument"):
        wds.with_epoch()


# --- tariterators ---------------------------------------------------------------------------

NAMES = ["0001.jpg", "dir/0001.seg.PNG", "a.b/c", "a.b/c.d", ".hidden", "a..b", "a/.jpg"]
NAMES += ["README", "x/y.", "a\nb.c", "__meta__", "k.", "./0.cls", "a/b/c.tar.gz"]


def test_base_plus_ext_and_valid_sample_as_webdatasets() -> None:
    for name in NAMES:
        assert tariterators.base_plus_ext(name) == wdsref.tariterators.base_plus_ext(name), name
    samples: list[Any] = [None, {}, {"a": 1}, {"__bad__": True, "a": 1}, {"__bad__": 0}, [1]]
    for sample in samples:
        assert tariterators.valid_sample(sample) == wdsref.tariterators.valid_sample(sample)
    assert (tariterators.meta_prefix, tariterators.meta_suffix) == ("__", "__")


@pytest.fixture
def shards(tmp_path: Path) -> list[str]:
    """Three shards of 3 samples; the second also holds meta files, a meta directory and an
    upper-case field."""
    paths = write_shards(tmp_path, 3, 3)
    members = [("__meta__", b"m"), ("__x__/0.txt", b"x"), *sample_members(["a", "b"])]
    members += [("b.TXT2", b"upper"), ("c.cls", b"7")]
    Path(paths[1]).write_bytes(make_tar(members))
    return paths


def opened(lib: Any, items: list[Any]) -> list[tuple[dict[str, Any], bytes]]:
    """What ``lib.url_opener(src, handler=...)`` yields, called webdataset's way: each dict
    without its stream, and the stream's bytes (the stream closed)."""
    result = []
    for shard in lib.url_opener(iter(items), handler=lib.reraise_exception):
        stream = shard.pop("stream")
        result.append((shard, stream.read()))
        stream.close()
    return result


def test_url_opener_called_webdatasets_way(shards: list[str]) -> None:
    """``url_opener(src, handler=...)`` (issue 27: a TypeError, "got multiple values for
    argument 'handler'"), with webdataset's dicts and streams, items as strings too."""
    items: list[Any] = [{"url": shards[0], "lang": "en"}, {"url": shards[1]}]
    ours = opened(tariterators, items)
    assert ours == opened(wdsref.tariterators, [dict(item) for item in items])
    assert ours[0] == (items[0], Path(shards[0]).read_bytes())
    assert "stream" not in items[0]  # the items are not changed (webdataset's are)
    assert opened(tariterators, shards[2:]) == [({"url": shards[2]}, Path(shards[2]).read_bytes())]


def test_the_top_level_names_read_a_source_or_make_the_stage(shards: list[str]) -> None:
    """``wds.url_opener(src, handler=...)`` is webdataset's function; ``wds.url_opener()``,
    ``wds.url_opener(handler)`` and the name passed uncalled are the stage."""
    assert wds.url_opener is tariterators.url_opener
    assert opened(wds, shards[:1]) == opened(tariterators, shards[:1])
    stages = [wds.url_opener(), wds.tar_file_expander(wds.ignore_and_continue)]
    stages.append(wds.group_by_keys(handler=wds.ignore_and_continue))
    assert all(isinstance(stage, Curried) for stage in stages)
    pipe = wds.DataPipeline(shards, wds.url_opener, wds.tar_file_expander, wds.group_by_keys)
    assert [type(stage).__name__ for stage in stages] == ["Curried"] * 3
    assert list(pipe) == list(tariterators.tarfile_samples(shards))
    assert type(pipe).__name__ == "SampleGrouper"


def test_url_opener_sends_open_errors_through_the_handler(tmp_path: Path) -> None:
    missing = [{"url": str(tmp_path / "missing.tar")}]
    for lib in (tariterators, wdsref.tariterators):
        assert list(lib.url_opener(iter(missing), handler=wds.ignore_and_continue)) == []
        with pytest.raises(FileNotFoundError):
            list(lib.url_opener(iter(missing)))


def expand(lib: Any, shards: list[str], **options: Any) -> list[Any]:
    opened = lib.url_opener(iter([{"url": url} for url in shards]))
    return list(lib.tar_file_expander(opened, **options))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"eof_value": None},
        {"select_files": lambda name: name.endswith(".cls")},
        {"rename_files": lambda name: name.replace("txt", "text")},
    ],
    ids=["default", "no-marker", "select", "rename"],
)
def test_tar_file_expander_yields_webdatasets_members(
    shards: list[str], options: dict[str, Any]
) -> None:
    ours = expand(tariterators, shards, **options)
    assert ours == quietly(lambda lib: expand(lib, shards, **options), wdsref.tariterators)
    assert ours[0] == {"fname": "000-00000.cls", "data": b"000-00000/cls", "__url__": shards[0]}
    assert ours.count({}) == (0 if "eof_value" in options else 3)


def test_tar_file_iterator_as_webdatasets(shards: list[str]) -> None:
    data = Path(shards[1]).read_bytes()
    ours = list(tariterators.tar_file_iterator(io.BytesIO(data)))
    assert ours == list(wdsref.tariterators.tar_file_iterator(io.BytesIO(data)))
    assert [m["fname"] for m in ours] == ["a.cls", "a.txt", "b.cls", "b.txt", "b.TXT2", "c.cls"]


def test_tar_file_expander_takes_wdspipes_opened_shards(shards: list[str]) -> None:
    """``(url, stream)`` pairs, as ``open_shards`` yields them, and streams with a local
    copy's path: members carry ``__local_path__``."""
    opened = wds.ShardList(shards).open_shards(local_path=True)
    members = [m for m in tariterators.tar_file_expander(opened) if m]
    theirs = quietly(lambda lib: expand(lib, shards), wdsref.tariterators)
    assert [m["fname"] for m in members] == [m["fname"] for m in theirs if m]
    assert {m["__local_path__"] for m in members} == set(shards)


def test_tar_file_expander_refuses_what_is_no_opened_shard_as_webdataset() -> None:
    for lib in (tariterators, wdsref.tariterators):
        with pytest.raises(AssertionError):
            list(lib.tar_file_expander(iter([{"url": "a.tar"}])))
    with pytest.raises(wds.ShardItemError, match="must be a dict"):
        list(tariterators.tar_file_expander(iter([{"url": "a.tar"}])))
    assert list(tariterators.tar_file_expander([b"x"], handler=wds.ignore_and_continue)) == []


def test_tar_file_expander_reports_a_failed_command_through_the_handler(
    shards: list[str],
) -> None:
    urls = [f"pipe:cat {shards[0]}; exit 3", shards[1]]
    with pytest.raises(wds.CommandError, match="status 3"):
        list(tariterators.tar_file_expander(tariterators.url_opener(urls)))
    survived = tariterators.tar_file_expander(
        tariterators.url_opener(urls), handler=wds.ignore_and_continue
    )
    # As webdataset's: the members read before the command's status are delivered.
    assert [m["__url__"] for m in survived if m] == [urls[0]] * 6 + [shards[1]] * 6


def group(lib: Any, shards: list[str], **options: Any) -> list[Any]:
    return list(lib.group_by_keys(iter(expand(lib, shards)), **options))


@pytest.mark.parametrize(
    "options",
    [{}, {"lcase": False}, {"suffixes": {"cls"}}, {"keys": lambda name: name.split(".", 1)}],
    ids=["default", "case", "suffixes", "keys"],
)
def test_group_by_keys_as_webdatasets(shards: list[str], options: dict[str, Any]) -> None:
    ours = group(tariterators, shards, **options)
    assert ours == quietly(lambda lib: group(lib, shards, **options), wdsref.tariterators)
    assert len(ours) == 9


def test_group_by_keys_sends_a_duplicate_through_the_handler() -> None:
    members = [{"fname": name, "data": b"x", "__url__": "u"} for name in ("a.x", "a.x", "b.x")]
    for lib in (tariterators, wdsref.tariterators):
        with pytest.raises(ValueError, match="duplicate"):
            list(lib.group_by_keys(iter(members)))
        kept = list(lib.group_by_keys(iter(members), handler=wds.ignore_and_continue))
        assert kept == [
            {"__key__": "a", "__url__": "u", "x": b"x"},
            {"__key__": "b", "__url__": "u", "x": b"x"},
        ]
    with pytest.raises(wds.DuplicateFieldError):
        list(tariterators.group_by_keys(iter(members)))


def group_by_keys_0_2(
    data: Iterator[dict[str, Any]], keys: Any = tariterators.base_plus_ext
) -> Iterator[dict[str, Any]]:
    """A "nothrow" grouper of programs written for webdataset 0.2.x, which had no end marker:
    it reads every member's "fname" (1.0.2's ``{}`` is a KeyError to it), and starts a new
    sample on a repeated field."""
    current: dict[str, Any] | None = None
    for filesample in data:
        fname, value = filesample["fname"], filesample["data"]
        prefix, suffix = keys(fname)
        if prefix is None:
            continue
        suffix = suffix.lower()
        if current is None or prefix != current["__key__"] or suffix in current:
            if tariterators.valid_sample(current):
                yield current
            current = {"__key__": prefix, "__url__": filesample["__url__"]}
        current[suffix] = value
    if tariterators.valid_sample(current):
        yield current


def test_groupers_of_both_generations_read_wdspipes_members(shards: list[str]) -> None:
    """A 0.2.x grouper, which fails on webdataset 1.0.2's end marker, and 1.0.2's own
    grouper, which ends samples at it, both read wdspipes' members (issue 27)."""
    expected = quietly(lambda lib: group(lib, shards), wdsref.tariterators)
    theirs = quietly(lambda lib: expand(lib, shards), wdsref.tariterators)
    with pytest.raises(KeyError, match="fname"):
        list(group_by_keys_0_2(iter(theirs)))
    assert list(group_by_keys_0_2(iter(expand(tariterators, shards)))) == expected
    assert list(wdsref.tariterators.group_by_keys(iter(expand(tariterators, shards)))) == expected


def tarfile_samples_nothrow(src: Iterator[Any], handler: Any = wds.warn_and_continue) -> Any:
    """A program's own reader, as programs write it from webdataset's functions."""
    streams = tariterators.url_opener(src, handler=handler)
    files = tariterators.tar_file_expander(streams, handler=handler)
    return group_by_keys_0_2(files)


def test_a_programs_reader_composes_with_wdspipes_stages(shards: list[str]) -> None:
    pipe = wds.DataPipeline(
        wds.SimpleShardList(shards),
        wds.split_by_worker,
        tarfile_samples_nothrow,
        wds.shuffle(10, seed=1),
        wds.decode(only="txt"),
        wds.to_tuple("__key__", "txt;cls"),
    )
    items = list(pipe)
    assert len(items) == 9 and items != sorted(items, key=str)
    assert sorted(map(str, items)) == sorted(map(str, list(pipe)))


def test_tarfile_samples_as_webdatasets(shards: list[str]) -> None:
    ours = list(tariterators.tarfile_samples(iter([{"url": url} for url in shards])))
    theirs = quietly(
        lambda lib: list(lib.tarfile_samples(iter([{"url": url} for url in shards]))),
        wdsref.tariterators,
    )
    assert ours == theirs


# --- filters --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "keys", "options"),
    [
        ({"jpg": 1, "png": 2}, "png;jpg", {}),
        ({"jpg": 1}, ["png", "jpg"], {}),
        ({"jpg": 1}, "png", {"missing_is_error": False, "default": 5}),
        ({}, "png", {"missing_is_error": False}),
    ],
)
def test_getfirst_as_webdatasets(sample: dict[str, Any], keys: Any, options: Any) -> None:
    assert filters.getfirst(sample, keys, **options) == wdsref.filters.getfirst(
        sample, keys, **options
    )


def test_getfirst_raises_as_webdatasets() -> None:
    for lib in (filters, wdsref.filters):
        with pytest.raises(ValueError, match=r"didn't find \['png', 'gif'\] in \['jpg'\]"):
            lib.getfirst({"jpg": 1}, "png;gif")


@pytest.mark.parametrize(("bufsize", "initial"), [(1000, 100), (10, 3), (5, 10), (1, 0)])
@pytest.mark.parametrize("source", ["rng", "seed"])
def test_shuffle_function_gives_webdatasets_order(bufsize: int, initial: int, source: str) -> None:
    """``_shuffle(src, bufsize, initial, rng)``: with the same generator, the same order as
    webdataset's, so a program's deterministic shard shuffle built on it agrees."""

    def order(lib: Any) -> list[int]:
        draw = {"rng": random.Random(5)} if source == "rng" else {"seed": 7}
        return list(lib._shuffle(iter(range(50)), bufsize, initial, **draw))

    ours = order(filters)
    assert ours == order(wdsref.filters)
    assert sorted(ours) == list(range(50)) and (ours != list(range(50)) or bufsize == 1)


def test_pick_as_webdatasets() -> None:
    ours, theirs = list(range(10)), list(range(10))
    picked = [filters.pick(ours, random.Random(3)) for _ in range(4)]
    assert picked == [wdsref.filters.pick(theirs, random.Random(3)) for _ in range(4)]
    assert ours == theirs


def scaled(src: Iterator[int], factor: int, offset: int = 0) -> Iterator[int]:
    return (x * factor + offset for x in src)


def test_pipelinefilter_stages_run_in_a_datapipeline_as_in_webdatasets() -> None:
    def run(lib: Any) -> list[int]:
        stage = lib.pipelinefilter(scaled)
        return list(lib.DataPipeline(IterableWrapper(range(4)), stage(10, offset=1)))

    assert run(wds) == run(wdsref) == [1, 11, 21, 31]
    assert filters.compose(str, len)(12345) == wdsref.filters.compose(str, len)(12345) == 5
    assert filters.identity(3) == utils.identity(3) == 3


# --- utils ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "environment",
    [{}, {"RANK": "2", "WORLD_SIZE": "4"}, {"WORKER": "1", "NUM_WORKERS": "3"}],
    ids=["none", "rank", "worker"],
)
def test_worker_info_and_seed_as_webdatasets(
    environment: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert utils.pytorch_worker_info() == wdsref.utils.pytorch_worker_info()
    assert utils.pytorch_worker_seed() == wdsref.utils.pytorch_worker_seed()


class EverySecond(wds.PipelineStage):
    """A program's stage: ``run(self, src)``."""

    def run(self, src: Iterator[int]) -> Iterator[int]:
        return (x for i, x in enumerate(src) if i % 2 == 0)


class Counting(wds.PipelineStage):
    """A program's source: ``run(self)``, each epoch."""

    def __init__(self) -> None:
        self.epoch = 0

    def run(self) -> Iterator[int]:
        self.epoch += 1
        return iter(range(self.epoch * 3))


def test_pipeline_stages_run_as_in_webdataset() -> None:
    class TheirEverySecond(wdsref.PipelineStage):
        run = EverySecond.run

    class TheirCounting(wdsref.PipelineStage):
        __init__ = Counting.__init__
        run = Counting.run

    ours = wds.DataPipeline(Counting(), EverySecond())
    theirs = wdsref.DataPipeline(TheirCounting(), TheirEverySecond())
    assert [list(ours) for _ in range(2)] == [list(theirs) for _ in range(2)] == [[0, 2], [0, 2, 4]]


# --- shardlists, handlers, gopen ------------------------------------------------------------


@pytest.mark.parametrize("spec", ["a.tar", "a-{0..3}.tar", "a-{00..02}.tar::b-{x,y}.tar"])
def test_expand_urls_as_webdatasets(spec: str) -> None:
    assert shardlists.expand_urls(spec) == wdsref.shardlists.expand_urls(spec)


@pytest.mark.parametrize("name", SAME_OBJECTS["handlers"])
def test_handlers_answer_as_webdatasets(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wdsref.handlers.time, "sleep", lambda seconds: None)
    ours, theirs = getattr(handlers, name), getattr(wdsref.handlers, name)
    error = ValueError("bad")
    if name == "reraise_exception":
        for handler in (ours, theirs):
            with pytest.raises(ValueError, match="bad"):
                handler(error)
        return
    warns = name.startswith("warn")
    with pytest.warns(UserWarning) if warns else contextlib.nullcontext():
        verdict = ours(error)
    with pytest.warns(UserWarning) if warns else contextlib.nullcontext():
        assert verdict == theirs(error)


def test_gopen_reads_and_writes_as_webdatasets_test_does(tmp_path: Path) -> None:
    """webdataset's own test of gopen, on both (issue 27: read streams had no ``with``)."""
    for lib, name in ((wds, "ours"), (wdsref, "theirs")):
        with lib.gopen(f"{tmp_path}/{name}1", "wb") as stream:
            stream.write(b"abc")
        with lib.gopen(f"{tmp_path}/{name}1", "rb") as stream:
            assert stream.read() == b"abc"
        with lib.gopen(f"pipe:cat > {tmp_path}/{name}2", "wb") as stream:
            stream.write(b"abc")
        with lib.gopen(f"pipe:cat {tmp_path}/{name}2", "rb") as stream:
            assert stream.read() == b"abc"
    with gopen_module.reader(f"{tmp_path}/ours1") as stream:
        assert stream.read() == b"abc"
    with pytest.raises(ValueError, match="mode must be 'rb' or 'wb'"):
        wds.gopen(f"{tmp_path}/ours1", "r")


def open_mine(url: str, mode: str = "rb", bufsize: int = 8192) -> Any:
    return open(url.removeprefix("mine:"), mode)  # the stream is the result


def test_a_scheme_added_to_gopen_schemes_reads_shards(
    shards: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As programs add one to webdataset's table (``lambda url, mode="rb", ...``)."""
    monkeypatch.setitem(gopen_module.gopen_schemes, "mine", open_mine)
    samples = list(wds.WebDataset([f"mine:{url}" for url in shards]))
    assert [s["__key__"] for s in samples] == [s["__key__"] for s in wds.WebDataset(shards)]
    with wds.gopen(f"mine:{shards[0]}") as stream:
        assert stream.read() == Path(shards[0]).read_bytes()


# --- autodecode -----------------------------------------------------------------------------

SAMPLE = {
    "__key__": "k",
    "__url__": b"u",
    "cls": b"3",
    "txt": b"hello",
    "json": b'{"a": [1, 2]}',
    "seg.txt": b"s",
    "unknown": b"?",
}


@pytest.mark.parametrize(
    "options",
    [{}, {"only": ["cls"]}, {"only": "cls txt"}, {"pre": [], "post": []}],
    ids=["default", "only-list", "only-string", "bare"],
)
def test_decoder_decodes_a_sample_as_webdatasets(options: dict[str, Any]) -> None:
    upper = autodecode.handle_extension("seg.txt", lambda data: data.upper())
    ours = autodecode.Decoder([upper], **options)(dict(SAMPLE))
    assert ours == wdsref.autodecode.Decoder([upper], **options)(dict(SAMPLE))
    assert ours["seg.txt"] == (b"s" if "only" in options else b"S") and ours["__url__"] == "u"


def test_decoder_handlers_as_webdatasets() -> None:
    import gzip

    packed = {"__key__": "k", "txt.gz": gzip.compress(b"zipped"), "cls": b"1", "x": 1}
    for options in ({"partial": True}, {}):
        ours = autodecode.Decoder([], **options)
        theirs = wdsref.autodecode.Decoder([], **options)
        if options:
            assert ours(dict(packed)) == theirs(dict(packed))
        else:
            with pytest.raises(autodecode.DecodingError):
                ours(dict(packed))
            with pytest.raises(wdsref.autodecode.DecodingError):
                theirs(dict(packed))
    assert autodecode.gzfilter(".txt.gz", gzip.compress(b"a")) == (".txt", b"a")
    assert autodecode.basichandlers(".cls", b"7") == wdsref.autodecode.basichandlers(".cls", b"7")


def test_image_handlers_as_webdatasets() -> None:
    import numpy as np
    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (4, 3), (10, 20, 30)).save(png, format="PNG")
    for spec in ("rgb8", "l"):
        ours = autodecode.imagehandler(spec)(".png", png.getvalue())
        theirs = wdsref.autodecode.imagehandler(spec)(".png", png.getvalue())
        np.testing.assert_array_equal(ours, theirs)
        assert autodecode.imagehandler(spec, ["jpg"])(".png", png.getvalue()) is None
    assert isinstance(autodecode.ImageHandler("rgb8"), wds.ImageDecoder)
