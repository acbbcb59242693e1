"""One save, pickle and restore test over every registered stage, as torchdata's nodes are each
run through one shared test: for each stage's example (tests/stage_examples.py), the state taken
at cut points across two epochs, pickled and loaded into a pipeline built afresh, gives the rest
of an uninterrupted run; a stage that cannot resume refuses with a ResumeError naming it. A new
stage is covered by adding its example; it is expected to resume exactly unless it is listed
here as refusing.

Also: the safe default (a stage that has not declared how it resumes is refused), torch's own
stages through their adapter table, and the shape of the state code (no import cycle; the
assembler knows no concrete stage)."""

from __future__ import annotations

import pickle
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from package_graph import PACKAGE, imports_of, package_modules
from shardgen import Shards
from stage_examples import EXAMPLES, comparable, registered_stages, samples
from torch.utils.data import IterDataPipe
from torch.utils.data.datapipes.iter import IterableWrapper
from torch.utils.data.graph import traverse_dps
from torch.utils.data.graph_settings import apply_random_seed, apply_sharding

import wdspipes as wds
from wdspipes.core.engine import chain_of, node_of, upstream_of
from wdspipes.core.protocol import Resumes, stage_name
from wdspipes.core.stage import Stage
from wdspipes.errors import ResumeError
from wdspipes.pipes import (
    Batcher,
    BufferShuffler,
    Interleaver,
    RandomInterleaver,
    SampleGrouper,
    ShardOpener,
    TarLoader,
    Unbatcher,
)
from wdspipes.pipes.datapipe import front_end
from wdspipes.pipes.torch_stages import TORCH_STAGES
from wdspipes.read.grouping import tar_samples

REFUSED = {"list_shards", "resample_shards", "open_shards", "load_tar", "claim_shards"}
"""Examples whose stage cannot resume at any cut: shard URLs, opened shards and bare tar members
have no reader that keeps their place; claimed shards are consumed."""

RESUMED_BETWEEN = {"unbatched": 4}
"""Examples whose stage resumes only between groups of this many items, and refuses inside."""


def seeded(pipe: IterDataPipe[Any], seed: int) -> IterDataPipe[Any]:
    """``pipe`` seeded as a loader seeds it as an epoch begins."""
    apply_random_seed(pipe, torch.Generator().manual_seed(seed))
    return pipe


SEED, OTHER_SEED = 1, 3
"""The loader's seed of the runs, and of the loader that restores a state (whose seed the
state overrides). A shuffle of four shards with them gives two orders."""


def uninterrupted(
    build: Callable[[], IterDataPipe[Any]], epochs: int, seed: int = SEED
) -> list[list[Any]]:
    pipe = seeded(build(), seed)
    return [[comparable(item) for item in pipe] for _ in range(epochs)]


Cut = tuple[int, bool]
"""Where a state is taken: after so many items, and whether the epoch's end was seen then."""


def cut_points(epoch: int, epochs: int) -> list[Cut]:
    """Before the first item, early, in the middle, around the end of an epoch (its last item
    taken, then its end seen), and in the next epoch."""
    cuts = {0, 1, 2, epoch // 2, epoch - 1, epoch}
    if epochs > 1:
        cuts |= {epoch + 1, epoch + epoch // 2}
    points = [(cut, False) for cut in sorted(cuts) if 0 <= cut < epoch * epochs]
    return [*points, (epoch, True)]


def head_and_state(
    build: Callable[[], IterDataPipe[Any]], cut: Cut
) -> tuple[list[list[Any]], int, dict[str, Any]]:
    """The items before ``cut`` by epoch (the last one begun), how many epochs were begun,
    and the pipeline's state then."""
    count, ended = cut
    pipe = seeded(build(), SEED)
    epochs: list[list[Any]] = []
    items: Iterator[Any] = iter(())
    while sum(map(len, epochs)) < count:
        item = next(items, _END)
        if item is _END:
            items = iter(pipe)  # the next epoch
            epochs.append([])
        else:
            epochs[-1].append(comparable(item))
    if ended:
        assert next(items, _END) is _END, "the cut is at the end of an epoch"
    return epochs, len(epochs), pipe.state_dict()


_END = object()


def resumed(
    build: Callable[[], IterDataPipe[Any]], cut: Cut, epochs: int
) -> tuple[list[list[Any]], dict[str, Any]]:
    """Stop at ``cut``, pickle the state as a checkpoint keeps it, load it into a
    pipeline built afresh (which a loader seeded otherwise), and go on to the end of
    ``epochs`` epochs."""
    head, begun, state = head_and_state(build, cut)
    state = pickle.loads(pickle.dumps(state))
    pipe = seeded(build(), OTHER_SEED)
    pipe.load_state_dict(state)
    rest = [[comparable(item) for item in pipe] for _ in range(epochs - max(begun, 1) + 1)]
    if begun:
        head[-1] += rest.pop(0)
    return head + rest, state


def assert_resumes_exactly(
    build: Callable[[], IterDataPipe[Any]],
    epochs: int = 2,
    refused: Callable[[int], str | None] = lambda count: None,
) -> None:
    """At every cut point, the resumed run is the uninterrupted one; where ``refused(cut)``
    names a stage, taking the state raises a ResumeError naming it instead."""
    expected = uninterrupted(build, epochs)
    assert expected[0], "an example must produce items"
    if epochs > 1:
        assert [len(epoch) for epoch in expected] == [len(expected[0])] * epochs
    for cut in cut_points(len(expected[0]), epochs):
        named = refused(cut[0])
        if named is not None:
            with pytest.raises(ResumeError, match=re.escape(named)):
                head_and_state(build, cut)
            continue
        got, state = resumed(build, cut, epochs)
        where = f"after {cut[0]} items" + (", the end of the epoch seen" if cut[1] else "")
        assert got == expected, f"cut {where}"
        assert state["stages"], "the state names each stage's part"


def refusal(name: str) -> Callable[[int], str | None]:
    label = stage_name(registered_stages()[name])
    if name in REFUSED:
        return lambda cut: label
    if name in RESUMED_BETWEEN:
        return lambda cut: label if cut % RESUMED_BETWEEN[name] else None
    return lambda cut: None


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_stage_resumes_exactly_or_refuses_by_name(name: str, stage_shards: Shards) -> None:
    assert_resumes_exactly(lambda: EXAMPLES[name](stage_shards.paths), refused=refusal(name))


ONE_TO_ONE = sorted(
    name for name, cls in registered_stages().items() if cls.resumes is Resumes.ITEM_BY_ITEM
)


@pytest.mark.parametrize("name", ONE_TO_ONE)
def test_a_one_to_one_stage_keeps_a_shuffle_buffer_after_it_exact(
    name: str, stage_shards: Shards
) -> None:
    """A stage that resumes item by item lets a buffer after it save where its samples live:
    a false declaration would resume the wrong samples here."""
    assert_resumes_exactly(lambda: EXAMPLES[name](stage_shards.paths).buffer_shuffle(4, initial=3))


def test_the_lists_of_refusing_stages_name_registered_stages() -> None:
    assert REFUSED | set(RESUMED_BETWEEN) <= set(EXAMPLES)


def torch_chain(sink: IterDataPipe[Any]) -> list[Any]:
    """The chain of stages as torch's graph traversal finds it (by pickling the stages), up to a
    stage that holds its sources' states (a mixer), which names the same sources."""
    chain = []
    graph = traverse_dps(sink)
    while graph:
        ((pipe, graph),) = graph.values()
        chain.append(pipe)
        if node_of(pipe).resumes is Resumes.AS_MIXER:
            assert {id(source) for source, _ in graph.values()} == {
                id(source) for source in node_of(pipe).upstream()
            }
            break
    return chain[::-1]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_walker_reaches_the_stages_torch_finds(name: str, stage_shards: Shards) -> None:
    """Each stage names what it reads (``upstream()``): the same DataPipes that torch's graph
    traversal, which the loaders use, finds in its attributes."""
    pipe = EXAMPLES[name](stage_shards.paths)
    assert chain_of(pipe) == torch_chain(pipe)


# --- the safe default ---------------------------------------------------------------------


class Twice(Stage[Any]):
    """Yields every item twice, and declares nothing about resuming: the state refuses it."""

    def open(self, source: Any, context: Any, part: Any = None) -> Iterator[Any]:
        for item in source:
            yield item
            yield item


class Keyed(Stage[Any]):
    """Each sample to its key: one item out per item in, declared."""

    resumes = Resumes.ITEM_BY_ITEM

    def open(self, source: Any, context: Any, part: Any = None) -> Iterator[Any]:
        for sample in source:
            yield sample["__key__"]


def test_an_undeclared_stage_before_a_buffer_is_refused_by_name(stage_shards: Shards) -> None:
    """Before, the default (each item one item in, nothing to save) took this stage at its
    word: the restored buffer read its samples again as if one came out per sample, and the
    run resumed to the wrong items without an error."""
    pipe = Twice(samples(stage_shards.paths)).buffer_shuffle(5, initial=5, seed=1)
    assert len(list(pipe)) == 2 * 12
    items = iter(pipe)
    for _ in range(7):
        next(items)
    with pytest.raises(ResumeError, match=r"^Twice has not declared how it resumes"):
        pipe.state_dict()


def test_an_undeclared_stage_at_the_end_is_refused_by_name(stage_shards: Shards) -> None:
    pipe = Twice(samples(stage_shards.paths))
    items = iter(pipe)
    next(items)
    with pytest.raises(ResumeError, match=r"^Twice has not declared how it resumes"):
        pipe.state_dict()


def test_an_undeclared_stage_before_the_reader_is_refused_by_name(stage_shards: Shards) -> None:
    pipe = Twice(wds.ShardList(stage_shards.paths)).open_shards().load_tar().group_samples()
    with pytest.raises(ResumeError, match=r"^Twice comes before the reader"):
        pipe.state_dict()


def test_a_declared_one_to_one_stage_resumes(stage_shards: Shards) -> None:
    assert_resumes_exactly(lambda: Keyed(samples(stage_shards.paths)).buffer_shuffle(5, initial=3))


def test_a_stage_that_counts_is_refused_before_the_reader(stage_shards: Shards) -> None:
    """A stage that goes on from a count cannot be run again from the start of the epoch."""
    pipe = wds.ShardList(stage_shards.paths).islice(0, 3).open_shards().load_tar().group_samples()
    with pytest.raises(ResumeError, match=re.escape("ItemSlicer (islice) comes before")):
        pipe.state_dict()


# --- torch's own stages -------------------------------------------------------------------


def key_of(sample: dict[str, Any]) -> Any:
    return sample["__key__"]


def even_shard(sample: dict[str, Any]) -> bool:
    return sample["__key__"][0] in "02"


def reader(shards: IterDataPipe[str]) -> IterDataPipe[Any]:
    return shards.open_shards().load_tar().group_samples()


def split_samples(urls: list[str]) -> IterDataPipe[Any]:
    """Samples split between two readers, then shuffled: a restored buffer's samples would be
    split again, by their new positions."""
    split = samples(urls).sharding_filter()
    apply_sharding(split, 2, 0)
    return split.buffer_shuffle(4, initial=3)


def refused_once_begun(named: str) -> Callable[[int], str | None]:
    """Refused once items have come out (a buffer found what is before it as its epoch began);
    before that, there is nothing to restore."""
    return lambda count: named if count else None


def resumes(count: int) -> str | None:
    return None


# An example pipeline of each of torch's stages that wdspipes restores, and the name its
# refusal gives at a cut after so many items (None: it resumes). One epoch each: torch's
# shuffle draws each epoch's seed from torch.
TORCH_EXAMPLES: dict[
    str, tuple[Callable[[list[str]], IterDataPipe[Any]], Callable[[int], str | None]]
] = {
    "IterableWrapper": (lambda urls: reader(IterableWrapper(urls)), resumes),
    "map": (lambda urls: samples(urls).map(key_of).buffer_shuffle(4, initial=3), resumes),
    "filter": (
        lambda urls: samples(urls).filter(even_shard).buffer_shuffle(4, initial=3),
        resumes,
    ),
    "sharding_filter": (lambda urls: reader(wds.ShardList(urls).sharding_filter()), resumes),
    "sharding_filter after the reader": (
        split_samples,
        refused_once_begun("ShardingFilterIterDataPipe (sharding_filter) between it and"),
    ),
    "shuffle before the reader": (
        lambda urls: reader(wds.ShardList(urls).shuffle().sharding_filter()),
        resumes,
    ),
    "shuffle after the reader": (
        lambda urls: samples(urls).shuffle().to_tuple("__key__"),
        refused_once_begun("ShufflerIterDataPipe (shuffle) cannot save the samples in its buffer"),
    ),
    # webdataset's calls of torch's names (wdspipes.webdataset.torch_names): wdspipes' stages
    "shuffle(n), webdataset's": (lambda urls: samples(urls).shuffle(5, initial=3), resumes),
    "shuffle(n) before the reader": (
        lambda urls: reader(wds.ShardList(urls).shuffle(4).sharding_filter()),
        resumes,
    ),
    "map(f, handler=...), webdataset's": (
        lambda urls: samples(urls).map(key_of, handler=wds.reraise_exception).shuffle(4),
        resumes,
    ),
    "map(f) on samples, watched": (
        lambda urls: samples(urls).map(key_of).buffer_shuffle(4),
        resumes,
    ),
}


@pytest.mark.parametrize("name", sorted(TORCH_EXAMPLES))
def test_torch_stage_resumes_exactly_or_refuses_by_name(name: str, stage_shards: Shards) -> None:
    build, refused = TORCH_EXAMPLES[name]
    assert_resumes_exactly(lambda: build(stage_shards.paths), epochs=1, refused=refused)
    if name == "shuffle before the reader":  # the state, not the loader's seed, decides
        assert uninterrupted(lambda: build(stage_shards.paths), 1, OTHER_SEED) != uninterrupted(
            lambda: build(stage_shards.paths), 1
        )
    pipe = build(stage_shards.paths)
    assert chain_of(pipe) == torch_chain(pipe)


def test_every_torch_stage_of_the_table_has_an_example(stage_shards: Shards) -> None:
    pipes = [
        pipe
        for build, _ in TORCH_EXAMPLES.values()
        for pipe in torch_chain(build(stage_shards.paths))
    ]
    stages = {type(pipe) for pipe in pipes}
    missing = [cls.__name__ for cls in TORCH_STAGES if not any(issubclass(s, cls) for s in stages)]
    assert not missing, f"add an example to TORCH_EXAMPLES for {missing}"


def test_another_torch_stage_is_refused_by_name(stage_shards: Shards) -> None:
    pipe = samples(stage_shards.paths).batch(2).buffer_shuffle(3)
    with pytest.raises(ResumeError, match=re.escape("BatcherIterDataPipe (batch) cannot save")):
        pipe.state_dict()


# --- the shape of the state code -----------------------------------------------------------


def test_the_package_has_no_import_cycle() -> None:
    """Function-level imports count: a module is ready only when all it imports is."""
    modules = package_modules()
    graph = {name: {m for m in imports_of(path) if m in modules} for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError(f"import cycle: {' -> '.join([*path[path.index(name) :], name])}")
        if name not in done:
            for imported in sorted(graph[name]):
                visit(imported, [*path, name])
            done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_engine_and_the_model_of_a_stage_import_no_stage() -> None:
    """The engine opens epochs and assembles the state by calling what stages declare: the
    core imports no stage module (nor anything of the package but its errors)."""
    modules = sorted(path.stem for path in (PACKAGE / "core").glob("*.py"))
    allowed = {"wdspipes.errors", "wdspipes.redaction", "wdspipes.core"}
    allowed |= {f"wdspipes.core.{module}" for module in modules}
    for module in modules:
        imported = imports_of(PACKAGE / "core" / f"{module}.py")
        assert imported <= allowed, f"wdspipes.core.{module} imports {sorted(imported - allowed)}"


# --- the core classes, without torch's DataPipes -------------------------------------------


def read_chain(paths: list[str], core: bool) -> Any:
    """Shards shuffled, opened, read and grouped, samples shuffled: the core classes (plain
    iterables, no DataPipe in the chain) or their DataPipe front ends."""
    from wdspipes.read import grouping, opener, shards, tar
    from wdspipes.samples import shuffle

    if core:
        lister, shard_opener, loader, grouper, shuffler = (
            shards.ShardList,
            opener.ShardOpener,
            tar.TarLoader,
            grouping.SampleGrouper,
            shuffle.BufferShuffler,
        )
    else:
        lister, shard_opener, loader, grouper, shuffler = (
            wds.ShardList,
            ShardOpener,
            TarLoader,
            SampleGrouper,
            BufferShuffler,
        )
    urls = shuffler(lister(paths), bufsize=4, seed=5)
    samples = grouper(loader(shard_opener(urls)))
    return shuffler(samples, bufsize=5, initial=3, seed=6)


def mixed_batches(paths: list[str], core: bool) -> Any:
    """Two read chains mixed at random, in batches of 3 (collated)."""
    from wdspipes.samples import batch, mix

    if core:
        mixer, batcher = mix.RandomInterleaver, batch.Batcher
    else:
        mixer, batcher = RandomInterleaver, Batcher
    first, second = read_chain(paths[:2], core), read_chain(paths[2:], core)
    return batcher(mixer(first, second, probs=[1, 2], longest=True, seed=7), 3)


def interleaved_rows(paths: list[str], core: bool) -> Any:
    """Two read chains in turn, batched by 3 as lists and unbatched again."""
    from wdspipes.samples import batch, mix

    if core:
        mixer, batcher, unbatcher = mix.Interleaver, batch.Batcher, batch.Unbatcher
    else:
        mixer, batcher, unbatcher = Interleaver, Batcher, Unbatcher
    mixed = mixer(read_chain(paths[:2], core), read_chain(paths[2:], core), longest=True)
    return unbatcher(batcher(mixed, 3, collation_fn=None))


@pytest.mark.parametrize(
    ("chain", "cuts"),
    [
        pytest.param(read_chain, (0, 1, 5, 11), id="read"),
        pytest.param(mixed_batches, (0, 1, 2, 3), id="interleave_randomly-batched"),
        pytest.param(interleaved_rows, (0, 3, 6, 9), id="interleave-batched-unbatched"),
    ],
)
def test_a_core_chain_resumes_exactly_as_its_datapipe_twin(
    stage_shards: Shards, chain: Callable[[list[str], bool], Any], cuts: tuple[int, ...]
) -> None:
    core = chain(stage_shards.paths, True)
    assert not any(isinstance(stage, IterDataPipe) for stage in [core, *upstream_of(core)])
    whole = [comparable(sample) for sample in core]
    assert whole == [comparable(sample) for sample in chain(stage_shards.paths, False)]
    assert len(whole) > cuts[-1]
    for cut in cuts:
        states = []
        for is_core in (True, False):
            pipe = chain(stage_shards.paths, is_core)
            items = iter(pipe)
            head = [comparable(next(items)) for _ in range(cut)]
            states.append(pickle.loads(pickle.dumps(pipe.state_dict())))
            assert head == whole[:cut]
        assert states[0] == states[1], "the same state, the same keys"
        for is_core, state in ((True, states[1]), (False, states[0])):  # each takes the other's
            again = chain(stage_shards.paths, is_core)
            again.load_state_dict(state)
            assert whole[:cut] + [comparable(sample) for sample in again] == whole, cut


def test_a_datapipe_front_end_adds_nothing_per_item_and_iterates_as_its_core(
    stage_shards: Shards,
) -> None:
    """A front end's ``__iter__`` is set after torch's metaclass has made the class, so torch
    does not wrap it with its per-item bookkeeping: a second iterator does not invalidate the
    first (torch's check raised RuntimeError), each reads on its own."""
    pipe = wds.ShardList(stage_shards.paths).open_shards().load_tar().group_samples()
    assert not hasattr(type(pipe).__iter__, "__wrapped__")  # torch's hook wraps with functools
    whole = [comparable(sample) for sample in tar_samples(stage_shards.paths)]
    first = iter(pipe)
    head = comparable(next(first))
    assert [comparable(sample) for sample in pipe] == whole
    assert [head, *map(comparable, first)] == whole
    assert pipe._number_of_samples_yielded == 0  # torch's count, kept by its wrapper, not kept


def as_core(pipe: Any) -> Any:
    """The same pipeline made of the core classes: each DataPipe front end's object in the
    graph (the sources of a mixer too) given its core class, torch's ``IterableWrapper`` at a
    head replaced by the list it wraps; None where a stage has no core class (torch's own)."""
    for stage in [pipe, *upstream_of(pipe)]:
        if isinstance(stage, IterableWrapper):
            continue  # replaced in the stage that reads it
        core = type(stage).__mro__[1]
        if front_end(core) is not type(stage):
            return None
        stage.__class__ = core
        source = getattr(stage, "source_datapipe", None)
        if isinstance(source, IterableWrapper):
            stage.source_datapipe = list(source.iterable)
    return pipe


def seeded_core(pipe: Any, seed: int) -> Any:
    """``pipe``, a graph of core classes, seeded as a loader seeds a DataPipe graph: each
    stage with ``set_seed`` its own seed, drawn from ``seed``."""
    rng = random.Random(seed)
    for stage in [pipe, *upstream_of(pipe)]:
        if callable(getattr(stage, "set_seed", None)):
            stage.set_seed(rng.getrandbits(62))
    return pipe


CORE_STAGES = sorted(
    name for name, cls in registered_stages().items() if not issubclass(cls, IterDataPipe)
)
"""The registered stages whose class is a core class (its DataPipe a front end over it)."""


@pytest.mark.parametrize("name", CORE_STAGES)
def test_a_core_stage_resumes_exactly_or_refuses_by_name_without_datapipes(
    name: str, stage_shards: Shards, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared example of each stage with a core class, made of core classes only (no
    DataPipe in the chain): it resumes exactly, or is refused by name, as its DataPipes are."""
    core = as_core(EXAMPLES[name](stage_shards.paths))
    assert core is not None
    assert not any(isinstance(s, IterDataPipe) for s in [core, *upstream_of(core)])
    monkeypatch.setitem(globals(), "seeded", seeded_core)
    label = stage_name(registered_stages()[name])
    refused = refusal(name)
    assert_resumes_exactly(
        lambda: as_core(EXAMPLES[name](stage_shards.paths)),
        refused=lambda cut: None if refused(cut) is None else label,
    )


def test_the_read_path_and_the_sample_stages_have_core_classes() -> None:
    assert set(CORE_STAGES) >= {
        *("list_shards", "resample_shards", "open_shards", "load_tar", "group_samples"),
        *("load_cbor", "load_msgpack", "buffer_shuffle", "decode", "to_tuple", "map_tuple"),
        *("map_dict", "rename", "select", "map_samples", "islice", "with_epoch"),
        *("with_length", "repeat_epochs", "batched", "unbatched", "claim_shards"),
        *("interleave", "interleave_randomly"),
    }


class ShardsSeen(Stage[Any]):
    """A stage of one's own between ``open_shards`` and a reader: it notes each opened shard in
    ``seen`` and passes it on; restored, it runs its epoch again from the start with the
    opener, which the reader after it still tells what to skip."""

    resumes = Resumes.FROM_START

    def __init__(self, source_datapipe: Any, seen: list[str]) -> None:
        super().__init__(source_datapipe)
        self.seen = seen

    def open(self, source: Any, context: Any, part: Any = None) -> Iterator[Any]:
        for shard in source:
            self.seen.append(shard.url)
            yield shard


@pytest.mark.parametrize("reader", ["group_samples", "load_cbor"])
def test_a_reader_resumes_through_a_stage_of_ones_own_after_the_opener(
    stage_shards: Shards, reader: str
) -> None:
    from wdspipes.read import grouping, opener, shards, stream_shards, tar

    paths = stage_shards.paths
    if reader == "load_cbor":
        paths = [path.removesuffix(".tar") + ".cbor" for path in paths]

    seen: list[str] = []

    def build() -> Any:
        seen.clear()
        opened = ShardsSeen(opener.ShardOpener(shards.ShardList(paths)), seen)
        if reader == "load_cbor":
            return stream_shards.CborLoader(opened)
        return grouping.SampleGrouper(tar.TarLoader(opened))

    whole = [comparable(sample) for sample in build()]
    for cut in (0, 4, len(whole) - 1):
        pipe = build()
        items = iter(pipe)
        head = [comparable(next(items)) for _ in range(cut)]
        state = pickle.loads(pickle.dumps(pipe.state_dict()))
        again = build()
        again.load_state_dict(state)
        assert head + [comparable(sample) for sample in again] == whole, cut
        assert seen == paths[max(cut - 1, 0) // 3 :]  # the shards skipped


def test_a_state_whose_parts_come_in_another_order_loads(stage_shards: Shards) -> None:
    """A loader may keep the parts in another order (StatefulDataLoader's increments put those
    that changed last): each is the stage's at its position, whatever the order."""

    def build() -> IterDataPipe[Any]:
        return EXAMPLES["with_epoch"](stage_shards.paths)

    (whole,) = uninterrupted(build, 1)
    (head,), _, state = head_and_state(build, (7, False))
    state["stages"] = dict(reversed(state["stages"].items()))
    again = seeded(build(), OTHER_SEED)
    again.load_state_dict(state)
    assert head + [comparable(sample) for sample in again] == whole
