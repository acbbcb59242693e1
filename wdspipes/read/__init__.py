"""From shard URLs to samples, in the order a pipeline reads: shard lists, resampling and the
split among readers (:mod:`~wdspipes.read.shards`); the reader base, which runs the per-shard
loop and keeps each sample's place (:mod:`~wdspipes.read.positions`); whole-shard compression
(:mod:`~wdspipes.read.compression`); the tar walk (:mod:`~wdspipes.read.walk`), the
``load_tar`` stage (:mod:`~wdspipes.read.tar`) and the grouper that makes its members samples
(:mod:`~wdspipes.read.grouping`); CBOR and msgpack stream shards
(:mod:`~wdspipes.read.streams`; their writers are in :mod:`wdspipes.write.streams`); shards
claimed from a directory that producers fill (:mod:`~wdspipes.read.directory`).
Opening a URL is :mod:`wdspipes.io`'s.
"""
