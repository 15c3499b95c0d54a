"""What every codec shares: the spec of the array it sees, fill values, the three base classes
of the v3 spec and the shape of a codec's JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dandizarr.sharding.metadata_values import MetadataError, shown

__all__ = [
    "ArrayArrayCodec",
    "ArrayBytesCodec",
    "ArraySpec",
    "BytesBytesCodec",
    "Codec",
    "CodecJSON",
    "CodecLike",
    "codec_name_config",
    "is_fill",
]

# A codec as metadata has it: ``{"name": ..., "configuration": {...}}`` or just its name.
CodecJSON = Mapping[str, Any] | str


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """What a codec sees: the (chunk) shape, dtype and fill value."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill_value: Any

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def fill_array(self) -> np.ndarray:
        return np.full(self.shape, self.fill_value, dtype=self.dtype)


def is_fill(array: np.ndarray, fill_value: Any) -> bool:
    """True when every element equals the fill value (NaN counts as equal to a NaN fill)."""
    if array.dtype.kind in "fc":
        fill = np.asarray(fill_value, dtype=array.dtype)
        if np.isnan(fill).any():
            if array.dtype.kind == "c":
                return bool(np.all((array == fill) | (np.isnan(array) & np.isnan(fill))))
            return bool(np.isnan(array).all())
    if array.dtype.kind in "biu" and not fill_value:
        return not array.any()
    return bool(np.all(array == fill_value))


def codec_name_config(codec: CodecJSON) -> tuple[str, Mapping[str, Any]]:
    """The name and configuration of a codec's JSON; MetadataError when it has neither shape."""
    if isinstance(codec, str):
        return codec, {}
    name = codec.get("name") if isinstance(codec, Mapping) else None
    if not isinstance(name, str):
        raise MetadataError(f"codec without a name: {shown(codec)}")
    config = codec.get("configuration") or {}
    if not isinstance(config, Mapping):
        raise MetadataError(f"codec {shown(name)}: configuration must be an object")
    return name, config


class Codec:
    name: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


# A built codec, or its JSON (built against the spec of the array it receives).
CodecLike = Codec | CodecJSON


class ArrayArrayCodec(Codec):
    def resolve(self, spec: ArraySpec) -> ArraySpec:
        """The spec of this codec's output given its input spec."""
        raise NotImplementedError

    def encode(self, array: np.ndarray, spec: ArraySpec) -> np.ndarray:
        raise NotImplementedError

    def decode(self, array: np.ndarray, spec: ArraySpec) -> np.ndarray:
        """``spec`` is the decoded (input-side) spec."""
        raise NotImplementedError


class ArrayBytesCodec(Codec):
    def encode(self, array: np.ndarray, spec: ArraySpec) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes | memoryview, spec: ArraySpec) -> np.ndarray:
        raise NotImplementedError

    def encoded_size(self, spec: ArraySpec) -> int | None:
        """Fixed encoded size in bytes, or None when it depends on the data."""
        return None

    def max_encoded_size(self, spec: ArraySpec) -> int | None:
        """The most bytes any honest encoding of a chunk of ``spec`` takes (None: no bound)."""
        return self.encoded_size(spec)


class BytesBytesCodec(Codec):
    # Bytes added to the input size when fixed (crc32c: 4), None when variable.
    fixed_size_delta: ClassVar[int | None] = None

    def encode(self, data: bytes | memoryview) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> bytes | memoryview:
        """``decoded_size`` is the most bytes the output may have, when known: the exact size
        for fixed-size input, else its bound; decoders produce no more (or refuse)."""
        raise NotImplementedError

    def max_encoded_size(self, size: int) -> int:
        """The most bytes any honest encoding of ``size`` bytes takes."""
        if self.fixed_size_delta is None:
            raise NotImplementedError
        return size + self.fixed_size_delta
