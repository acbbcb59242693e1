"""webdataset's ``webdataset.tariterators`` (``wdspipes.tariterators``): the iterator
functions programs build their own readers from (a "nothrow" grouper, say), with webdataset's
signatures and data, reading through wdspipes' own opening (:func:`~wdspipes.io.urls.open_url`)
and tar walk (:mod:`wdspipes.read.walk`); and ``tarfile_to_samples()``, the stages that read
tar shards in ``DataPipeline(...)``.

The data are webdataset's dicts: ``url_opener`` yields each shard item as a dict with its
``"url"`` and opened ``"stream"``; ``tar_file_expander`` yields each regular file as
``{"fname", "data", "__url__"}`` (``"__local_path__"`` too for a local copy), then, at each
shard's end, an end marker; ``group_by_keys`` makes samples of them, as webdataset 1.0.2's.

The end marker is an empty dict, as webdataset 1.0.2's ``{}``, so a grouper written for 1.0.2
(``if filesample == {}``) ends the sample there; asked for ``"fname"``, ``"data"`` or
``"__url__"`` it answers ``""``, ``b""`` and ``""``, a name no key splits from, so a grouper
written for webdataset 0.2.x (which had no marker, and fails on 1.0.2's with a ``KeyError``)
skips it, as long as its ``keys`` function finds no key in ``""`` (``base_plus_ext`` does
not). ``eof_value=None`` yields no marker, as 0.2.x.

The streams are closed when the next shard is asked for, and a ``pipe:`` command that failed
is reported then, through ``handler``.

``url_opener``, ``tar_file_expander`` and ``group_by_keys`` are also ``wds.url_opener``, ...:
given a source (webdataset's call, ``url_opener(src, handler=h)``) they are these iterator
functions; given none (``url_opener()``, ``url_opener(handler=h)``, or passed uncalled to
``DataPipeline``) they are wdspipes' curried stages, ``open_shards``, ``load_tar`` and
``group_samples``, which read faster and resume mid-epoch:

>>> url_opener(cache_dir="/tmp/shards")
ShardOpener(handler=<function reraise_exception at ...>, cache_dir='/tmp/shards')

>>> import io, tarfile
>>> buf = io.BytesIO()
>>> with tarfile.open(fileobj=buf, mode="w") as tf:
...     for name in ("a.txt", "a.cls", "b.txt"):
...         info = tarfile.TarInfo(name); info.size = 1
...         tf.addfile(info, io.BytesIO(b"1"))
>>> shards = [{"url": "mem.tar", "stream": io.BytesIO(buf.getvalue())}]
>>> members = list(tar_file_expander(shards))
>>> members[0], members[-1]
({'fname': 'a.txt', 'data': b'1', '__url__': 'mem.tar'}, {})
>>> [sample["__key__"] for sample in group_by_keys(iter(members))]
['a', 'b']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeGuard, cast, overload

from wdspipes.core.curried import Curried, stage_factory
from wdspipes.core.names import split_name
from wdspipes.errors import (
    DuplicateFieldError,
    Handler,
    ShardItemError,
    handle,
    reraise_exception,
)
from wdspipes.io.cache import DEFAULT_CACHE_SIZE, CacheDir, StorageOptions, opener_options
from wdspipes.io.items import shard_url
from wdspipes.io.pipe import Commands
from wdspipes.io.readahead import ReadAhead
from wdspipes.io.urls import ByteStream, close_quietly, shard_failure
from wdspipes.pipeline import read_tar_samples
from wdspipes.read.grouping import SampleGrouper
from wdspipes.read.opener import ShardOpener
from wdspipes.read.tar import TarLoader
from wdspipes.read.walk import MAX_MEMBER_SIZE, iter_tar_tuples
from wdspipes.webdataset.gopen import gopen
from wdspipes.webdataset.missing import no_counterpart

__all__ = [
    "ShardEnd",
    "base_plus_ext",
    "group_by_keys",
    "meta_prefix",
    "meta_suffix",
    "reraise_exception",
    "tar_file_expander",
    "tar_file_iterator",
    "tarfile_samples",
    "tarfile_to_samples",
    "url_opener",
    "valid_sample",
]

Member = dict[str, Any]
meta_prefix = "__"
meta_suffix = "__"


class ShardEnd(dict[str, Any]):
    """The end of a shard in ``tar_file_expander``'s output: empty, as webdataset 1.0.2's
    ``{}``, yet answering a member's ``"fname"``, ``"data"`` and ``"__url__"`` (see the
    module).

    >>> end = ShardEnd()
    >>> end == {}, end["fname"], end["data"], base_plus_ext(end["fname"])
    (True, '', b'', (None, None))
    """

    def __missing__(self, key: str) -> Any:
        if key in _MEMBER_PARTS:
            return _MEMBER_PARTS[key]
        raise KeyError(key)


_MEMBER_PARTS: Mapping[str, Any] = {"fname": "", "data": b"", "__url__": ""}


def base_plus_ext(path: str) -> tuple[str, str] | tuple[None, None]:
    """A member name's key and extension (not lower-cased), as webdataset's; ``(None, None)``
    for a name without an extension.

    >>> base_plus_ext("dir/0001.seg.PNG"), base_plus_ext("README")
    (('dir/0001', 'seg.PNG'), (None, None))
    """
    parts = split_name(path)
    if parts is None:
        return None, None
    key = parts[0]
    return key, path[len(key) + 1 :]


def valid_sample(sample: Any) -> TypeGuard[dict[str, Any]]:
    """Whether ``sample`` is a sample to yield: a non-empty dict not marked ``__bad__``."""
    return isinstance(sample, dict) and len(sample) > 0 and not sample.get("__bad__", False)


def _url_opener(
    handler: Handler | None,
    *,
    cache_dir: CacheDir | None = None,
    cache_size: int | None = DEFAULT_CACHE_SIZE,
    storage_options: StorageOptions | None = None,
    commands: Commands | None = None,
    readahead: ReadAhead | bool = True,
) -> Curried:
    """``url_opener()``'s stage: ``open_shards(handler=handler, ...)``."""
    options = opener_options(cache_dir, cache_size, storage_options, commands, readahead)
    return Curried(ShardOpener, handler=handler or reraise_exception, **options)


def _tar_file_expander(
    handler: Handler | None,
    *,
    ignore_zeros: bool = False,
    strict_end: bool = False,
    max_member_size: int = MAX_MEMBER_SIZE,
) -> Curried:
    """``tar_file_expander()``'s stage: ``load_tar(handler=handler, ...)``."""
    options: dict[str, Any] = {"ignore_zeros": ignore_zeros, "strict_end": strict_end}
    if max_member_size != MAX_MEMBER_SIZE:
        options["max_member_size"] = max_member_size
    return Curried(TarLoader, handler=handler or reraise_exception, **options)


def _group_by_keys(handler: Handler | None) -> Curried:
    """``group_by_keys()``'s stage: ``group_samples(handler=handler)``."""
    return Curried(SampleGrouper, handler=handler or reraise_exception)


def _is_source(data: Any) -> bool:
    """Whether the first argument is what webdataset's function reads, not a handler."""
    return data is not None and not callable(data)


@overload
def url_opener(
    data: Iterable[Any], handler: Handler = ..., **kw: Any
) -> Iterator[dict[str, Any]]: ...


@overload
def url_opener(
    data: Handler | None = None, handler: Handler | None = None, **kw: Any
) -> Curried: ...


def url_opener(
    data: Iterable[Any] | Handler | None = None, handler: Handler | None = None, **kw: Any
) -> Iterator[dict[str, Any]] | Curried:
    """Open each shard item of ``data`` (a URL, or a dict with the URL under ``"url"``): a
    dict of the item with the stream under ``"stream"`` (the item's keys kept). The stream is
    closed when the next shard is asked for. Without ``data``: wdspipes' opener stage,
    ``open_shards(handler=handler, ...)`` (``cache_dir=``, ``cache_size=``,
    ``storage_options=``, ``commands=``, ``readahead=``; see
    :class:`~wdspipes.read.opener.ShardOpener` and the module).

    Args:
        data: shard items.
        handler: what to do when a shard cannot be opened.
        **kw: passed to :func:`~wdspipes.gopen.gopen` (``bufsize=``, ``storage_options=``).
    """
    if not _is_source(data):
        return _url_opener(handler or data, **kw)  # type: ignore[arg-type]
    return _open_each(data, handler or reraise_exception, **kw)  # type: ignore[arg-type]


def _open_each(data: Iterable[Any], handler: Handler, **kw: Any) -> Iterator[dict[str, Any]]:
    for item in data:
        try:
            # The "url" of a dict item is data: its command runs only where the policy
            # runs commands from the data (wdspipes.io.pipe).
            stream = cast(
                ByteStream, gopen(shard_url(item), "rb", from_data=not isinstance(item, str), **kw)
            )
        except Exception as exn:
            if handle(handler, exn):
                continue
            return
        shard = {"url": item} if isinstance(item, str) else dict(item)
        shard["stream"] = stream
        try:
            yield shard
        finally:
            close_quietly(stream)


_META = r"__[^/]*__($|/)"
"""Names under a ``__name__/`` directory, or the file ``__name__``: meta files, skipped."""


def tar_file_iterator(
    fileobj: ByteStream,
    skip_meta: str | None = _META,
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
) -> Iterator[Member]:
    """The regular files of the tar archive ``fileobj`` as ``{"fname", "data"}`` dicts, as
    webdataset's: meta files and names matching ``skip_meta`` skipped, then names renamed and
    selected. The stream is read to its end and not closed.

    Raises:
        ShardError: the archive is damaged (see :mod:`wdspipes.read.walk`).
    """
    url = str(getattr(fileobj, "name", None) or getattr(fileobj, "url", None) or fileobj)
    return _members(fileobj, url, skip_meta, handler, select_files, rename_files)


def _members(
    stream: ByteStream,
    url: str,
    skip_meta: str | None,
    handler: Handler,
    select_files: Callable[[str], bool] | None,
    rename_files: Callable[[str], str] | None,
) -> Iterator[Member]:
    skip = None if skip_meta is None else re.compile(skip_meta)
    for fname, data, _, _ in iter_tar_tuples(stream, url):
        try:
            if "/" not in fname and fname.startswith(meta_prefix) and fname.endswith(meta_suffix):
                continue
            if skip is not None and skip.match(fname):
                continue
            if rename_files is not None:
                fname = rename_files(fname)
            if select_files is not None and not select_files(fname):
                continue
        except Exception as exn:
            if handle(handler, exn):
                continue
            return
        yield {"fname": fname, "data": data}


@overload
def tar_file_expander(
    data: Iterable[Any],
    handler: Handler = ...,
    select_files: Callable[[str], bool] | None = ...,
    rename_files: Callable[[str], str] | None = ...,
    eof_value: Any = ...,
) -> Iterator[Member]: ...


@overload
def tar_file_expander(
    data: Handler | None = None, handler: Handler | None = None, **kw: Any
) -> Curried: ...


def tar_file_expander(
    data: Iterable[Any] | Handler | None = None,
    handler: Handler | None = None,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    eof_value: Any = ShardEnd,
    **kw: Any,
) -> Iterator[Member] | Curried:
    """The files of each opened shard of ``data`` (dicts with ``"url"`` and ``"stream"``, or
    ``(url, stream)`` pairs as ``open_shards`` yields), each a ``{"fname", "data", "__url__"}``
    dict (with ``"__local_path__"`` where the shard has a local copy), and ``eof_value`` after
    each shard: by default a :class:`ShardEnd`, None for none (see the module).

    Each stream is read to its end and closed; a shard that is damaged, or whose ``pipe:``
    command failed, goes through ``handler`` (continuing goes on with the next shard).
    Without ``data``: wdspipes' tar loader stage, ``load_tar(handler=handler, ...)``
    (``ignore_zeros=``, ``strict_end=``, ``max_member_size=``; see
    :class:`~wdspipes.read.tar.TarLoader` and the module).
    """
    if not _is_source(data):
        return _tar_file_expander(handler or data, **kw)  # type: ignore[arg-type]
    return _expanded(
        data,  # type: ignore[arg-type]
        handler or reraise_exception,
        select_files,
        rename_files,
        eof_value,
    )


def _expanded(
    data: Iterable[Any],
    handler: Handler,
    select_files: Callable[[str], bool] | None,
    rename_files: Callable[[str], str] | None,
    eof_value: Any,
) -> Iterator[Member]:
    for source in data:
        try:
            url, stream, local_path = _opened(source)
        except Exception as exn:
            if handle(handler, exn):
                continue
            return
        try:
            members = _members(stream, url, _META, handler, select_files, rename_files)
            for member in members:
                member["__url__"] = url
                if local_path is not None:
                    member["__local_path__"] = local_path
                yield member
            stream.close()  # a pipe: command's failure is raised here
            if eof_value is not None:
                yield ShardEnd() if eof_value is ShardEnd else eof_value
        except Exception as exn:
            if not handle(handler, shard_failure(exn, url, stream)):
                return
        finally:
            close_quietly(stream)


def _opened(source: Any) -> tuple[str, ByteStream, str | None]:
    """The URL, stream and local file of an opened shard: a dict with ``"url"`` and
    ``"stream"`` (and maybe ``"local_path"``), or a ``(url, stream)`` pair."""
    if isinstance(source, tuple) and len(source) == 2:
        url, stream = source
    else:
        if not isinstance(source, Mapping) or source.get("stream") is None:
            raise ShardItemError(  # an AssertionError, as webdataset asserted
                'an opened shard must be a dict with "url" and "stream" (as url_opener yields) '
                f"or a (url, stream) pair, got {type(source).__name__}"
            )
        url, stream = shard_url(source), source["stream"]
        local_path = source.get("local_path")
        if local_path is not None:
            return url, stream, local_path
    return url, stream, getattr(stream, "local_path", None)


Keys = Callable[[str], tuple[str, str] | tuple[None, None]]


@overload
def group_by_keys(
    data: Iterable[Member],
    keys: Keys = ...,
    lcase: bool = ...,
    suffixes: set[str] | None = ...,
    handler: Handler = ...,
) -> Iterator[dict[str, Any]]: ...


@overload
def group_by_keys(data: Handler | None = None, *, handler: Handler | None = None) -> Curried: ...


def group_by_keys(
    data: Iterable[Member] | Handler | None = None,
    keys: Keys = base_plus_ext,
    lcase: bool = True,
    suffixes: set[str] | None = None,
    handler: Handler | None = None,
) -> Iterator[dict[str, Any]] | Curried:
    """Samples of consecutive members with one key, as webdataset 1.0.2's: a shard's end
    marker (an empty dict) ends the sample; a name without a key is skipped; a field seen
    twice in a sample is a :class:`~wdspipes.errors.DuplicateFieldError` (a ``ValueError``)
    through ``handler`` (continuing drops the member).

    Args:
        data: members, as ``tar_file_expander`` yields them.
        keys: splits a member name into key and field.
        lcase: lower-case the field.
        suffixes: keep only these fields (None: all).
        handler: what to do with a duplicate field.

    Without ``data``: wdspipes' grouper stage, ``group_samples(handler=handler)`` (see the
    module).
    """
    if not _is_source(data):
        return _group_by_keys(handler or data)  # type: ignore[arg-type]
    return _grouped(data, keys, lcase, suffixes, handler or reraise_exception)  # type: ignore[arg-type]


def _grouped(
    data: Iterable[Member],
    keys: Keys,
    lcase: bool,
    suffixes: set[str] | None,
    handler: Handler,
) -> Iterator[dict[str, Any]]:
    sample: dict[str, Any] | None = None
    for member in data:
        try:
            if member == {}:
                if valid_sample(sample):
                    yield sample
                sample = None
                continue
            fname, value = member["fname"], member["data"]
            key, field = keys(fname)
            if key is None or field is None:
                continue
            if lcase:
                field = field.lower()
            if sample is None or key != sample["__key__"]:
                if valid_sample(sample):
                    yield sample
                sample = {"__key__": key, "__url__": member["__url__"]}
            if field in sample:
                raise DuplicateFieldError(
                    f"duplicate field {field!r}", url=member["__url__"], member=fname, key=key
                )
            if suffixes is None or field in suffixes:
                sample[field] = value
            local_path = member.get("__local_path__")
            if local_path is not None:
                sample["__local_path__"] = local_path
        except Exception as exn:
            if handle(handler, exn):
                continue
            break
    if valid_sample(sample):
        yield sample


def tarfile_samples(
    src: Iterable[Any],
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
) -> Iterator[dict[str, Any]]:
    """The samples of the shards of ``src``: ``group_by_keys(tar_file_expander(url_opener(
    src)))``, one handler for all. ``tarfile_to_samples()``, the stage, reads the same samples
    faster, and resumes mid-epoch."""
    streams = url_opener(src, handler=handler)
    files = tar_file_expander(
        streams, handler=handler, select_files=select_files, rename_files=rename_files
    )
    return group_by_keys(files, handler=handler)


# Passed uncalled to DataPipeline, they are called with no argument: the curried stages.
url_opener._wds_stage_factory = True  # type: ignore[attr-defined]
tar_file_expander._wds_stage_factory = True  # type: ignore[attr-defined]
group_by_keys._wds_stage_factory = True  # type: ignore[attr-defined]


@stage_factory
def tarfile_to_samples(
    handler: Handler = reraise_exception,
    *,
    cache_dir: CacheDir | None = None,
    cache_size: int | None = DEFAULT_CACHE_SIZE,
    storage_options: StorageOptions | None = None,
    ignore_zeros: bool = False,
    strict_end: bool = False,
    commands: Commands | None = None,
    max_member_size: int = MAX_MEMBER_SIZE,
    readahead: ReadAhead | bool = True,
) -> Curried:
    """Shard URLs to samples: ``open_shards().load_tar().group_samples()``, one handler for all
    (see :func:`~wdspipes.pipeline.read_tar_samples`).

    ``cache_dir``, ``cache_size``, ``storage_options``, ``commands`` and ``readahead`` go to
    the opener (see :class:`~wdspipes.read.opener.ShardOpener`): with a ``cache_dir``, remote
    shards are cached there and samples carry ``__local_path__``; ``readahead=False`` turns
    read-ahead off. ``ignore_zeros``, ``strict_end`` and ``max_member_size`` go to the tar
    loader (see :class:`~wdspipes.read.tar.TarLoader`): read on past zero blocks, as in
    archives joined with ``cat``; refuse a shard without its end-of-archive marker; the most
    bytes a member may declare.

    >>> tarfile_to_samples()
    read_tar_samples(handler=<function reraise_exception at ...>)
    """
    options = opener_options(cache_dir, cache_size, storage_options, commands, readahead)
    if ignore_zeros:
        options["ignore_zeros"] = True
    if strict_end:
        options["strict_end"] = True
    if max_member_size != MAX_MEMBER_SIZE:
        options["max_member_size"] = max_member_size
    return Curried(read_tar_samples, handler=handler, **options)


MISSING = {
    "shardlist": "SimpleShardList(urls), and shuffle(...) after it",
    "trace": "nothing",
}
"""webdataset's names that wdspipes does not provide here, and what to use instead."""


def __getattr__(name: str) -> Any:
    raise no_counterpart("wdspipes.tariterators", name, MISSING)
