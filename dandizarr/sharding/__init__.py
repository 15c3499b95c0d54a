"""Sharding: many chunks in one stored object. Pure library (numpy and codecs, no Django).

It owns the shard *formats* and the arrays built on them, and sits above ``objectstore`` (its
``KeyValueStore`` adapts an ``ObjectStore``):

* ``store``: the ``KeyValueStore`` interface and its memory, directory and object-store forms;
* ``codecs/``, ``codec_registry``: Zarr v3 codecs and building them from JSON;
* ``index``, ``morton``, ``regions``, ``parallel``: the shard index, Morton order, cutting
  regions into chunk parts, the shared encode/decode thread pool;
* ``indexed/``: the ``sharding_indexed`` codec; ``array_metadata``, ``array``: a Zarr v3 array;
* ``neuroglancer``, ``neuroglancer_reader``: Neuroglancer precomputed sharded format;
  ``precomputed_info``, ``precomputed``: a precomputed volume's ``info`` and its chunk I/O;
* ``convert_sources``, ``convert``: converting local arrays to either sharded format;
* ``archive_packing/``: not a format but how a whole archive's chunk files are packed into
  ``sharding_indexed`` shard objects (shared by the server and the client).
"""
