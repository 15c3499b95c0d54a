"""Zarr v3 codecs for (inner) chunks, one module per concern.

Layering as in the v3 spec: zero or more ``array -> array`` codecs (transpose), exactly one
``array -> bytes`` codec (bytes, or ``sharding_indexed`` in ``dandizarr.sharding.indexed``), then
zero or
more ``bytes -> bytes`` codecs (gzip, zstd, blosc, crc32c).

* ``base``: ``ArraySpec``, fill values, the three codec base classes, codec JSON shape;
* ``array_codecs``: transpose and bytes;
* ``compression``: gzip, zstd, blosc;
* ``checksum``: crc32c;
* ``pipeline``: ``CodecPipeline``, a chain of built codecs.

Building codecs from JSON needs every codec, the sharding codec included, so it lives above
them all in ``dandizarr.sharding.codec_registry``.
"""
