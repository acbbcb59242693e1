"""wdspipes: train PyTorch models on WebDataset shards through registered DataPipes.

``import wdspipes`` loads every public name (:mod:`wdspipes.api`), and with them torch and
every stage's functional name registered on ``IterDataPipe``: ``list_shards``,
``resample_shards``, ``open_shards``, ``load_tar``, ``group_samples``, ``load_cbor``,
``load_msgpack``, ``decode``, ``buffer_shuffle``, ``to_tuple``, ``map_tuple``, ``map_dict``,
``rename``, ``select``, ``map_samples``, ``islice``, ``batched``, ``unbatched``, ``with_epoch``,
``with_length`` and ``repeat_epochs``, whatever was imported before it or is imported after
(``import wdspipes`` then ``IterableWrapper(urls).open_shards()`` works, and so does any
submodule imported first, ``import wdspipes.read.tar``). Nothing of torch is changed: no import
hook, no patched registry; the names are registered through torch's own
``IterDataPipe.register_function``.

The one process that does not load them is the ``wdspipes`` command's, whose console script
imports the launcher :mod:`wdspipes_command` (outside the package) before the package: there
``import wdspipes`` loads no torch, so that the command creates, lists, copies and reshards
shards at once, and a name of the package loads the api on its first use.

The folders are the way data moves, each standing on those before it: ``core`` (the model of a
stage, its epoch context and the engine that opens epochs and saves and restores their state;
torch-free, the bottom), ``loaders`` (torchdata's loaders and their mends), ``io`` (opening
URLs, the cache, read-ahead), ``read`` (shard lists, the opener, the readers: tar, grouping,
stream shards, random access), ``samples`` (decoding, fields, shuffle, batches, epochs,
mixing, threads), ``write`` (writers and encoders), ``pipes`` (the DataPipe front ends, made
from the stage classes, and torch's stages in a pipeline), ``nodes`` (the torchdata.nodes front
end) and ``tools`` (resharding), with ``cli`` and ``demo`` on top. Two modules stay at the top
level: ``pipeline`` (``DataPipeline``, ``WebDataset``) assembles the DataPipes of ``pipes``, so
it stands above them; ``errors`` is the one hierarchy every folder raises and users catch.
docs/guide/layout.md lists every module and where each stage is.

webdataset's vocabulary is one layer on top, ``webdataset`` (its curried names for
``DataPipeline``, its calls of torch's names, its shard lists, mixers and loader, and the
modules behind its module paths), and nothing below it knows webdataset. Its module paths
hold the names programs import from them: ``wdspipes.shardlists``, ``wdspipes.tariterators``,
``wdspipes.filters``, ``wdspipes.utils``, ``wdspipes.autodecode``, ``wdspipes.handlers`` and
``wdspipes.gopen`` are facades over the layer's modules, and attributes of the package, as in
webdataset (``wds.gopen`` is the function); see docs/webdataset-modules.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"

COMMAND = "wdspipes_command"
"""The launcher of the ``wdspipes`` command: imported before the package, it says that the
process is the command, which loads no torch."""

if TYPE_CHECKING or COMMAND not in sys.modules:
    # webdataset's module paths are attributes of the package, as webdataset's are; wds.gopen
    # is the function, as webdataset's
    from wdspipes import autodecode as autodecode
    from wdspipes import filters as filters
    from wdspipes import handlers as handlers
    from wdspipes import shardlists as shardlists
    from wdspipes import tariterators as tariterators
    from wdspipes import utils as utils
    from wdspipes.api import *  # noqa: F403
    from wdspipes.api import __all__ as __all__
    from wdspipes.gopen import gopen as gopen
else:  # the command's process

    def __getattr__(name: str) -> Any:
        """``wdspipes.NAME`` in the command's process: the api, loaded on first use."""
        if name.startswith("__"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        return getattr(importlib.import_module(f"{__name__}.api"), name)
