"""The ``array -> array`` codec transpose and the ``array -> bytes`` codec bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import numpy as np

from dandizarr.sharding.codecs.base import ArrayArrayCodec, ArrayBytesCodec, ArraySpec
from dandizarr.sharding.index import ShardFormatError
from dandizarr.sharding.metadata_values import MetadataError, shown

__all__ = ["BytesCodec", "TransposeCodec"]


@dataclass(frozen=True)
class TransposeCodec(ArrayArrayCodec):
    name: ClassVar[str] = "transpose"
    order: tuple[int, ...]

    @classmethod
    def from_config(cls, config: Mapping[str, Any], ndim: int) -> TransposeCodec:
        order = config.get("order")
        # Early v3 drafts allowed "C"/"F"; "F" is the full reversal.
        if order == "C":
            order = list(range(ndim))
        elif order == "F":
            order = list(range(ndim))[::-1]
        if not (
            isinstance(order, list | tuple)
            and len(order) == ndim
            and all(isinstance(i, int | np.integer) and not isinstance(i, bool) for i in order)
            and sorted(int(i) for i in order) == list(range(ndim))
        ):
            raise MetadataError(
                f"transpose: order {shown(order)} is not a permutation of {ndim} axes"
            )
        return cls(tuple(int(i) for i in order))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"order": list(self.order)}}

    def resolve(self, spec: ArraySpec) -> ArraySpec:
        return replace(spec, shape=tuple(spec.shape[i] for i in self.order))

    def encode(self, array: np.ndarray, spec: ArraySpec) -> np.ndarray:
        return array.transpose(self.order)

    def decode(self, array: np.ndarray, spec: ArraySpec) -> np.ndarray:
        return array.transpose(np.argsort(self.order))


@dataclass(frozen=True)
class BytesCodec(ArrayBytesCodec):
    name: ClassVar[str] = "bytes"
    endian: Literal["little", "big"] | None = "little"

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> BytesCodec:
        endian = config.get("endian")
        if endian not in ("little", "big", None):
            raise MetadataError(f"bytes: invalid endian {shown(endian)}")
        return cls(endian)

    def to_json(self) -> dict[str, Any]:
        if self.endian is None:
            return {"name": self.name}
        return {"name": self.name, "configuration": {"endian": self.endian}}

    def _dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        if dtype.itemsize == 1 or dtype.kind == "b":
            return dtype
        if self.endian is None:
            raise MetadataError(f"bytes: endian is required for {dtype}")
        return dtype.newbyteorder("<" if self.endian == "little" else ">")

    def encode(self, array: np.ndarray, spec: ArraySpec) -> bytes:
        target = self._dtype(spec.dtype)
        if array.dtype != target:
            array = array.astype(target)
        return np.ascontiguousarray(array).tobytes()

    def decode(self, data: bytes | memoryview, spec: ArraySpec) -> np.ndarray:
        if len(data) != spec.nbytes:
            raise ShardFormatError(
                f"bytes: chunk is {len(data)} bytes, expected {spec.nbytes} for "
                f"{spec.shape} {spec.dtype}"
            )
        array = np.frombuffer(data, dtype=self._dtype(spec.dtype)).reshape(spec.shape)
        if array.dtype != spec.dtype:
            array = array.astype(spec.dtype)
        return array

    def encoded_size(self, spec: ArraySpec) -> int | None:
        return spec.nbytes
