"""The compressing ``bytes -> bytes`` codecs: gzip, zstd and blosc."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import zstandard

from sharding.codecs.base import BytesBytesCodec

__all__ = ["BloscCodec", "GzipCodec", "ZstdCodec"]


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
