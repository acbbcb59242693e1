"""wdspipes: train PyTorch models on WebDataset shards through registered DataPipes.

The package registers its functional stages on ``IterDataPipe``: ``list_shards``,
``resample_shards``, ``open_shards``, ``load_tar``, ``group_samples``, ``load_cbor``,
``load_msgpack``, ``decode``, ``buffer_shuffle``, ``to_tuple``, ``map_tuple``, ``map_dict``,
``rename``, ``select``, ``map_samples``, ``islice``, ``batched``, ``unbatched``, ``with_epoch``,
``with_length`` and ``repeat_epochs``. ``import wdspipes`` itself loads nothing of torch, so
that the ``wdspipes`` command starts at once, and changes nothing of torch: the names of the
package (all of :mod:`wdspipes.api`) load with its first use, or at once if torch is loaded
already; a program that imports torch after wdspipes uses a wdspipes name before it chains
a functional name on torch's own DataPipes (:mod:`wdspipes.core.loading`).

The folders are the way data moves: ``state`` (the state protocol and its assembler), ``core``
(the torch-free stage base, curried stages, seeds, ranks and workers), ``loaders`` (torchdata's
loaders and their mends), ``io`` (opening URLs), ``read`` (shard lists, the reader base, tar,
grouping, stream shards), ``samples`` (decoding, fields, shuffle, batches, epochs), ``write``
(writers and encoders), ``pipes`` (the DataPipe front ends of the stages), ``nodes`` (the
torchdata.nodes front end) and ``tools`` (resharding), with ``cli`` and ``demo`` on top. Two
modules stay at the top level: ``pipeline`` assembles the DataPipes of ``pipes``, so it stands
above them; ``errors`` is the one hierarchy every folder raises and users catch.
``core.distributed`` is in ``core`` because seeds, shard lists and the opener all need the
split among ranks and workers. docs/guide/layout.md lists every module and where each stage
is.

webdataset's module paths hold the names programs import from them: ``wdspipes.shardlists``,
``wdspipes.tariterators``, ``wdspipes.filters``, ``wdspipes.utils``, ``wdspipes.autodecode``,
``wdspipes.handlers`` and ``wdspipes.gopen`` (``wds.gopen`` is the function, as in
webdataset); see docs/webdataset-modules.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wdspipes.core import loading
from wdspipes.gopen import gopen as gopen  # the function, as webdataset's; loads nothing yet

if TYPE_CHECKING:  # what type checkers and IDEs see: every name, as loaded
    from wdspipes.api import *  # noqa: F403

__version__ = "0.1.0.dev0"


def __getattr__(name: str) -> Any:
    """``wdspipes.NAME``, loaded from :mod:`wdspipes.api` on first use (with torch)."""
    return loading.api_name(__name__, name, globals())


def __dir__() -> list[str]:
    return loading.api_dir(globals())


loading.load_api_if_torch_is_loaded()
