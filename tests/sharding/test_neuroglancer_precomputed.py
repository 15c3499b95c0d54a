"""Precomputed volumes: info metadata, chunk grid, shard grouping, raw chunks."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from dandizarr.sharding.morton import morton_codes
from dandizarr.sharding.neuroglancer import ShardingError, ShardingSpec
from dandizarr.sharding.precomputed import (
    PrecomputedError,
    PrecomputedVolume,
    Scale,
    VolumeInfo,
    make_info,
)
from dandizarr.sharding.store import MemoryStore


def info_json(**scale_overrides: Any) -> dict[str, Any]:
    scale = {
        "key": "8_8_8",
        "size": [10, 20, 30],
        "chunk_sizes": [[4, 8, 16]],
        "resolution": [8, 8, 8],
        "encoding": "raw",
    }
    scale.update(scale_overrides)
    return {"@type": "neuroglancer_multiscale_volume", "data_type": "uint8", "num_channels": 1,
            "type": "image", "scales": [scale], "mesh": "mesh"}  # fmt: skip


def test_info_round_trip_keeps_unknown_keys() -> None:
    info = VolumeInfo.from_json(info_json())
    assert info.scales[0].grid_shape == (3, 3, 2)
    assert info.to_json()["mesh"] == "mesh"
    assert VolumeInfo.from_json(info.to_json()) == info


@pytest.mark.parametrize(
    "overrides",
    [
        {"size": [10, 20]},
        {"size": [0, 1, 1]},
        {"chunk_sizes": []},
        {"chunk_sizes": [[4, 8, 1.5]]},
        {"key": ""},
        {"encoding": 3},
        {"resolution": "8"},
    ],
)
def test_bad_scales_are_rejected(overrides: dict[str, Any]) -> None:
    with pytest.raises(PrecomputedError):
        VolumeInfo.from_json(info_json(**overrides))


def test_bad_sharding_in_info_is_a_value_error() -> None:
    with pytest.raises(ShardingError):
        VolumeInfo.from_json(info_json(sharding={"@type": "neuroglancer_uint64_sharded_v1"}))


def test_bad_info_documents() -> None:
    store = MemoryStore({"info": b"{not json"})
    with pytest.raises(PrecomputedError, match="JSON"):
        PrecomputedVolume.open(store)
    with pytest.raises(PrecomputedError, match="missing"):
        PrecomputedVolume.open(MemoryStore())
    for bad in ({**info_json(), "data_type": "complex64"}, {**info_json(), "scales": []}):
        with pytest.raises(PrecomputedError):
            VolumeInfo.from_json(bad)


def test_chunk_boxes_are_clipped_and_names_absolute() -> None:
    scale = Scale.from_json({**info_json()["scales"][0], "voxel_offset": [100, 0, -5]})
    assert scale.chunk_box((2, 2, 1)) == ((8, 10), (16, 20), (16, 30))
    assert scale.unsharded_chunk_name((2, 2, 1)) == "108-110_16-20_11-25"
    assert list(scale.chunks_in(((3, 5), (0, 8), (15, 17)))) == [
        (0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1)
    ]  # fmt: skip


def test_vectorized_morton_and_shard_groups_match_the_scalar_code() -> None:
    for hash_name in ("identity", "murmurhash3_x86_128"):
        spec = ShardingSpec(preshift_bits=1, minishard_bits=1, shard_bits=2, hash=hash_name)  # type: ignore[arg-type]
        scale = Scale.from_json({**info_json()["scales"][0], "sharding": spec.to_json()})
        groups = scale.shard_groups()
        seen = []
        for shard, positions in groups.items():
            for position in map(tuple, positions.tolist()):
                assert scale.shard_of(position) == shard
                seen.append(position)
        assert sorted(seen) == sorted(np.ndindex(*scale.grid_shape))
    positions = np.array(list(np.ndindex(16, 4, 2)))
    codes = morton_codes(positions, (16, 4, 2))
    assert int(codes[list(map(tuple, positions)).index((9, 2, 1))]) == 0b1010101


def test_raw_chunks_round_trip_and_size_mismatch() -> None:
    info = make_info((10, 20, 30), "uint16", (4, 8, 16), num_channels=2, key="s")
    store = MemoryStore()
    volume = PrecomputedVolume.create(store, info)
    assert json.loads(store.data["info"])["scales"][0]["chunk_sizes"] == [[4, 8, 16]]
    chunk = np.arange(2 * 4 * 14 * 2, dtype=np.uint16).reshape(2, 4, 14, 2)
    volume.write_chunk((2, 2, 1), chunk)
    # Fortran order over (x, y, z, channel): x varies fastest.
    raw = store.data["s/8-10_16-20_16-30"]
    assert np.frombuffer(raw, "<u2")[:2].tolist() == [chunk[0, 0, 0, 0], chunk[1, 0, 0, 0]]
    np.testing.assert_array_equal(volume.read_chunk((2, 2, 1)), chunk)
    np.testing.assert_array_equal(volume.read(((9, 10), (16, 18), (29, 30))), chunk[1:, :2, -1:])
    assert volume.read_chunk((0, 0, 0)) is None
    with pytest.raises(ValueError, match="shape"):
        volume.write_chunk((0, 0, 0), chunk)
    store.data["s/8-10_16-20_16-30"] = raw[:-2]
    with pytest.raises(PrecomputedError, match="does not match"):
        volume.read_chunk((2, 2, 1))


def test_write_shard_rejects_chunks_of_several_shards() -> None:
    spec = ShardingSpec(preshift_bits=0, minishard_bits=0, shard_bits=2)
    volume = PrecomputedVolume.create(
        MemoryStore(), make_info((8, 8, 8), "uint8", (4, 4, 4), sharding=spec)
    )
    ones = np.ones((4, 4, 4), dtype=np.uint8)
    with pytest.raises(ValueError, match="one shard"):
        volume.write_shard({(0, 0, 0): ones, (1, 0, 0): ones})
    assert volume.write_shard({(0, 0, 0): ones, (0, 0, 1): ones * 2}) == "1_1_1/0.shard"
    np.testing.assert_array_equal(
        volume.read(((0, 4), (0, 4), (0, 8)))[:, 0, :, 0], [[1] * 4 + [2] * 4] * 4
    )
