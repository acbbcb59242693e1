"""Shard items (wdspipes/io/items.py): URL strings and webdataset's ``{"url": ...}`` dicts are
taken alike by every stage that takes shard items, a dict's other keys reach the samples of its
shard, and an item that names no shard is a ShardItemError through the handler. Where webdataset
1.0.2 defines the outcome (the URL, the stream dict its opener yields, ``local_path`` becoming
``__local_path__``, samples of local shards under ``WebDataset``), both run on the same shards."""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shardgen import Shards
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.graph_settings import apply_sharding

import wdspipes as wds
from wdspipes.errors import ShardItemError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import webdataset as wdsref

Sample = dict[str, Any]


def items_of(paths: list[str]) -> list[dict[str, Any]]:
    """Dict items with fields of several types, one of them webdataset's ``local_path``."""
    return [
        {"url": path, "lang": "en", "weight": index / 2, "local_path": path}
        for index, path in enumerate(paths)
    ]


def wrapped(items: list[Any]) -> IterableWrapper:
    return IterableWrapper(items, deepcopy=False)


def reference(items: list[dict[str, Any]]) -> list[Sample]:
    """webdataset's samples of shard ``items`` (its opener puts each stream into the item it
    was given: closed here)."""
    given = [dict(item) for item in items]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(wdsref.DataPipeline(lambda: iter(given), wdsref.tarfile_to_samples()))
    for item in given:
        item["stream"].close()
    return samples


# --- what webdataset does, and wdspipes likewise -----------------------------------------------


def test_dict_items_read_as_webdataset_reads_them(small_shards: Shards) -> None:
    """webdataset keeps ``local_path`` (as ``__local_path__``) and drops the other keys;
    wdspipes gives the same samples with each other key ``k`` as ``__k__``."""
    theirs = reference(items_of(small_shards.paths))
    ours = list(wds.DataPipeline(wrapped(items_of(small_shards.paths)), wds.tarfile_to_samples()))
    assert len(ours) == 20
    for mine, ref, index in zip(ours, theirs, [i // 5 for i in range(20)], strict=True):
        assert mine.pop("__lang__") == "en" and mine.pop("__weight__") == index / 2
        assert mine == ref
        assert ref["__local_path__"] == small_shards.paths[index]


def test_the_opener_yields_webdatasets_stream_dicts(small_shards: Shards) -> None:
    items = items_of(small_shards.paths[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = list(wdsref.tariterators.url_opener([dict(item) for item in items]))
        their_keys = [sorted(opened) for opened in theirs]
        for opened in theirs:
            opened["stream"].close()
    ours = list(wrapped(items).open_shards())  # each stream is closed as the next is taken
    assert [sorted(opened) for opened in ours] == their_keys
    assert [opened["url"] for opened in ours] == small_shards.paths[:2]
    assert items == items_of(small_shards.paths[:2]), "the items themselves are not changed"


def test_webdataset_dataset_sets_local_path_on_local_shards(small_shards: Shards) -> None:
    """webdataset's WebDataset gives samples of local shards ``__local_path__``; its
    tarfile_to_samples does not. wdspipes' WebDataset and tarfile_to_samples do the same."""
    urls = [small_shards.paths[0], Path(small_shards.paths[1]).as_uri()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = list(wdsref.WebDataset(urls, shardshuffle=False))
        their_plain = list(
            wdsref.DataPipeline(wdsref.SimpleShardList(urls), wdsref.tarfile_to_samples())
        )
        gc.collect()
    ours = list(wds.WebDataset(urls))
    assert ours == theirs
    assert {s["__local_path__"] for s in ours} == set(small_shards.paths[:2])
    assert list(wds.DataPipeline(urls, wds.tarfile_to_samples())) == their_plain
    assert all("__local_path__" not in s for s in their_plain)


@pytest.mark.parametrize("item", [{"path": "a.tar"}, b"x.tar", 7])
def test_an_item_that_names_no_shard_is_an_assertion_error_as_in_webdataset(item: Any) -> None:
    with warnings.catch_warnings(), pytest.raises(AssertionError):
        warnings.simplefilter("ignore")
        list(wdsref.tariterators.url_opener([item]))
    with pytest.raises(
        ShardItemError, match="a shard item must be a URL string or a dict"
    ) as caught:
        list(wrapped([item]).open_shards())
    assert isinstance(caught.value, AssertionError) and repr(item)[:20] in str(caught.value)


# --- items through every stage that takes them -------------------------------------------------


def keys(samples: Any) -> list[str]:
    return [sample["__key__"] for sample in samples]


def test_a_bad_item_goes_through_the_handler(small_shards: Shards) -> None:
    items = [small_shards.paths[0], {"path": "lost.tar"}, {"url": small_shards.paths[1]}]
    pipe = wds.DataPipeline(wrapped(items), wds.tarfile_to_samples(handler=wds.warn_and_continue))
    with pytest.warns(wds.DataWarning, match=r"got a dict without \"url\": \{'path': 'lost.tar'\}"):
        assert len(keys(pipe)) == 10
    stopped = wds.DataPipeline(wrapped(items), wds.tarfile_to_samples(handler=wds.ignore_and_stop))
    assert len(keys(stopped)) == 5


@pytest.mark.parametrize("key", ["key", "__key__", "__url__", 5])
def test_a_field_that_would_replace_the_sample_key_or_url_is_refused(
    small_shards: Shards, key: Any
) -> None:
    items = [{"url": small_shards.paths[0], key: "x"}, small_shards.paths[1]]
    with pytest.raises(ShardItemError, match="which its samples cannot carry"):
        list(wds.WebDataset(items))
    pipe = wds.WebDataset(items, handler=wds.ignore_and_continue)
    assert keys(pipe) == keys(wds.WebDataset(small_shards.paths[1]))


def test_a_url_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ShardItemError, match='a dict whose "url" is a int'):
        list(wrapped([{"url": 3}]).open_shards())


def test_a_key_written_as_a_field_stays_as_it_is(small_shards: Shards) -> None:
    (sample, *_) = wds.WebDataset([{"url": small_shards.paths[0], "__source__": "a"}])
    assert sample["__source__"] == "a" and "____source____" not in sample


def test_split_resample_shuffle_and_list_take_dict_items(small_shards: Shards) -> None:
    items = [{"url": path, "n": index} for index, path in enumerate(small_shards.paths)]
    split = wds.ShardList(items).sharding_filter()
    apply_sharding(split, 2, 1)
    assert [s["__n__"] for s in wds.DataPipeline(split, wds.tarfile_to_samples())][::5] == [1, 3]
    drawn = wds.ResampledShards(items, nshards=6, seed=1)
    read = list(wds.DataPipeline(drawn, wds.tarfile_to_samples()))
    assert len(read) == 30 and all(s["__url__"] == small_shards.paths[s["__n__"]] for s in read)
    shuffled = wds.WebDataset(items, shardshuffle=True, seed=2)
    assert sorted(s["__n__"] for s in shuffled) == sorted(i // 5 for i in range(20))
    spec = f"{os.path.dirname(small_shards.paths[0])}/shard-{{000..001}}.tar"
    listed = wrapped([{"url": spec, "n": 9}]).list_shards()
    assert [s["__n__"] for s in wds.DataPipeline(listed, wds.tarfile_to_samples())] == [9] * 10


def test_a_stream_dict_of_a_custom_opener_reaches_load_tar(small_shards: Shards) -> None:
    """A stage written for webdataset's tar_file_expander yields ``{"url", "stream", ...}``."""

    def opener(items: Iterator[str]) -> Iterator[dict[str, Any]]:
        for url in items:
            with open(url, "rb") as stream:
                yield {"url": url, "stream": stream, "origin": "custom"}

    pipe = wds.DataPipeline(
        small_shards.paths, opener, wds.tar_file_expander(), wds.group_by_keys()
    )
    samples = list(pipe)
    assert len(samples) == 20 and {s["__origin__"] for s in samples} == {"custom"}
    assert keys(samples) == keys(wds.WebDataset(small_shards.paths))
    no_stream = wds.DataPipeline(wrapped([{"url": "a.tar"}]), wds.tar_file_expander())
    with pytest.raises(ShardItemError, match=r"got dict \{'url': 'a.tar'\}"):
        list(no_stream)


def test_stream_shards_carry_the_fields_too(tmp_path: Path) -> None:
    with wds.MsgpackWriter(tmp_path / "a.msgpack") as sink:
        sink.write({"__key__": "a", "cls": 1})
    url = f"pipe:cat {tmp_path / 'a.msgpack'}"
    opened = wrapped([{"url": url, "lang": "fr"}]).open_shards(commands="any")
    (sample,) = opened.load_msgpack()
    assert sample == {"__key__": "a", "cls": 1, "__url__": url, "__lang__": "fr"}


def test_cached_dict_items_carry_fields_and_the_cache_file(
    small_shards: Shards, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    items = [{"url": f"pipe:cat {path}", "lang": "de"} for path in small_shards.paths[:2]]
    for _ in range(2):  # fetched, then read from the cache
        samples = list(wds.WebDataset(items, cache_dir=cache, commands="any"))
        assert {s["__lang__"] for s in samples} == {"de"} and len(samples) == 10
        assert {Path(s["__local_path__"]).parent for s in samples} == {cache}
