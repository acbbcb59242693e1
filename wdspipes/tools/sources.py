"""Inputs of a reshard other than shards (:class:`~wdspipes.tools.buckets.ReshardInput`), for
``wdspipes create`` with an output pattern: files, and class archives.

Files (:func:`file_sources`): a list of ``(archive name, path)`` pairs, cut at sample
boundaries into sources of at most ``FILES_PER_SOURCE`` files, each read by one task of
pass 1; consecutive files with the same key are one sample.

Class archives (:func:`class_sources`): a tar of one tar per class (ImageNet's
``ILSVRC2012_img_train.tar`` holds ``n01440764.tar`` and 999 more, each holding that
class's JPEGs). Each class tar is one :class:`ClassTar` source: its members are read where
they lie in the outer archive (found by one walk over its headers, which skips the data),
and each file becomes a sample keyed by its name without the extension, with its bytes under
its extension (lower case; ``JPEG`` and ``jpeg`` as ``jpg``) and the class's number, its
place among the class names sorted, as ``cls``.

>>> import io, os, tarfile, tempfile
>>> def tar(members):
...     buffer = io.BytesIO()
...     with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as out:
...         for name, data in members:
...             info = tarfile.TarInfo(name)
...             info.size = len(data)
...             out.addfile(info, io.BytesIO(data))
...     return buffer.getvalue()
>>> with tempfile.TemporaryDirectory() as tmp:
...     path = os.path.join(tmp, "train.tar")
...     with open(path, "wb") as file:
...         _ = file.write(tar([("n02.tar", tar([("n02_7.JPEG", b"b")])),
...                             ("n01.tar", tar([("n01_3.JPEG", b"a"), ("n01_4.JPEG", b"c")]))]))
...     sources = class_sources(path)
...     samples = [sample for source in sources for sample in source.samples()]
>>> [source.label for source in sources], samples[0], len(samples)
([0, 1], {'__key__': 'n01_3', 'cls': b'0', 'jpg': b'a'}, 3)
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import BinaryIO

from wdspipes.core.names import is_meta, split_name
from wdspipes.core.stage import Sample
from wdspipes.errors import WdsError
from wdspipes.read.walk import iter_tar

__all__ = ["ClassTar", "FileSource", "class_sources", "file_sources", "group_files"]

FILES_PER_SOURCE = 10_000
"""The most files in one source of :func:`file_sources` (a sample's files are never apart)."""

EXTENSIONS = {"jpeg": "jpg"}
"""Field names for extensions (lower-cased) that readers know under another name."""


@dataclass(frozen=True)
class ClassTar:
    """One class's tar inside the outer archive: a :class:`~wdspipes.tools.buckets.ReshardInput`.

    Attributes:
        archive: the path of the outer archive.
        member: the class tar's name in it (``n01440764.tar``).
        label: the class's number: its name's place among the class names sorted.
        offset: where the class tar's bytes begin in the archive.
        size: how many bytes it takes.
    """

    archive: str
    member: str
    label: int
    offset: int
    size: int

    @property
    def name(self) -> str:
        """The class tar as errors name it: ``ARCHIVE:MEMBER``."""
        return f"{self.archive}:{self.member}"

    def samples(self) -> Iterator[Sample]:
        """Each file of the class tar as a sample with its class number as ``cls``.

        Raises:
            WdsError: the class tar is damaged, or holds two files of one sample with the
                same extension (the error names the archive, the class tar and the key).
        """
        with open(self.archive, "rb") as file:
            file.seek(self.offset)
            members = iter_tar(_Slice(file, self.size), self.name)
            files = ((member.name, member.data) for member in members)
            yield from group_files(files, self.name, {"cls": b"%d" % self.label})

    def shared(self) -> ClassTar:
        return replace(self, archive=os.path.abspath(self.archive))


def class_sources(archive: str) -> list[ClassTar]:
    """The class tars of ``archive``, in the order of their names, numbered in that order.

    Raises:
        ValueError: a member of the archive is not a ``.tar`` file, or there is none.
        OSError: the archive cannot be read.
        WdsError: the archive is damaged.
    """
    try:
        with tarfile.open(archive, "r:") as outer:
            members = [member for member in outer if not member.isdir()]
    except tarfile.TarError as exn:
        raise WdsError(f"not a tar archive of class tars: {exn}", url=archive) from exn
    for member in members:
        if not member.isfile() or not member.name.endswith(".tar"):
            raise ValueError(
                f"{archive}: {member.name!r} is not a class tar (NAME.tar): --classes reads "
                "an archive that holds one tar per class"
            )
    if not members:
        raise ValueError(f"{archive}: the archive holds no class tars")
    members.sort(key=lambda member: member.name)
    return [
        ClassTar(archive, member.name, label, member.offset_data, member.size)
        for label, member in enumerate(members)
    ]


def group_files(
    files: Iterable[tuple[str, bytes]], name: str, extra: Sample | None = None
) -> Iterator[Sample]:
    """Consecutive files with the same key as samples, each field under its extension
    (``jpeg`` as ``jpg``), with the fields of ``extra`` added; files without an extension and
    meta files are skipped, as readers skip them.

    Raises:
        WdsError: two files of one sample with the same field (naming ``name`` and the key).

    >>> list(group_files([("a.JPEG", b"1"), ("a.cls", b"2"), ("README", b""), ("b.png", b"3")],
    ...                  "files"))
    [{'__key__': 'a', 'jpg': b'1', 'cls': b'2'}, {'__key__': 'b', 'png': b'3'}]
    """
    sample: Sample | None = None
    for path, data in files:
        parts = split_name(path)
        if parts is None or is_meta(path):
            continue
        key, field = parts[0], EXTENSIONS.get(parts[1], parts[1])
        if sample is None or sample["__key__"] != key:
            if sample is not None:
                yield sample
            sample = {"__key__": key, **(extra or {})}
        if field in sample:
            raise WdsError(f"sample {key!r} has two {field!r} files", url=name)
        sample[field] = data
    if sample is not None:
        yield sample


@dataclass(frozen=True)
class FileSource:
    """Files read into samples (:func:`group_files`): a
    :class:`~wdspipes.tools.buckets.ReshardInput`.

    Attributes:
        files: ``(archive name, path)`` pairs, in order.
        size: the bytes of the files.
    """

    files: tuple[tuple[str, str], ...]
    size: int

    @property
    def name(self) -> str:
        """The first file, as errors name the source."""
        return self.files[0][1] if self.files else ""

    def samples(self) -> Iterator[Sample]:
        yield from group_files(((name, _read(path)) for name, path in self.files), self.name)

    def shared(self) -> FileSource:
        files = tuple((name, os.path.abspath(path)) for name, path in self.files)
        return replace(self, files=files)


def file_sources(
    files: Sequence[tuple[str, str]], per_source: int = FILES_PER_SOURCE
) -> list[FileSource]:
    """``(archive name, path)`` pairs cut into sources of at most ``per_source`` files
    (more when one sample has more), never between two files of one sample.

    >>> [len(s.files) for s in file_sources([("a.x", "/dev/null"), ("a.y", "/dev/null"),
    ...                                      ("b.x", "/dev/null")], per_source=1)]
    [2, 1]
    """
    chunks: list[list[tuple[str, str]]] = []
    chunk: list[tuple[str, str]] = []
    last = None
    for name, path in files:
        parts = split_name(name)
        key = parts[0] if parts is not None else None
        if len(chunk) >= per_source and key != last:
            chunks.append(chunk)
            chunk = []
        chunk.append((name, path))
        last = key
    if chunk:
        chunks.append(chunk)
    return [FileSource(tuple(chunk), sum(_size(path) for _, path in chunk)) for chunk in chunks]


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # reading it reports the problem


class _Slice:
    """``size`` bytes of a file from where it stands, read as a stream of their own."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self.file = file
        self.left = size

    def read(self, size: int = -1, /) -> bytes:
        if size < 0 or size > self.left:
            size = self.left
        data = self.file.read(size)
        self.left -= len(data)
        return data

    def close(self) -> None:
        """The file is the caller's to close."""
