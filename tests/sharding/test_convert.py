"""`dandizarr convert` and dandizarr.sharding.convert: Zarr v2/v3 and precomputed to sharded
formats."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts
import zarr

from dandizarr.cli import main
from dandizarr.sharding.convert import (
    ConvertError,
    PrecomputedShardedOptions,
    Zarr3ShardedOptions,
    convert,
    convert_to_precomputed_sharded,
    convert_to_zarr3_sharded,
    default_sharding_spec,
)
from dandizarr.sharding.morton import compressed_morton_bits
from dandizarr.sharding.precomputed import PrecomputedVolume
from dandizarr.sharding.store import DirectoryStore

SHAPE = (64, 48, 40)


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    values = np.random.default_rng(3).integers(0, 60000, size=SHAPE, dtype=np.uint16)
    values[:, :16, :] = 0  # a zero slab: all-zero chunks there
    return values


@pytest.fixture
def zarr_v2(tmp_path: Path, data: np.ndarray) -> Path:
    path = tmp_path / "v2"
    array = zarr.create_array(
        store=str(path), shape=SHAPE, chunks=(16, 16, 16), dtype="uint16", zarr_format=2
    )
    array[:] = data
    return path


def open_ts(path: Path, driver: str) -> ts.TensorStore:
    return ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}).result()


def run_cli(*args: str) -> int:
    return main(["convert", *args, "--no-progress"])


@pytest.mark.parametrize(
    ("codec", "index_options", "index_location"),
    [
        ("zstd", [], "end"),
        ("blosc", ["--index-location", "start", "--no-index-crc32c"], "start"),
        ("none", ["--index-location", "start"], "start"),
    ],
)
def test_zarr_v2_to_zarr3_sharded(
    tmp_path: Path,
    zarr_v2: Path,
    data: np.ndarray,
    codec: str,
    index_options: list[str],
    index_location: str,
) -> None:
    out = tmp_path / "out"
    options = ["--shard-shape", "32,32,32", "--chunk-shape", "16,16,8", "--codec", codec]
    assert run_cli(str(zarr_v2), str(out), "--to", "zarr3-sharded", *options, *index_options) == 0
    metadata = json.loads((out / "zarr.json").read_text())
    sharding = metadata["codecs"][0]
    assert sharding["name"] == "sharding_indexed"
    assert sharding["configuration"]["chunk_shape"] == [16, 16, 8]
    assert sharding["configuration"]["index_location"] == index_location
    assert ({"name": "crc32c"} in sharding["configuration"]["index_codecs"]) == (
        not index_options[2:]
    )
    assert len(list(out.glob("c/*/*/*"))) == 2 * 2 * 2  # 64x48x40 in 32^3 shards
    read = zarr.open_array(str(out), mode="r")
    assert read.shards == (32, 32, 32) and read.chunks == (16, 16, 8)
    np.testing.assert_array_equal(read[:], data)
    np.testing.assert_array_equal(open_ts(out, "zarr3").read().result(), data)


def test_zarr_v2_to_precomputed_sharded(tmp_path: Path, zarr_v2: Path, data: np.ndarray) -> None:
    out = tmp_path / "out"
    options = ["--chunk-shape", "16,16,16", "--shard-bits", "2"]
    assert run_cli(str(zarr_v2), str(out), "--to", "precomputed-sharded", *options) == 0
    info = json.loads((out / "info").read_text())
    sharding = info["scales"][0]["sharding"]
    assert sharding["shard_bits"] == 2 and sharding["hash"] == "identity"
    assert {p.name for p in (out / "1_1_1").iterdir()} <= {f"{i}.shard" for i in range(4)}
    volume = open_ts(out, "neuroglancer_precomputed")
    assert volume.domain.shape == (*SHAPE, 1)
    np.testing.assert_array_equal(volume.read().result()[..., 0], data)


def test_hashed_gzip_precomputed_from_sharded_zarr3(tmp_path: Path, data: np.ndarray) -> None:
    source = tmp_path / "v3"
    array = zarr.create_array(
        store=str(source), shape=SHAPE, chunks=(8, 8, 8), shards=(32, 16, 40), dtype="uint16"
    )
    array[:] = data
    out = tmp_path / "out"
    args = ["--hash", "murmurhash3_x86_128", "--minishard-index-encoding", "gzip"]
    args += ["--data-encoding", "gzip", "--chunk-shape", "16,16,16", "--minishard-bits", "1"]
    assert run_cli(str(source), str(out), "--to", "precomputed-sharded", *args) == 0
    np.testing.assert_array_equal(
        open_ts(out, "neuroglancer_precomputed").read().result()[..., 0], data
    )


def test_precomputed_source_to_zarr3(tmp_path: Path, data: np.ndarray) -> None:
    source = tmp_path / "pc"
    written = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(source)},
            "create": True,
            "multiscale_metadata": {"type": "image", "data_type": "uint16", "num_channels": 2},
            "scale_metadata": {"size": list(SHAPE), "chunk_size": [32, 32, 16], "encoding": "raw"},
        }
    ).result()
    both = np.stack([data, data[::-1]], axis=-1)
    written.write(both).result()
    out = tmp_path / "out"
    result = convert(source, out, "zarr3-sharded", Zarr3ShardedOptions(codec="gzip"))
    assert result.details["chunk_shape"] == [32, 32, 16, 2]
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], both)


def test_two_dimensional_arrays_become_one_slice_volumes(tmp_path: Path) -> None:
    source = tmp_path / "v3"
    plane = np.arange(30 * 20, dtype=np.uint8).reshape(30, 20)
    zarr.create_array(store=str(source), shape=plane.shape, chunks=(8, 8), dtype="uint8")[:] = plane
    convert(source, tmp_path / "out", "precomputed-sharded")
    volume = PrecomputedVolume.open(DirectoryStore(tmp_path / "out"))
    assert volume.scale().size == (30, 20, 1)
    np.testing.assert_array_equal(volume.read()[..., 0, 0], plane)


def test_all_zero_chunks_are_not_stored(tmp_path: Path, zarr_v2: Path) -> None:
    out = tmp_path / "out"
    options = PrecomputedShardedOptions(chunk_shape=(16, 16, 16), shard_bits=0)
    convert(zarr_v2, out, "precomputed-sharded", options)
    volume = PrecomputedVolume.open(DirectoryStore(out))
    scale = volume.scale()
    present = [p for p in np.ndindex(*scale.grid_shape) if volume.read_chunk(p) is not None]
    # Chunks with y index 0 lie in the zero slab; every other chunk holds data.
    assert present == [p for p in np.ndindex(*scale.grid_shape) if p[1] != 0]


# --- streaming: memory bounded by the shard, whatever the array -----------------------------


@dataclass
class RecordingSource:
    """An in-memory source that records the size of every region read."""

    values: np.ndarray
    chunk_shape: tuple[int, ...]
    fill_value: Any = 0
    reads: list[int] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.values.dtype

    def read(self, region: Sequence[slice]) -> np.ndarray:
        self.reads.append(math.prod(s.stop - s.start for s in region))
        return self.values[tuple(region)].copy()


def test_zarr3_conversion_reads_one_shard_region_at_a_time(
    tmp_path: Path, data: np.ndarray
) -> None:
    source = RecordingSource(data, (8, 8, 8))
    options = Zarr3ShardedOptions(shard_shape=(16, 16, 16), chunk_shape=(8, 8, 8))
    result = convert_to_zarr3_sharded(source, tmp_path / "out", options)
    assert result.shards_written == len(source.reads) == 4 * 3 * 3
    assert max(source.reads) <= 16**3
    assert sum(source.reads) == data.size
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "out"), mode="r")[:], data)


@pytest.mark.parametrize("hash_name", ["identity", "murmurhash3_x86_128"])
def test_precomputed_conversion_reads_bounded_regions(
    tmp_path: Path, data: np.ndarray, hash_name: str
) -> None:
    source = RecordingSource(data, (8, 8, 8))
    options = PrecomputedShardedOptions(
        chunk_shape=(8, 8, 8),
        preshift_bits=2,
        minishard_bits=1,
        shard_bits=4,
        hash=hash_name,  # type: ignore[arg-type]
    )
    convert_to_precomputed_sharded(source, tmp_path / "out", options)
    volume = PrecomputedVolume.open(DirectoryStore(tmp_path / "out"))
    largest_shard = max(len(p) for p in volume.scale().shard_groups().values())
    # Never more than twice one shard's chunks in one read (8x6x5 chunks: 9 id bits, the
    # shard holds 2**(9 - preshift - minishard - shard) = 4 blocks of 8 chunks at most).
    assert largest_shard <= 32
    assert max(source.reads) <= 2 * largest_shard * 8**3
    assert sum(source.reads) >= data.size
    np.testing.assert_array_equal(volume.read()[..., 0], data)


def test_default_sharding_bits_cover_the_grid() -> None:
    grid = (40, 30, 20)  # bits 6, 5, 5
    total = sum(compressed_morton_bits(grid))
    spec = default_sharding_spec(grid, 64**3, PrecomputedShardedOptions())
    assert spec.preshift_bits + spec.minishard_bits + spec.shard_bits == total
    assert 2 ** (spec.preshift_bits + spec.minishard_bits) * 64**3 <= 64 << 20
    small = default_sharding_spec((2, 2, 2), 100, PrecomputedShardedOptions(minishard_bits=0))
    assert (small.preshift_bits, small.minishard_bits, small.shard_bits) == (3, 0, 0)


# --- errors ----------------------------------------------------------------------------------


def test_shard_shape_must_be_a_multiple_of_the_chunk_shape(
    tmp_path: Path, zarr_v2: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = run_cli(str(zarr_v2), str(tmp_path / "o"), "--to", "zarr3-sharded",
                     "--shard-shape", "30,32,32", "--chunk-shape", "16,16,16")  # fmt: skip
    assert status == 1
    assert "must be a multiple of the chunk shape" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_missing_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(str(tmp_path / "nope"), str(tmp_path / "o"), "--to", "zarr3-sharded") == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert run_cli(str(tmp_path / "empty"), str(tmp_path / "o"), "--to", "zarr3-sharded") == 1
    assert "neither a Zarr array" in capsys.readouterr().err


def test_unknown_target_and_options(
    tmp_path: Path, zarr_v2: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(str(zarr_v2), str(tmp_path / "o"), "--to", "hdf5") == 2
    assert "--to must be one of zarr3-sharded, precomputed-sharded" in capsys.readouterr().err
    assert (
        run_cli(str(zarr_v2), str(tmp_path / "o"), "--to", "zarr3-sharded", "--codec", "lz77") == 2
    )
    assert "--codec" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        run_cli(str(zarr_v2), str(tmp_path / "o"), "--to", "zarr3-sharded", "--chunk-shape", "a,b")
    assert exit_info.value.code == 2
    assert "comma-separated" in capsys.readouterr().err
    assert (
        run_cli(
            str(zarr_v2), str(tmp_path / "o"), "--to", "zarr3-sharded", "--chunk-shape", "16,16"
        )
        == 1
    )
    assert "3 positive integers" in capsys.readouterr().err


def test_destination_must_be_new_or_empty(tmp_path: Path, zarr_v2: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("precious")
    with pytest.raises(ConvertError, match="not an empty directory"):
        convert(zarr_v2, out, "zarr3-sharded")
    assert (out / "keep").read_text() == "precious"
    with pytest.raises(ConvertError, match="same directory"):
        convert(zarr_v2, zarr_v2, "zarr3-sharded")


def test_unsupported_data_type_for_precomputed(tmp_path: Path) -> None:
    source = tmp_path / "f64"
    zarr.create_array(store=str(source), shape=(4, 4, 4), chunks=(4, 4, 4), dtype="float64")
    with pytest.raises(ConvertError, match="float64"):
        convert(source, tmp_path / "out", "precomputed-sharded")
