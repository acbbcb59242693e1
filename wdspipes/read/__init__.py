"""From shard URLs to samples, in the order a pipeline reads: shard lists and resampling
(:mod:`~wdspipes.read.shards`); the opener (:mod:`~wdspipes.read.opener`); the reader base,
which runs the per-shard loop and keeps each sample's place (:mod:`~wdspipes.read.positions`);
whole-shard compression (:mod:`~wdspipes.read.compression`); the tar walk
(:mod:`~wdspipes.read.walk`), the ``load_tar`` stage (:mod:`~wdspipes.read.tar`) and the
grouper that makes its members samples
(:mod:`~wdspipes.read.grouping`); CBOR and msgpack stream shards
(:mod:`~wdspipes.read.stream_shards`; their writers are in
:mod:`wdspipes.write.stream_shards`); shards claimed from a directory that producers fill
(:mod:`~wdspipes.read.directory`). The transport of a URL's bytes is :mod:`wdspipes.io`'s; the
split among ranks and workers, a torch sharding filter, is :mod:`wdspipes.pipes.read`'s.
"""
