"""Building codecs and codec chains from their JSON: the one place that knows every codec.

It sits above ``dandizarr.sharding.codecs`` and ``dandizarr.sharding.indexed``: a
``sharding_indexed`` codec holds an
inner chain that may itself hold a ``sharding_indexed`` codec, so the recursion lives here and
neither the pipeline nor the sharding codec needs to know the other's constructors. Its depth
is the metadata's: ``pipeline_from_json`` checks the chain's nesting and size
(``metadata_values.check_codecs``: MAX_CODEC_NESTING levels, MAX_CODECS codecs) by an
iterative walk before it builds anything, so the recursion is at most that deep. Whatever the
JSON holds, building it returns a chain or raises ``MetadataError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from dandizarr.sharding.array_metadata import metadata_ints
from dandizarr.sharding.codecs.array_codecs import BytesCodec, TransposeCodec
from dandizarr.sharding.codecs.base import (
    ArrayArrayCodec,
    ArraySpec,
    Codec,
    CodecJSON,
    CodecLike,
    codec_name_config,
)
from dandizarr.sharding.codecs.checksum import Crc32cCodec
from dandizarr.sharding.codecs.compression import BloscCodec, GzipCodec, ZstdCodec
from dandizarr.sharding.codecs.pipeline import CodecPipeline
from dandizarr.sharding.index import IndexCodecsLike, as_index_codecs
from dandizarr.sharding.indexed.codec import ShardingCodec
from dandizarr.sharding.metadata_values import MetadataError, check_codecs, shown

__all__ = [
    "codec_from_json",
    "create_sharding_codec",
    "pipeline_from_json",
    "sharding_codec_from_config",
]

_DEFAULT_INNER_CODECS: tuple[CodecJSON, ...] = (
    {"name": "bytes", "configuration": {"endian": "little"}},
)


def codec_from_json(codec: CodecJSON, spec: ArraySpec) -> Codec:
    """One codec from its JSON, given the spec of the array it receives."""
    name, config = codec_name_config(codec)
    if name == "transpose":
        return TransposeCodec.from_config(config, len(spec.shape))
    if name == "bytes":
        return BytesCodec.from_config(config)
    if name == "gzip":
        return GzipCodec.from_config(config)
    if name == "zstd":
        return ZstdCodec.from_config(config)
    if name == "blosc":
        return BloscCodec.from_config(config, spec.dtype)
    if name == "crc32c":
        return Crc32cCodec()
    if name == "sharding_indexed":
        return sharding_codec_from_config(config, spec)
    raise MetadataError(f"unsupported codec {shown(name)}")


def pipeline_from_json(codecs: Iterable[CodecLike], spec: ArraySpec) -> CodecPipeline:
    """The chain for chunks of ``spec``; each codec is built against the spec it receives.
    MetadataError when the JSON declares no chain this library builds."""
    if not isinstance(codecs, list | tuple):
        if isinstance(codecs, str | Mapping) or not isinstance(codecs, Iterable):
            raise MetadataError(f"codecs must be a list, got {shown(codecs)}")
        codecs = list(codecs)  # a caller's generator
    check_codecs([c for c in codecs if not isinstance(c, Codec)])
    built: list[Codec] = []
    received = spec
    for item in codecs:
        codec = item if isinstance(item, Codec) else codec_from_json(item, received)
        if isinstance(codec, ArrayArrayCodec):
            received = codec.resolve(received)
        built.append(codec)
    return CodecPipeline.from_codecs(built, spec)


def create_sharding_codec(
    shard_spec: ArraySpec,
    chunk_shape: Sequence[int],
    codecs: Sequence[CodecLike] = _DEFAULT_INNER_CODECS,
    index_codecs: IndexCodecsLike = None,
    index_location: Literal["start", "end"] = "end",
    **runtime: Any,
) -> ShardingCodec:
    """A ``sharding_indexed`` codec for shards of ``shard_spec``; ``runtime`` takes the write
    strategy settings (``write_order``, ``coalesce_gap``)."""
    chunk = metadata_ints(chunk_shape, "sharding_indexed: chunk_shape")
    inner_spec = ArraySpec(chunk, shard_spec.dtype, shard_spec.fill_value)
    return ShardingCodec(
        shard_spec=shard_spec,
        chunk_shape=chunk,
        inner=pipeline_from_json(codecs, inner_spec),
        index_codecs=as_index_codecs(index_codecs),
        index_location=index_location,
        **runtime,
    )


def sharding_codec_from_config(config: Mapping[str, Any], shard_spec: ArraySpec) -> ShardingCodec:
    """A ``sharding_indexed`` codec from the ``configuration`` of its JSON."""
    for key in ("chunk_shape", "codecs"):
        if key not in config:
            raise MetadataError(f"sharding_indexed: configuration lacks {key!r}")
    index_location = config.get("index_location", "end")
    if index_location not in ("start", "end"):
        raise MetadataError(f"sharding_indexed: invalid index_location {shown(index_location)}")
    return create_sharding_codec(
        shard_spec,
        config["chunk_shape"],
        config["codecs"],
        config.get("index_codecs") or None,
        index_location,
    )
