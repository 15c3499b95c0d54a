"""Zarr v3 codecs and the codec pipeline used for (inner) chunks.

Layering as in the v3 spec: zero or more ``array -> array`` codecs (transpose), exactly one
``array -> bytes`` codec (bytes, or sharding_indexed), then zero or more ``bytes -> bytes``
codecs (gzip, zstd, blosc, crc32c). ``CodecPipeline`` runs them and can map a batch of chunks
over a shared thread pool: the compressors release the GIL, so two cores really do two chunks.
"""

from __future__ import annotations

import math
import os
import threading
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar, Literal, TypeVar

import crc32c as _crc32c
import numpy as np
import zstandard

from sharding.index import ShardFormatError

__all__ = [
    "ArrayArrayCodec",
    "ArrayBytesCodec",
    "ArraySpec",
    "BloscCodec",
    "BytesBytesCodec",
    "BytesCodec",
    "CodecPipeline",
    "Crc32cCodec",
    "GzipCodec",
    "TransposeCodec",
    "ZstdCodec",
    "codec_from_json",
    "is_fill",
    "parallel_map",
]

T = TypeVar("T")
R = TypeVar("R")


# ---------------------------------------------------------------------------------------------
# Thread pool


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="sharding"
            )
        return _pool


_in_worker = threading.local()


def parallel_map(fn: Callable[[T], R], items: Sequence[T], parallel: bool = True) -> list[R]:
    """``[fn(x) for x in items]``, on the shared pool when worth it.

    Calls made from inside a pool worker run inline: a worker blocking on tasks queued behind
    it on the same pool could deadlock, and the outer level already uses every core.
    """
    if not parallel or len(items) < 2 or getattr(_in_worker, "active", False):
        return [fn(x) for x in items]

    def run(x: T) -> R:
        _in_worker.active = True
        try:
            return fn(x)
        finally:
            _in_worker.active = False

    return list(_executor().map(run, items))


# ---------------------------------------------------------------------------------------------
# Array spec and fill values


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


# ---------------------------------------------------------------------------------------------
# Codec base classes


class Codec:
    name: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


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


class BytesBytesCodec(Codec):
    # Bytes added to the input size when fixed (crc32c: 4), None when variable.
    fixed_size_delta: ClassVar[int | None] = None

    def encode(self, data: bytes | memoryview) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> bytes | memoryview:
        """``decoded_size`` is the exact output size when known (helps preallocation)."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------
# Concrete codecs


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
        if not isinstance(order, list | tuple) or sorted(int(i) for i in order) != list(
            range(ndim)
        ):
            raise ValueError(f"transpose: order {order!r} is not a permutation of {ndim} axes")
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
            raise ValueError(f"bytes: invalid endian {endian!r}")
        return cls(endian)

    def to_json(self) -> dict[str, Any]:
        if self.endian is None:
            return {"name": self.name}
        return {"name": self.name, "configuration": {"endian": self.endian}}

    def _dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        if dtype.itemsize == 1 or dtype.kind == "b":
            return dtype
        if self.endian is None:
            raise ValueError(f"bytes: endian is required for {dtype}")
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


@dataclass(frozen=True)
class GzipCodec(BytesBytesCodec):
    name: ClassVar[str] = "gzip"
    level: int = 5

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> GzipCodec:
        level = int(config.get("level", 5))
        if not 0 <= level <= 9:
            raise ValueError(f"gzip: level {level} not in 0..9")
        return cls(level)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"level": self.level}}

    def encode(self, data: bytes | memoryview) -> bytes:
        compressor = zlib.compressobj(self.level, zlib.DEFLATED, 31)  # 31: gzip container
        return compressor.compress(data) + compressor.flush()

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> bytes:
        return zlib.decompress(data, 47)  # 47: gzip or zlib header, auto-detected


_zstd_local = threading.local()


@dataclass(frozen=True)
class ZstdCodec(BytesBytesCodec):
    name: ClassVar[str] = "zstd"
    level: int = 0
    checksum: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ZstdCodec:
        return cls(int(config.get("level", 0)), bool(config.get("checksum", False)))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "configuration": {"level": self.level, "checksum": self.checksum},
        }

    # zstandard (de)compressor objects are not thread-safe: one per thread and setting.
    def _compressor(self) -> zstandard.ZstdCompressor:
        cache = _zstd_local.__dict__.setdefault("c", {})
        key = (self.level, self.checksum)
        if key not in cache:
            cache[key] = zstandard.ZstdCompressor(
                level=self.level, write_checksum=self.checksum, write_content_size=True
            )
        return cache[key]

    @staticmethod
    def _decompressor() -> zstandard.ZstdDecompressor:
        if not hasattr(_zstd_local, "d"):
            _zstd_local.d = zstandard.ZstdDecompressor()
        return _zstd_local.d

    def encode(self, data: bytes | memoryview) -> bytes:
        return self._compressor().compress(data)

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> bytes:
        decompressor = self._decompressor()
        try:
            return decompressor.decompress(data, max_output_size=decoded_size or 0)
        except zstandard.ZstdError:
            # Frames written by a streaming encoder carry no content size: stream them.
            return decompressor.decompressobj().decompress(data)


_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


@dataclass(frozen=True)
class BloscCodec(BytesBytesCodec):
    name: ClassVar[str] = "blosc"
    cname: str = "zstd"
    clevel: int = 5
    shuffle: Literal["noshuffle", "shuffle", "bitshuffle"] = "shuffle"
    typesize: int = 1
    blocksize: int = 0
    _impl: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        from numcodecs import Blosc

        if self.shuffle not in _BLOSC_SHUFFLE:
            raise ValueError(f"blosc: invalid shuffle {self.shuffle!r}")
        impl = Blosc(
            cname=self.cname,
            clevel=self.clevel,
            shuffle=_BLOSC_SHUFFLE[self.shuffle],
            blocksize=self.blocksize,
            typesize=self.typesize,
        )
        object.__setattr__(self, "_impl", impl)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], dtype: np.dtype[Any]) -> BloscCodec:
        shuffle = config.get("shuffle")
        typesize = int(config.get("typesize") or dtype.itemsize)
        if shuffle is None:  # zarr-python's choice when unspecified
            shuffle = "bitshuffle" if typesize == 1 else "shuffle"
        return cls(
            cname=str(config.get("cname", "zstd")),
            clevel=int(config.get("clevel", 5)),
            shuffle=shuffle,  # type: ignore[arg-type]  # checked in __post_init__
            typesize=typesize,
            blocksize=int(config.get("blocksize", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "configuration": {
                "cname": self.cname,
                "clevel": self.clevel,
                "shuffle": self.shuffle,
                "typesize": self.typesize,
                "blocksize": self.blocksize,
            },
        }

    def encode(self, data: bytes | memoryview) -> bytes:
        return bytes(self._impl.encode(data))

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> bytes:
        return bytes(self._impl.decode(data))


@dataclass(frozen=True)
class Crc32cCodec(BytesBytesCodec):
    name: ClassVar[str] = "crc32c"
    fixed_size_delta: ClassVar[int | None] = 4

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name}

    def encode(self, data: bytes | memoryview) -> bytes:
        return bytes(data) + _crc32c.crc32c(data).to_bytes(4, "little")

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> memoryview:
        view = memoryview(data)
        if len(view) < 4:
            raise ShardFormatError("crc32c: input shorter than the 4-byte checksum")
        body = view[:-4]
        stored = int.from_bytes(view[-4:], "little")
        if _crc32c.crc32c(body) != stored:
            raise ShardFormatError("crc32c: checksum mismatch")
        return body


# ---------------------------------------------------------------------------------------------
# Registry and pipeline


def _name_config(codec: Mapping[str, Any] | str) -> tuple[str, Mapping[str, Any]]:
    if isinstance(codec, str):
        return codec, {}
    name = codec.get("name")
    if not isinstance(name, str):
        raise ValueError(f"codec without a name: {codec!r}")
    config = codec.get("configuration") or {}
    return name, config


def codec_from_json(codec: Mapping[str, Any] | str, spec: ArraySpec) -> Codec:
    """One codec from its JSON, given the spec of the array it receives."""
    name, config = _name_config(codec)
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
        from sharding.indexed import ShardingCodec

        return ShardingCodec.from_config(config, spec)
    raise ValueError(f"unsupported codec {name!r}")


CodecLike = Codec | Mapping[str, Any] | str


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
    def from_json(cls, codecs: Iterable[CodecLike], spec: ArraySpec) -> CodecPipeline:
        array_array: list[ArrayArrayCodec] = []
        array_bytes: ArrayBytesCodec | None = None
        bytes_bytes: list[BytesBytesCodec] = []
        specs = [spec]
        for item in codecs:
            codec = item if isinstance(item, Codec) else codec_from_json(item, specs[-1])
            if isinstance(codec, ArrayArrayCodec):
                if array_bytes is not None:
                    raise ValueError(f"{codec.name}: array -> array codec after array -> bytes")
                array_array.append(codec)
                specs.append(codec.resolve(specs[-1]))
            elif isinstance(codec, ArrayBytesCodec):
                if array_bytes is not None:
                    raise ValueError("codecs: more than one array -> bytes codec")
                array_bytes = codec
            elif isinstance(codec, BytesBytesCodec):
                if array_bytes is None:
                    raise ValueError(f"{codec.name}: bytes -> bytes codec before array -> bytes")
                bytes_bytes.append(codec)
            else:  # pragma: no cover - all codecs derive from one of the three
                raise TypeError(codec)
        if array_bytes is None:
            raise ValueError("codecs: exactly one array -> bytes codec (e.g. 'bytes') is required")
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
        """Input size of each bytes->bytes codec when fixed (the bytes codec's output etc.)."""
        sizes: list[int | None] = []
        size = self.array_bytes.encoded_size(self.specs[-1])
        for bb in self.bytes_bytes:
            sizes.append(size)
            size = (
                None if size is None or bb.fixed_size_delta is None else size + bb.fixed_size_delta
            )
        return sizes

    def encode_many(self, arrays: Sequence[np.ndarray], parallel: bool = True) -> list[bytes]:
        return parallel_map(self.encode, arrays, parallel)

    def decode_many(
        self, datas: Sequence[bytes | memoryview], parallel: bool = True
    ) -> list[np.ndarray]:
        return parallel_map(self.decode, datas, parallel)
