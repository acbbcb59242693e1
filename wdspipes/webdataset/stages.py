"""The curried names of ``DataPipeline(...)``: webdataset's vocabulary for wdspipes' stages.

A curried name returns a :class:`~wdspipes.core.curried.Curried`, a stage waiting for its
upstream, which ``DataPipeline`` builds on the stage before it; passed uncalled, a name means
"with its defaults".

Where webdataset's name is a stage's functional name, with the same arguments (``decode``,
``to_tuple``, ``map_tuple``, ``map_dict``, ``rename``, ``select``, ``batched``, ``unbatched``,
``with_epoch``, ``with_length``; and wdspipes' own ``prefetch_items``), the curried name is
made from the one table of stages (:class:`CurriedName`): ``decode("rgb8")`` is
``Curried(SampleDecoder, "rgb8")``, and the name has the stage's signature (without its
source) and docstring. The names webdataset gives otherwise are written here: ``shuffle``
and ``detshuffle`` (``buffer_shuffle`` in webdataset's signatures), ``map``
(``map_samples``), ``slice`` (``islice``), ``repeat`` (``repeat_epochs``),
``cbors_to_samples`` and ``msgpack_to_samples`` (the opener and a stream loader);
``url_opener``, ``tar_file_expander``, ``group_by_keys`` and ``tarfile_to_samples``
are in :mod:`~wdspipes.webdataset.tariterators`.

>>> from torch.utils.data.datapipes.iter import IterableWrapper
>>> from wdspipes.pipeline import DataPipeline
>>> samples = IterableWrapper([{"__key__": "a", "cls": b"1", "txt": b"hi"}])
>>> list(DataPipeline(samples, decode(), to_tuple("cls", "txt")))
[(1, 'hi')]
>>> decode("rgb8", partial=True), decode
(SampleDecoder('rgb8', partial=True), <curried name decode: SampleDecoder>)
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterable
from typing import Any

import wdspipes.pipes  # noqa: F401  (every stage registered: the whole table)
from wdspipes.core.curried import Curried, stage_factory
from wdspipes.core.protocol import functional_names
from wdspipes.errors import Handler, reraise_exception
from wdspipes.read.opener import ShardOpener
from wdspipes.read.stream_shards import CborLoader, MsgpackLoader
from wdspipes.samples.epochs import EpochRepeater
from wdspipes.samples.fields import ItemSlicer, SampleMapper
from wdspipes.samples.shuffle import BufferShuffler, SharedEpoch, seed_from

__all__ = [
    "CurriedName",
    "batched",
    "cbors_to_samples",
    "decode",
    "detshuffle",
    "map",
    "map_dict",
    "map_tuple",
    "msgpack_to_samples",
    "prefetch_items",
    "rename",
    "repeat",
    "select",
    "shuffle",
    "slice",
    "to_tuple",
    "unbatched",
    "with_epoch",
    "with_length",
]


class CurriedName:
    """The curried name of the stage registered under ``name`` in the table (see
    :func:`~wdspipes.core.protocol.register`): ``name(*args, **kwargs)`` is
    ``Curried(stage, *args, **kwargs)``, its arguments checked against the stage's as it is
    called. It has the stage's signature without its source (``inspect.signature``) and the
    stage's docstring.

    >>> batched = CurriedName("batched")
    >>> batched(4)
    Batcher(4)
    >>> inspect.signature(batched)  # doctest: +ELLIPSIS
    <Signature (batchsize: 'int', collation_fn: 'Collate | None' = ..., partial: 'bool' = True)...>
    >>> batched(4, size=2)
    Traceback (most recent call last):
    ...
    TypeError: batched(): got an unexpected keyword argument 'size'

    Raises:
        KeyError: no stage is registered under ``name``.
    """

    _wds_stage_factory = True  # DataPipeline calls it for the user when it is passed uncalled

    def __init__(self, name: str) -> None:
        stage = functional_names()[name]
        # the constructor's (a stage's __new__ takes anything): self, the source, the arguments
        init = inspect.signature(stage.__init__)  # type: ignore[misc]
        _self, _source, *arguments = init.parameters.values()
        self.stage = stage
        self.__name__ = self.__qualname__ = name
        self.__doc__ = stage.__doc__
        self.__signature__ = inspect.Signature(arguments, return_annotation=Curried.__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Curried:
        try:
            self.__signature__.bind(*args, **kwargs)
        except TypeError as exn:
            raise TypeError(f"{self.__name__}(): {exn}") from None
        return Curried(self.stage, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<curried name {self.__name__}: {self.stage.__name__}>"

    def __reduce__(self) -> tuple[type[CurriedName], tuple[str]]:
        return CurriedName, (self.__name__,)


# --- made from the table: webdataset's name is the stage's functional name --------------------

decode = CurriedName("decode")
"""``decode(*handlers, only=None, partial=False, handler=..., trusted=False, seed=None, ...)``:
the decoder, :class:`~wdspipes.samples.decoders.decoder.SampleDecoder`."""

to_tuple = CurriedName("to_tuple")
"""``to_tuple(*fields, handler=..., missing_is_error=True, none_is_error=None)``:
:class:`~wdspipes.samples.fields.TupleMaker`."""

map_tuple = CurriedName("map_tuple")
"""``map_tuple(*fns, handler=...)``: :class:`~wdspipes.samples.fields.TupleMapper`."""

map_dict = CurriedName("map_dict")
"""``map_dict(handler=..., **fns)``: :class:`~wdspipes.samples.fields.FieldMapper`."""

rename = CurriedName("rename")
"""``rename(handler=..., keep=True, **renames)``: :class:`~wdspipes.samples.fields.Renamer`."""

select = CurriedName("select")
"""``select(predicate)``: :class:`~wdspipes.samples.fields.SampleSelector`."""

batched = CurriedName("batched")
"""``batched(batchsize, collation_fn=collate, partial=True)``:
:class:`~wdspipes.samples.batch.Batcher`."""

unbatched = CurriedName("unbatched")
"""``unbatched()``: :class:`~wdspipes.samples.batch.Unbatcher`."""

with_epoch = CurriedName("with_epoch")
"""``with_epoch(nitems)``: :class:`~wdspipes.samples.epochs.EpochLimiter`."""

with_length = CurriedName("with_length")
"""``with_length(length)``: :class:`~wdspipes.samples.epochs.LengthSetter`."""

prefetch_items = CurriedName("prefetch_items")
"""``prefetch_items(n)``: :class:`~wdspipes.samples.prefetch.ItemPrefetcher` (wdspipes' own:
webdataset has no such stage)."""


# --- written: webdataset names the stage otherwise, or takes other arguments ----------------


@stage_factory
def shuffle(
    bufsize: int = 1000,
    initial: int = 100,
    rng: random.Random | int | None = None,
    seed: int | None = None,
    handler: Any = None,  # taken and not used, as in webdataset
) -> Curried:
    """webdataset's ``shuffle``: ``buffer_shuffle(bufsize, initial, seed)``, the seed drawn
    once from a generator ``rng`` if one is given (see
    :func:`~wdspipes.samples.shuffle.seed_from`): the stage draws from its seed and the
    epoch, so that its state can be saved.

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> a = shuffle(5, rng=random.Random(7))(IterableWrapper(range(10)))
    >>> b = shuffle(5, rng=random.Random(7))(IterableWrapper(range(10)))
    >>> list(a) == list(b), sorted(a) == list(range(10))
    (True, True)
    """
    return Curried(BufferShuffler, bufsize=bufsize, initial=initial, seed=seed_from(rng, seed))


@stage_factory
def detshuffle(
    bufsize: int = 1000,
    initial: int = 100,
    seed: int = 0,
    epoch: int | SharedEpoch = -1,
) -> Curried:
    """webdataset's ``detshuffle``: ``buffer_shuffle(bufsize, initial, seed)`` whose first
    epoch is ``epoch + 1`` (webdataset counts up before each epoch), or whose epoch is read
    from a counter shared with the program (webdataset's ``SharedEpoch``: see
    :class:`~wdspipes.samples.shuffle.SharedEpoch`).

    >>> from torch.utils.data.datapipes.iter import IterableWrapper
    >>> first = detshuffle(5, seed=1, epoch=2)(IterableWrapper(range(10)))
    >>> again = IterableWrapper(range(10)).buffer_shuffle(5, seed=1)
    >>> again.set_epoch(3)
    >>> list(first) == list(again)  # detshuffle(epoch=2) begins with epoch 3
    True
    """
    first = epoch + 1 if isinstance(epoch, int) else epoch
    return Curried(BufferShuffler, bufsize=bufsize, initial=initial, seed=seed, epoch=first)


@stage_factory
def map(
    fn: Callable[[Any], Any], handler: Handler = reraise_exception, threads: int = 0
) -> Curried:
    """webdataset's ``map``: ``map_samples(fn, handler=handler, threads=threads)``
    (:class:`~wdspipes.samples.fields.SampleMapper`): a sample ``fn`` returns None for is
    dropped, and one without the sample's ``__key__`` gets it back; ``threads`` calls ``fn``
    on that many samples at once (see :mod:`wdspipes.samples.threads`).

    >>> map(len, threads=2)
    SampleMapper(<built-in function len>, handler=<function reraise_exception at ...>, threads=2)
    """
    options = {"threads": threads} if threads else {}
    return Curried(SampleMapper, fn, handler=handler, **options)


@stage_factory
def slice(*args: int | None) -> Curried:
    """webdataset's ``slice(stop)`` or ``slice(start, stop[, step])``: ``islice(...)``
    (:class:`~wdspipes.samples.fields.ItemSlicer`), the items from start to stop."""
    return Curried(ItemSlicer, *args)


@stage_factory
def repeat(nepochs: int | None = None) -> Curried:
    """webdataset's ``repeat``: ``repeat_epochs(nepochs)``
    (:class:`~wdspipes.samples.epochs.EpochRepeater`), the epoch again ``nepochs`` times
    (None: without end)."""
    return Curried(EpochRepeater, nepochs)


def _cbors_to_samples(source: Iterable[str], handler: Handler) -> CborLoader:
    return CborLoader(ShardOpener(source, handler=handler), handler=handler)


def _msgpack_to_samples(source: Iterable[str], handler: Handler) -> MsgpackLoader:
    return MsgpackLoader(ShardOpener(source, handler=handler), handler=handler)


@stage_factory
def cbors_to_samples(handler: Handler = reraise_exception) -> Curried:
    """Shard URLs to samples from CBOR streams: ``open_shards().load_cbor()``, one handler."""
    return Curried(_cbors_to_samples, handler=handler)


@stage_factory
def msgpack_to_samples(handler: Handler = reraise_exception) -> Curried:
    """Shard URLs to samples from msgpack streams: ``open_shards().load_msgpack()``."""
    return Curried(_msgpack_to_samples, handler=handler)
