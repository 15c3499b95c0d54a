"""What a conversion reads from: a local Zarr array (via zarr-python) or a precomputed volume,
as a ``Source`` of regions; and ``ConvertError``, the user-facing error of
``dandizarr.sharding.convert``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dandizarr.sharding.precomputed import PrecomputedVolume
from dandizarr.sharding.store import DirectoryStore

__all__ = ["ConvertError", "PrecomputedSource", "Source", "ZarrSource", "open_source"]


class ConvertError(ValueError):
    """Bad options or an unusable source/destination (message meant for the user)."""


class Source(Protocol):
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunk_shape: tuple[int, ...]  # the natural read granularity
    fill_value: Any

    def read(self, region: Sequence[slice]) -> np.ndarray: ...


@dataclass
class ZarrSource:
    """A Zarr v2 or v3 array read with zarr-python (``arr[slices]`` reads only that region)."""

    path: Path
    array: Any = field(repr=False)
    shape: tuple[int, ...] = ()
    dtype: np.dtype[Any] = field(default_factory=lambda: np.dtype("u1"))
    chunk_shape: tuple[int, ...] = ()
    fill_value: Any = 0
    attributes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> ZarrSource:
        # zarr-python is optional (only converting from Zarr needs it).
        import zarr

        array = zarr.open_array(store=str(path), mode="r")
        fill = array.fill_value
        return cls(
            path=path,
            array=array,
            shape=tuple(int(n) for n in array.shape),
            dtype=np.dtype(array.dtype),
            chunk_shape=tuple(int(n) for n in array.chunks),  # inner chunks when sharded
            fill_value=0 if fill is None else fill,
            attributes=dict(array.attrs.asdict()),
        )

    def read(self, region: Sequence[slice]) -> np.ndarray:
        return np.asarray(self.array[tuple(region)])


@dataclass
class PrecomputedSource:
    """Scale 0 of a precomputed volume, as ``[x, y, z]`` (one channel) or ``[x, y, z, c]``."""

    volume: PrecomputedVolume
    shape: tuple[int, ...] = ()
    dtype: np.dtype[Any] = field(default_factory=lambda: np.dtype("u1"))
    chunk_shape: tuple[int, ...] = ()
    fill_value: Any = 0

    def __post_init__(self) -> None:
        scale = self.volume.scale(0)
        channels = self.volume.info.num_channels
        extra = (channels,) if channels > 1 else ()
        self.shape = (*scale.size, *extra)
        self.chunk_shape = (*scale.chunk_size, *extra)
        self.dtype = np.dtype(self.volume.info.data_type)

    def read(self, region: Sequence[slice]) -> np.ndarray:
        box = tuple((s.start, s.stop) for s in region[:3])
        data = self.volume.read(box)
        if len(self.shape) == 3:
            return data[..., 0]
        return data[..., region[3]]


def open_source(path: str | Path) -> Source:
    """The array at ``path``: a precomputed volume (``info``) or a Zarr v2/v3 array."""
    path = Path(path)
    if not path.exists():
        raise ConvertError(f"source {str(path)!r} does not exist")
    if not path.is_dir():
        raise ConvertError(f"source {str(path)!r} is not a directory")
    if (path / "info").is_file():
        try:
            volume = PrecomputedVolume.open(DirectoryStore(path))
        except ValueError as error:
            raise ConvertError(f"source {str(path)!r}: bad precomputed volume: {error}") from None
        if volume.scale(0).encoding != "raw":
            raise ConvertError(
                f"source {str(path)!r}: precomputed encoding {volume.scale(0).encoding!r} is "
                "not supported (only 'raw')"
            )
        return PrecomputedSource(volume)
    if (path / "zarr.json").is_file() or (path / ".zarray").is_file():
        try:
            return ZarrSource.open(path)
        except Exception as error:  # zarr-python raises many types for a bad array
            raise ConvertError(
                f"source {str(path)!r}: cannot open the Zarr array: {error}"
            ) from None
    raise ConvertError(
        f"source {str(path)!r} is neither a Zarr array (zarr.json, .zarray) nor a precomputed "
        "volume (info)"
    )
