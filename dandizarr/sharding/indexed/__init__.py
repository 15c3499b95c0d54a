"""The Zarr v3 ``sharding_indexed`` codec: many inner chunks and an index in one stored value.

* ``in_memory``: ``InMemoryShardingCodec``, geometry, the index, encoding and decoding whole
  shards held in memory (the ``array -> bytes`` codec that nested sharding uses);
* ``codec``: ``ShardingCodec``, the same plus range reads and partial writes through a
  ``KeyValueStore``;
* ``index_cache``: ``IndexCache``, decoded indexes keyed by the stored version.

Build one from JSON with ``dandizarr.sharding.codec_registry``.
"""
