"""The compressing ``bytes -> bytes`` codecs: gzip, zstd and blosc.

Decoding is bounded by construction: when the pipeline knows the size a chunk decodes to (it
does for every fixed-size chunk: the bytes codec's output), no codec produces, or allocates,
more than that. A chunk that says otherwise (a zstd frame declaring 1 GiB, a blosc header
declaring more, a gzip stream that keeps going) is refused with ``DecodedSizeError`` before
its output exists, so a 32 KB chunk cannot make the reader hold a gigabyte.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import zstandard

from dandizarr.sharding.codecs.base import BytesBytesCodec
from dandizarr.sharding.metadata_values import MetadataError, metadata_int, shown

__all__ = ["BloscCodec", "DecodedSizeError", "GzipCodec", "ZstdCodec", "compressed_bound"]


def compressed_bound(size: int) -> int:
    """The most bytes an honest gzip, zlib, zstd or blosc encoding of ``size`` bytes takes:
    above every one's own worst case (incompressible input stored: zlib adds 5 bytes per 16 KiB
    block, zstd about 1/256 plus its frame, blosc 16 header bytes plus 4 per block and split)
    with room for optional headers. A chunk object larger than this is not its codec's output,
    and is refused before it is read whole (``dandizarr.sharding.array``)."""
    return size + (size >> 7) + 1024


class DecodedSizeError(ValueError):
    """A chunk decodes, or says it decodes, to more bytes than its array's chunks hold."""

    def __init__(self, codec: str, limit: int, found: int | None = None) -> None:
        said = f" ({found} bytes)" if found is not None else ""
        super().__init__(f"{codec}: the chunk decodes to more than {limit} bytes{said}")


@dataclass(frozen=True)
class GzipCodec(BytesBytesCodec):
    name: ClassVar[str] = "gzip"
    level: int = 5

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> GzipCodec:
        return cls(metadata_int(config.get("level", 5), "gzip: level", 0, 9))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {"level": self.level}}

    def max_encoded_size(self, size: int) -> int:
        return compressed_bound(size)

    def encode(self, data: bytes | memoryview) -> bytes:
        compressor = zlib.compressobj(self.level, zlib.DEFLATED, 31)  # 31: gzip container
        return compressor.compress(data) + compressor.flush()

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> bytes:
        decompressor = zlib.decompressobj(47)  # 47: gzip or zlib header, auto-detected
        if decoded_size is None:
            return decompressor.decompress(data) + decompressor.flush()
        # One byte past the size is enough to know the chunk is too large.
        out = decompressor.decompress(data, decoded_size + 1)
        if len(out) > decoded_size:
            raise DecodedSizeError(self.name, decoded_size)
        return out


_zstd_local = threading.local()


# zstd's levels (negative ones are the fast modes; zstandard's bounds).
_ZSTD_MIN_LEVEL = -(1 << 17)
_ZSTD_MAX_LEVEL = 22


@dataclass(frozen=True)
class ZstdCodec(BytesBytesCodec):
    name: ClassVar[str] = "zstd"
    level: int = 0
    checksum: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ZstdCodec:
        checksum = config.get("checksum", False)
        if not isinstance(checksum, bool):
            raise MetadataError(f"zstd: checksum must be true or false, got {shown(checksum)}")
        level = metadata_int(
            config.get("level", 0), "zstd: level", _ZSTD_MIN_LEVEL, _ZSTD_MAX_LEVEL
        )
        return cls(level, checksum)

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

    def max_encoded_size(self, size: int) -> int:
        return compressed_bound(size)

    def encode(self, data: bytes | memoryview) -> bytes:
        return self._compressor().compress(data)

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> bytes:
        decompressor = self._decompressor()
        if decoded_size is None:
            try:
                return decompressor.decompress(data)
            except zstandard.ZstdError:
                return decompressor.decompressobj().decompress(data)
        declared = zstandard.frame_content_size(data)
        if declared > decoded_size:  # -1: not declared
            raise DecodedSizeError(self.name, decoded_size, declared)
        if declared >= 0:
            return decompressor.decompress(data, max_output_size=decoded_size)
        # Frames written by a streaming encoder carry no content size: stream them, reading
        # one byte past the size at most.
        with decompressor.stream_reader(bytes(data)) as reader:
            out = reader.read(decoded_size + 1)
        if len(out) > decoded_size:
            raise DecodedSizeError(self.name, decoded_size)
        return out


_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_BLOSC_CNAMES = frozenset({"blosclz", "lz4", "lz4hc", "zlib", "zstd"})


def blosc_shuffle_name(value: Any, itemsize: int) -> str:
    """A Zarr v2 blosc compressor's numeric ``shuffle`` as v3 names it; -1 is numcodecs'
    AUTOSHUFFLE (bit shuffle for one-byte items, byte shuffle otherwise)."""
    if value == -1:
        return "bitshuffle" if itemsize == 1 else "shuffle"
    return next((name for name, n in _BLOSC_SHUFFLE.items() if n == value), "shuffle")


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
        # Imported on first use: only arrays with a blosc codec pay for loading numcodecs.
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
        typesize = metadata_int(config.get("typesize") or dtype.itemsize, "blosc: typesize", 1, 255)
        if shuffle is None:  # zarr-python's choice when unspecified
            shuffle = "bitshuffle" if typesize == 1 else "shuffle"
        if not isinstance(shuffle, str) or shuffle not in _BLOSC_SHUFFLE:
            raise MetadataError(f"blosc: invalid shuffle {shown(shuffle)}")
        cname = config.get("cname", "zstd")
        if not isinstance(cname, str) or cname not in _BLOSC_CNAMES:
            raise MetadataError(f"blosc: unknown cname {shown(cname)}")
        return cls(
            cname=cname,
            clevel=metadata_int(config.get("clevel", 5), "blosc: clevel", 0, 9),
            shuffle=shuffle,  # type: ignore[arg-type]  # checked above
            typesize=typesize,
            blocksize=metadata_int(config.get("blocksize", 0), "blosc: blocksize", 0, 2**31 - 1),
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

    def max_encoded_size(self, size: int) -> int:
        return compressed_bound(size)

    def encode(self, data: bytes | memoryview) -> bytes:
        return bytes(self._impl.encode(data))

    def decode(self, data: bytes | memoryview, decoded_size: int | None) -> bytes:
        if decoded_size is not None:
            # Blosc allocates what its header declares (bytes 4-7, little-endian) first.
            if len(data) < 16:
                raise ValueError(f"blosc: a chunk of {len(data)} bytes has no header")
            (declared,) = struct.unpack_from("<I", data, 4)
            if declared > decoded_size:
                raise DecodedSizeError(self.name, decoded_size, declared)
        return bytes(self._impl.decode(data))
