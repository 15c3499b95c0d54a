"""Interop both ways with zarr-python 3 and tensorstore on the same local directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr
import zarr.codecs

from dandizarr.sharding.array import Array, sharding_codec
from dandizarr.sharding.store import DirectoryStore

BYTES_LE = {"name": "bytes", "configuration": {"endian": "little"}}
BYTES_BE = {"name": "bytes", "configuration": {"endian": "big"}}


@dataclass(frozen=True)
class Case:
    id: str
    shape: tuple[int, ...]
    shard: tuple[int, ...]
    chunk: tuple[int, ...]
    dtype: str
    codecs: tuple[dict[str, Any], ...]
    index_location: str = "end"
    crc: bool = True
    fill: Any = 0

    def codec_json(self) -> dict[str, Any]:
        return sharding_codec(
            self.chunk,
            list(self.codecs),
            index_crc32c=self.crc,
            index_location=self.index_location,  # type: ignore[arg-type]
        )

    def data(self) -> np.ndarray:
        rng = np.random.default_rng(sum(self.shape))
        values = rng.integers(0, 50, self.shape)
        data = values.astype(self.dtype)
        # A region of fill value, so some inner chunks (and maybe shards) are not stored.
        data[tuple(slice(0, max(1, n // 3)) for n in self.shape)] = self.fill
        return data


CASES = [
    Case("1d-end-crc-raw", (37,), (12,), (4,), "uint8", (BYTES_LE,)),
    Case(
        "2d-start-nocrc-gzip-edge",
        (50, 37),
        (16, 12),
        (4, 3),
        "int16",
        (BYTES_BE, {"name": "gzip", "configuration": {"level": 1}}),
        index_location="start",
        crc=False,
        fill=-1,
    ),
    Case(
        "3d-end-nocrc-zstd-asym",
        (20, 9, 30),
        (8, 3, 16),
        (2, 3, 4),
        "float32",
        (BYTES_LE, {"name": "zstd", "configuration": {"level": 3, "checksum": False}}),
        crc=False,
    ),
    Case(
        "3d-start-crc-blosc-transpose",
        (17, 10, 12),
        (8, 10, 6),
        (4, 5, 3),
        "uint32",
        (
            {"name": "transpose", "configuration": {"order": [2, 0, 1]}},
            BYTES_LE,
            {
                "name": "blosc",
                "configuration": {
                    "cname": "zstd",
                    "clevel": 3,
                    "shuffle": "shuffle",
                    "typesize": 4,
                    "blocksize": 0,
                },
            },
        ),
        index_location="start",
    ),
    Case(
        "4d-end-crc-zstd-crc",
        (5, 6, 7, 9),
        (4, 4, 4, 6),
        (2, 4, 1, 3),
        "float64",
        (
            BYTES_LE,
            {"name": "zstd", "configuration": {"level": 1, "checksum": True}},
            {"name": "crc32c"},
        ),
        fill=float("nan"),
    ),
]
ids = [c.id for c in CASES]


def ours_write(path: Path, case: Case) -> np.ndarray:
    data = case.data()
    array = Array.create(
        DirectoryStore(path),
        shape=case.shape,
        dtype=case.dtype,
        chunk_shape=case.shard,
        codecs=[case.codec_json()],
        fill_value=case.fill,
    )
    array[...] = data
    return data


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert np.array_equal(actual, expected, equal_nan=expected.dtype.kind == "f")


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_ours_to_zarr_python_and_tensorstore(tmp_path: Path, case: Case) -> None:
    data = ours_write(tmp_path, case)
    assert_same(zarr.open_array(str(tmp_path), mode="r")[...], data)
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path)}}).result()
    assert_same(t.read().result(), data)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_zarr_python_to_ours(tmp_path: Path, case: Case) -> None:
    data = case.data()
    z = zarr.create_array(
        str(tmp_path),
        shape=case.shape,
        dtype=case.dtype,
        chunks=case.shard,
        serializer=zarr.codecs.ShardingCodec.from_dict(case.codec_json()),
        compressors=None,
        filters=None,
        fill_value=case.fill,
    )
    z[...] = data
    array = Array.open(DirectoryStore(tmp_path))
    assert_same(array[...], data)
    # A partial read crossing shard boundaries uses the range-read path.
    region = tuple(slice(n // 4, n - n // 5) for n in case.shape)
    assert_same(array[region], data[region])


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_tensorstore_to_ours(tmp_path: Path, case: Case) -> None:
    data = case.data()
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(tmp_path)},
        "metadata": {
            "shape": list(case.shape),
            "data_type": case.dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(case.shard)}},
            "codecs": [case.codec_json()],
            "fill_value": None if case.fill != case.fill else case.fill,
        },
        "create": True,
        "delete_existing": True,
    }
    if case.fill != case.fill:
        spec["metadata"]["fill_value"] = "NaN"  # type: ignore[index]
    t = ts.open(spec).result()
    t.write(data).result()
    array = Array.open(DirectoryStore(tmp_path))
    assert_same(array[...], data)
    region = tuple(slice(n // 3, n) for n in case.shape)
    assert_same(array[region], data[region])


@pytest.mark.parametrize("mode", ["rewrite", "append"])
def test_partial_writes_by_ours_read_by_both(tmp_path: Path, mode: str) -> None:
    case = CASES[2]
    data = ours_write(tmp_path, case)
    array = Array.open(DirectoryStore(tmp_path), write_mode=mode)
    # Partial inner chunks and a deletion (fill value) inside existing shards.
    array[3:7, 1:5, 5:9] = 2.5
    data[3:7, 1:5, 5:9] = 2.5
    array[8:10, 0:3, 16:20] = 0
    data[8:10, 0:3, 16:20] = 0
    assert_same(array[...], data)
    assert_same(zarr.open_array(str(tmp_path), mode="r")[...], data)
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path)}}).result()
    assert_same(t.read().result(), data)


def test_empty_shards_not_stored_like_zarr_python(tmp_path: Path) -> None:
    case = CASES[0]
    array = Array.create(
        DirectoryStore(tmp_path),
        shape=(48,),
        dtype="uint8",
        chunk_shape=(12,),
        codecs=[case.codec_json()],
    )
    values = np.zeros(48, "uint8")
    values[13] = 1
    array[...] = values
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["1"]
    assert_same(zarr.open_array(str(tmp_path), mode="r")[...], values)
    array[13] = 0
    assert not (tmp_path / "c" / "1").exists()
