"""Precomputed volumes round trip with tensorstore's ``neuroglancer_precomputed`` driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorstore as ts

from dandizarr.sharding.neuroglancer import ShardingSpec
from dandizarr.sharding.precomputed import PrecomputedVolume, make_info
from dandizarr.sharding.store import DirectoryStore

SHAPE = (64, 48, 40)  # not a multiple of the chunk size in y and z: clipped edge chunks
CHUNK = (16, 16, 16)

VARIANTS = [
    pytest.param("identity", "raw", "raw", 1, 2, 2, id="identity-raw"),
    pytest.param("identity", "gzip", "gzip", 0, 3, 1, id="identity-gzip"),
    pytest.param("murmurhash3_x86_128", "raw", "gzip", 2, 1, 2, id="murmur-mixed"),
    pytest.param("murmurhash3_x86_128", "gzip", "raw", 0, 2, 3, id="murmur-gzipindex"),
]


def volume_data(dtype: str, channels: int = 1) -> np.ndarray:
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    return rng.integers(0, info.max, size=(*SHAPE, channels), dtype=dtype, endpoint=True)


def sharding_json(
    hash_name: str, index_encoding: str, data_encoding: str, preshift: int, mini: int, shard: int
) -> dict[str, Any]:
    return {
        "@type": "neuroglancer_uint64_sharded_v1",
        "hash": hash_name,
        "preshift_bits": preshift,
        "minishard_bits": mini,
        "shard_bits": shard,
        "minishard_index_encoding": index_encoding,
        "data_encoding": data_encoding,
    }


def open_tensorstore(path: Path, **extra: Any) -> ts.TensorStore:
    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)}}
    return ts.open({**spec, **extra}).result()


def write_ours(path: Path, data: np.ndarray, sharding: ShardingSpec) -> PrecomputedVolume:
    info = make_info(
        SHAPE, data.dtype, CHUNK, num_channels=data.shape[-1], sharding=sharding, key="s0"
    )
    volume = PrecomputedVolume.create(DirectoryStore(path), info)
    scale = volume.scale()
    for positions in scale.shard_groups().values():
        chunks = {}
        for position in map(tuple, positions.tolist()):
            box = scale.chunk_box(position)
            chunks[position] = data[tuple(slice(a, b) for a, b in box)]
        volume.write_shard(chunks)
    return volume


@pytest.mark.parametrize(
    ("hash_name", "index_encoding", "data_encoding", "preshift", "mini", "shard"), VARIANTS
)
def test_tensorstore_reads_ours(
    tmp_path: Path,
    hash_name: str,
    index_encoding: str,
    data_encoding: str,
    preshift: int,
    mini: int,
    shard: int,
) -> None:
    config = sharding_json(hash_name, index_encoding, data_encoding, preshift, mini, shard)
    data = volume_data("uint16")
    write_ours(tmp_path, data, ShardingSpec.from_json(config))
    assert len(list(tmp_path.glob("s0/*.shard"))) > 1
    store = open_tensorstore(tmp_path)
    assert store.domain.shape == (*SHAPE, 1)
    np.testing.assert_array_equal(store.read().result(), data)


def test_tensorstore_reads_ours_multichannel_uint8(tmp_path: Path) -> None:
    data = volume_data("uint8", channels=2)
    write_ours(tmp_path, data, ShardingSpec(preshift_bits=1, minishard_bits=1, shard_bits=1))
    np.testing.assert_array_equal(open_tensorstore(tmp_path).read().result(), data)


@pytest.mark.parametrize(
    ("hash_name", "index_encoding", "data_encoding", "preshift", "mini", "shard"), VARIANTS
)
def test_ours_reads_tensorstore(
    tmp_path: Path,
    hash_name: str,
    index_encoding: str,
    data_encoding: str,
    preshift: int,
    mini: int,
    shard: int,
) -> None:
    data = volume_data("uint8")
    store = open_tensorstore(
        tmp_path,
        create=True,
        multiscale_metadata={"type": "image", "data_type": "uint8", "num_channels": 1},
        scale_metadata={
            "size": list(SHAPE),
            "chunk_size": list(CHUNK),
            "encoding": "raw",
            "resolution": [4, 4, 40],
            "sharding": sharding_json(
                hash_name, index_encoding, data_encoding, preshift, mini, shard
            ),
        },
    )
    store.write(data).result()
    volume = PrecomputedVolume.open(DirectoryStore(tmp_path))
    assert volume.scale().sharding == ShardingSpec.from_json(
        sharding_json(hash_name, index_encoding, data_encoding, preshift, mini, shard)
    )
    np.testing.assert_array_equal(volume.read(), data)
    region = ((5, 37), (40, 48), (0, 17))
    np.testing.assert_array_equal(volume.read(region), data[5:37, 40:48, 0:17])


def test_ours_reads_a_partially_written_tensorstore_volume(tmp_path: Path) -> None:
    store = open_tensorstore(
        tmp_path,
        create=True,
        multiscale_metadata={"type": "image", "data_type": "uint16", "num_channels": 1},
        scale_metadata={
            "size": list(SHAPE),
            "chunk_size": list(CHUNK),
            "encoding": "raw",
            "sharding": sharding_json("murmurhash3_x86_128", "gzip", "gzip", 0, 2, 2),
        },
    )
    store[16:32, 0:16, 32:40].write(np.full((16, 16, 8, 1), 513, dtype=np.uint16)).result()
    expected = np.zeros((*SHAPE, 1), dtype=np.uint16)
    expected[16:32, 0:16, 32:40] = 513
    np.testing.assert_array_equal(PrecomputedVolume.open(DirectoryStore(tmp_path)).read(), expected)


def test_unsharded_volumes_both_ways(tmp_path: Path) -> None:
    data = volume_data("uint16")
    info = make_info(SHAPE, data.dtype, CHUNK, key="s0", voxel_offset=(10, 20, 30))
    volume = PrecomputedVolume.create(DirectoryStore(tmp_path / "ours"), info)
    scale = volume.scale()
    for position in scale.chunks_in(tuple((0, n) for n in SHAPE)):
        volume.write_chunk(position, data[tuple(slice(a, b) for a, b in scale.chunk_box(position))])
    assert (tmp_path / "ours/s0/58-74_20-36_30-46").exists()
    store = open_tensorstore(tmp_path / "ours")
    assert tuple(store.domain.inclusive_min) == (10, 20, 30, 0)
    np.testing.assert_array_equal(store.read().result(), data)

    theirs = open_tensorstore(
        tmp_path / "theirs",
        create=True,
        multiscale_metadata={"type": "image", "data_type": "uint16", "num_channels": 1},
        scale_metadata={"size": list(SHAPE), "chunk_size": list(CHUNK), "encoding": "raw"},
    )
    theirs.write(data).result()
    np.testing.assert_array_equal(
        PrecomputedVolume.open(DirectoryStore(tmp_path / "theirs")).read(), data
    )
