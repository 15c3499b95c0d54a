"""``CodecPipeline``: a chain of built codecs for chunks of one ``ArraySpec``.

It runs the codecs and maps a batch of chunks over the shared thread pool. Building a chain from
JSON is ``dandizarr.sharding.codec_registry.pipeline_from_json``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import zstandard

from dandizarr.sharding.codecs.base import (
    ArrayArrayCodec,
    ArrayBytesCodec,
    ArraySpec,
    BytesBytesCodec,
    Codec,
)
from dandizarr.sharding.index import ShardFormatError
from dandizarr.sharding.metadata_values import MetadataError
from dandizarr.sharding.parallel import parallel_map

__all__ = ["CodecPipeline"]


@dataclass(frozen=True)
class CodecPipeline:
    """A resolved codec chain for chunks of one ``ArraySpec``."""

    spec: ArraySpec
    array_array: tuple[ArrayArrayCodec, ...]
    array_bytes: ArrayBytesCodec
    bytes_bytes: tuple[BytesBytesCodec, ...]
    # Spec seen by each array->array codec, then by the array->bytes codec (last entry).
    specs: tuple[ArraySpec, ...] = field(repr=False)

    @classmethod
    def from_codecs(cls, codecs: Iterable[Codec], spec: ArraySpec) -> CodecPipeline:
        """The chain of built ``codecs`` for chunks of ``spec``; MetadataError when they are not
        in the spec's order (array -> array, exactly one array -> bytes, bytes -> bytes)."""
        array_array: list[ArrayArrayCodec] = []
        array_bytes: ArrayBytesCodec | None = None
        bytes_bytes: list[BytesBytesCodec] = []
        specs = [spec]
        for codec in codecs:
            if isinstance(codec, ArrayArrayCodec):
                if array_bytes is not None:
                    raise MetadataError(f"{codec.name}: array -> array codec after array -> bytes")
                array_array.append(codec)
                specs.append(codec.resolve(specs[-1]))
            elif isinstance(codec, ArrayBytesCodec):
                if array_bytes is not None:
                    raise MetadataError("codecs: more than one array -> bytes codec")
                array_bytes = codec
            elif isinstance(codec, BytesBytesCodec):
                if array_bytes is None:
                    raise MetadataError(f"{codec.name}: bytes -> bytes codec before array -> bytes")
                bytes_bytes.append(codec)
            else:  # pragma: no cover - all codecs derive from one of the three
                raise TypeError(codec)
        if array_bytes is None:
            raise MetadataError(
                "codecs: exactly one array -> bytes codec (e.g. 'bytes') is required"
            )
        return cls(spec, tuple(array_array), array_bytes, tuple(bytes_bytes), tuple(specs))

    def to_json(self) -> list[dict[str, Any]]:
        codecs: list[Codec] = [*self.array_array, self.array_bytes, *self.bytes_bytes]
        return [c.to_json() for c in codecs]

    def encoded_size(self) -> int | None:
        """Fixed encoded size of a chunk, or None when the chain is variable-size."""
        size = self.array_bytes.encoded_size(self.specs[-1])
        for codec in self.bytes_bytes:
            if size is None or codec.fixed_size_delta is None:
                return None
            size += codec.fixed_size_delta
        return size

    def max_encoded_size(self) -> int | None:
        """The most bytes any honest encoding of a chunk takes, or None when unbounded."""
        size = self.array_bytes.max_encoded_size(self.specs[-1])
        for codec in self.bytes_bytes:
            if size is None:
                return None
            size = codec.max_encoded_size(size)
        return size

    def encode(self, array: np.ndarray) -> bytes:
        for codec, spec in zip(self.array_array, self.specs, strict=False):
            array = codec.encode(array, spec)
        data: bytes | memoryview = self.array_bytes.encode(array, self.specs[-1])
        for bb in self.bytes_bytes:
            data = bb.encode(data)
        return bytes(data)

    def decode(self, data: bytes | memoryview) -> np.ndarray:
        """Decode one chunk; malformed input raises ``ShardFormatError``."""
        try:
            sizes = self._bytes_sizes
            for bb, size in zip(reversed(self.bytes_bytes), reversed(sizes), strict=True):
                data = bb.decode(data, size)
            array = self.array_bytes.decode(data, self.specs[-1])
        except ShardFormatError:
            raise
        except (zlib.error, zstandard.ZstdError, RuntimeError, ValueError) as error:
            raise ShardFormatError(f"cannot decode chunk: {error}") from error
        for codec, spec in zip(reversed(self.array_array), reversed(self.specs[:-1]), strict=True):
            array = codec.decode(array, spec)
        return array

    @cached_property
    def _bytes_sizes(self) -> list[int | None]:
        """The most bytes each bytes->bytes codec's output may have: exact for fixed-size
        input (the bytes codec's), else its honest bound (a shard's), so no decoder ever runs
        unbounded when the chain has a bound."""
        sizes: list[int | None] = []
        exact = self.array_bytes.encoded_size(self.specs[-1])
        size = exact if exact is not None else self.array_bytes.max_encoded_size(self.specs[-1])
        for bb in self.bytes_bytes:
            sizes.append(size)
            size = None if size is None else bb.max_encoded_size(size)
        return sizes

    def encode_many(self, arrays: Sequence[np.ndarray], parallel: bool = True) -> list[bytes]:
        return parallel_map(self.encode, arrays, parallel)

    def decode_many(
        self, datas: Sequence[bytes | memoryview], parallel: bool = True
    ) -> list[np.ndarray]:
        return parallel_map(self.decode, datas, parallel)
