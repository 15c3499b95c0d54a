"""Sharded Zarr v3 I/O: ours vs zarr-python vs tensorstore on local directories.

A 512^3 uint16 array, 128^3 shards of 32^3 inner chunks (bytes + zstd level 1, index bytes +
crc32c at the end). Each library writes the whole array into its own directory, reads it all
back, then reads the same 1,000 random inner chunks one at a time. Figures are MB/s of
uncompressed data (MB = 10^6 bytes), with ours / other ratios (> 1: ours faster).

Run: ``python -m bench sharding`` (``SHARDING_BENCH_SIZE=256`` for a quicker, smaller run).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SIZE = int(os.environ.get("SHARDING_BENCH_SIZE", "512"))
SHARD = 128
CHUNK = 32
N_RANDOM = 1000
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


def _codec_json() -> dict[str, Any]:
    from dandizarr.sharding.array import sharding_codec

    return sharding_codec((CHUNK,) * 3, [BYTES, ZSTD])


def _data() -> np.ndarray:
    """Smooth gradients plus noise: compresses a few times, like real imaging data."""
    rng = np.random.default_rng(0)
    axis = np.arange(SIZE, dtype=np.uint16)
    data = (axis[:, None, None] // 2 + axis[None, :, None] + axis[None, None, :] // 4).astype(
        np.uint16
    )
    data += rng.integers(0, 16, data.shape, dtype=np.uint16)
    # An empty corner: inner chunks equal to the fill value are not stored.
    data[: SIZE // 4, : SIZE // 4, : SIZE // 4] = 0
    return data


def _random_chunks() -> list[tuple[slice, ...]]:
    rng = np.random.default_rng(1)
    starts = rng.integers(0, SIZE // CHUNK, (N_RANDOM, 3)) * CHUNK
    return [tuple(slice(int(s), int(s) + CHUNK) for s in row) for row in starts]


class Library:
    name: str

    def create(self, path: Path) -> None: ...
    def write(self, data: np.ndarray) -> None: ...
    def read(self) -> np.ndarray: ...
    def read_region(self, region: tuple[slice, ...]) -> np.ndarray: ...


class Ours(Library):
    name = "ours"

    def create(self, path: Path) -> None:
        from dandizarr.sharding.array import Array
        from dandizarr.sharding.store import DirectoryStore

        self.path = path
        self.array = Array.create(
            DirectoryStore(path),
            shape=(SIZE,) * 3,
            dtype="uint16",
            chunk_shape=(SHARD,) * 3,
            codecs=[_codec_json()],
        )

    def write(self, data: np.ndarray) -> None:
        self.array[...] = data

    def read(self) -> np.ndarray:
        from dandizarr.sharding.array import Array
        from dandizarr.sharding.store import DirectoryStore

        # Reopen: a cold index cache, like a new reader process.
        self.array = Array.open(DirectoryStore(self.path))
        return self.array[...]

    def read_region(self, region: tuple[slice, ...]) -> np.ndarray:
        return self.array[region]


class ZarrPython(Library):
    name = "zarr-python"

    def create(self, path: Path) -> None:
        import zarr
        import zarr.codecs

        self.path = path
        self.array = zarr.create_array(
            str(path),
            shape=(SIZE,) * 3,
            dtype="uint16",
            chunks=(SHARD,) * 3,
            serializer=zarr.codecs.ShardingCodec.from_dict(_codec_json()),
            compressors=None,
            filters=None,
            fill_value=0,
        )

    def write(self, data: np.ndarray) -> None:
        self.array[...] = data

    def read(self) -> np.ndarray:
        import zarr

        self.array = zarr.open_array(str(self.path), mode="r")
        return self.array[...]  # type: ignore[no-any-return]

    def read_region(self, region: tuple[slice, ...]) -> np.ndarray:
        return self.array[region]  # type: ignore[no-any-return]


class TensorStore(Library):
    name = "tensorstore"

    def create(self, path: Path) -> None:
        import tensorstore as ts

        self.path = path
        self.array = ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": str(path)},
                "metadata": {
                    "shape": [SIZE] * 3,
                    "data_type": "uint16",
                    "chunk_grid": {
                        "name": "regular",
                        "configuration": {"chunk_shape": [SHARD] * 3},
                    },
                    "codecs": [_codec_json()],
                    "fill_value": 0,
                },
                "create": True,
                "delete_existing": True,
            }
        ).result()

    def write(self, data: np.ndarray) -> None:
        self.array.write(data).result()

    def read(self) -> np.ndarray:
        import tensorstore as ts

        self.array = ts.open(
            {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(self.path)}},
            # No cache pool: every read goes to disk, as for the others.
        ).result()
        return self.array.read().result()  # type: ignore[no-any-return]

    def read_region(self, region: tuple[slice, ...]) -> np.ndarray:
        return self.array[region].read().result()  # type: ignore[no-any-return]


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def _run(lib: Library, root: Path, data: np.ndarray, regions: list[tuple[slice, ...]]) -> dict:
    lib.create(root / lib.name)
    t_write, _ = _timed(lambda: lib.write(data))
    t_read, back = _timed(lib.read)
    if not np.array_equal(back, data):
        raise AssertionError(f"{lib.name}: full read differs from what was written")
    del back
    t_random, chunks = _timed(lambda: [lib.read_region(r) for r in regions])
    for region, chunk in zip(regions[:20], chunks[:20], strict=True):
        if not np.array_equal(chunk, data[region]):
            raise AssertionError(f"{lib.name}: random chunk read differs")
    stored = sum(f.stat().st_size for f in (root / lib.name).rglob("*") if f.is_file())
    return {
        "write": data.nbytes / t_write / 1e6,
        "read": data.nbytes / t_read / 1e6,
        "random": len(regions) * CHUNK**3 * 2 / t_random / 1e6,
        "random_ms": t_random / len(regions) * 1e3,
        "stored_mb": stored / 1e6,
    }


def main() -> None:
    data = _data()
    regions = _random_chunks()
    print(
        f"array {SIZE}^3 uint16 ({data.nbytes / 1e6:.0f} MB), shards {SHARD}^3, "
        f"inner chunks {CHUNK}^3, zstd level 1; {len(regions)} random inner-chunk reads; "
        f"{os.cpu_count()} cpus"
    )
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sharding-") as tmp:
        for lib in (Ours(), ZarrPython(), TensorStore()):
            results[lib.name] = _run(lib, Path(tmp), data, regions)
            r = results[lib.name]
            print(
                f"  {lib.name:12s} write {r['write']:8.1f} MB/s   read {r['read']:8.1f} MB/s   "
                f"random chunks {r['random']:7.1f} MB/s ({r['random_ms']:.2f} ms each)   "
                f"stored {r['stored_mb']:.1f} MB",
                flush=True,
            )
    ours = results["ours"]
    for other in ("zarr-python", "tensorstore"):
        o = results[other]
        print(
            f"  ours / {other:12s} write x{ours['write'] / o['write']:.2f}   "
            f"read x{ours['read'] / o['read']:.2f}   random x{ours['random'] / o['random']:.2f}"
        )


if __name__ == "__main__":
    main()
