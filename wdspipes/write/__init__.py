"""Writing shards: tar archives of samples, split into shards, with values encoded by extension.

See docs/guide/writing.md. :class:`TarWriter` writes one archive, :class:`ShardWriter` a numbered
series of them, each complete under its final name or not there at all; :class:`SampleEncoder`
and :func:`encode_value` are the encoders both use by default.
"""

from wdspipes.write.encoders import SampleEncoder, encode_value
from wdspipes.write.shards import ShardWriter
from wdspipes.write.tar import TarWriter

__all__ = ["SampleEncoder", "ShardWriter", "TarWriter", "encode_value"]
