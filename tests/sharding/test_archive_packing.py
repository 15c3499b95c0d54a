"""dandizarr.sharding.archive_packing: chunk grids from metadata, shard plans, building,
checking."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

from dandizarr.sharding.archive_packing import (
    BuiltShard,
    ChunkGrid,
    MemberRecord,
    PackingError,
    ShardLayout,
    build_shard,
    default_chunks_per_shard,
    find_grids,
    grid_from_metadata,
    member_problems,
    plan_shard_indices,
    plan_shards,
    verify_members,
)
from dandizarr.sharding.index import IndexCodecs, ShardIndex, nbytes_encoded


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def v2(shape: list[Any], chunks: list[Any], dtype: Any = "<u2", **extra: Any) -> bytes:
    doc = {"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype, **extra}
    return json.dumps(doc).encode()


def v3(
    shape: list[int],
    chunks: list[int],
    data_type: Any = "float32",
    encoding: dict[str, Any] | None = None,
    **extra: Any,
) -> bytes:
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        **extra,
    }
    if encoding is not None:
        doc["chunk_key_encoding"] = encoding
    return json.dumps(doc).encode()


# --- metadata ---------------------------------------------------------------------------------


def test_v2_defaults_to_dot_separator() -> None:
    grid = grid_from_metadata("a/b", ".zarray", v2([10, 7], [4, 3]))
    assert grid == ChunkGrid("a/b", (10, 7), (4, 3), ".", "", 2)
    assert grid.grid_shape() == (3, 3)
    assert grid.chunk_nbytes() == 24
    assert grid.chunk_coords("a/b/2.1") == (2, 1)
    assert grid.chunk_key((2, 1)) == "a/b/2.1"
    assert grid.chunk_coords("a/b/2/1") is None


def test_v2_slash_separator_and_itemsizes() -> None:
    grid = grid_from_metadata(
        "", ".zarray", v2([5, 5, 5], [2, 2, 2], "<f8", dimension_separator="/")
    )
    assert grid is not None
    assert (grid.separator, grid.prefix, grid.itemsize) == ("/", "", 8)
    assert grid.chunk_coords("2/0/1") == (2, 0, 1)
    assert grid.chunk_key((2, 0, 1)) == "2/0/1"
    assert grid.chunk_coords("2.0.1") is None
    null_separator = grid_from_metadata("x", ".zarray", v2([4], [2], dimension_separator=None))
    assert null_separator is not None and null_separator.separator == "."
    for dtype, itemsize in [("|O", 1), ("<U3", 12), ("|S5", 5), ([["a", "<i4"], ["b", "|u1"]], 5)]:
        grid = grid_from_metadata("", ".zarray", v2([4], [2], dtype))
        assert grid is not None and grid.itemsize == itemsize, dtype


def test_v3_default_encoding() -> None:
    grid = grid_from_metadata("g/arr", "zarr.json", v3([100, 50], [10, 10]))
    assert grid == ChunkGrid("g/arr", (100, 50), (10, 10), "/", "c", 4)
    assert grid.chunk_coords("g/arr/c/9/4") == (9, 4)
    assert grid.chunk_key((9, 4)) == "g/arr/c/9/4"
    assert grid.chunk_coords("g/arr/9/4") is None
    assert grid.chunk_coords("g/arr/c.9.4") is None
    dotted = grid_from_metadata(
        "",
        "zarr.json",
        v3([3], [1], "int64", {"name": "default", "configuration": {"separator": "."}}),
    )
    assert dotted == ChunkGrid("", (3,), (1,), ".", "c", 8)
    assert dotted.chunk_coords("c.2") == (2,)
    assert dotted.chunk_key((2,)) == "c.2"


def test_v3_v2_encoding() -> None:
    grid = grid_from_metadata("a", "zarr.json", v3([6, 6], [3, 3], "uint8", {"name": "v2"}))
    assert grid == ChunkGrid("a", (6, 6), (3, 3), ".", "", 1)
    assert grid.chunk_coords("a/1.1") == (1, 1)
    slash = grid_from_metadata(
        "a",
        "zarr.json",
        v3([6, 6], [3, 3], "uint8", {"name": "v2", "configuration": {"separator": "/"}}),
    )
    assert slash is not None and slash.chunk_coords("a/1/0") == (1, 0)


def test_v3_data_types_and_sharded_outer_chunks() -> None:
    for data_type, itemsize in [("bool", 1), ("complex128", 16), ("r24", 3), ("string", 1)]:
        grid = grid_from_metadata("", "zarr.json", v3([4], [2], data_type))
        assert grid is not None and grid.itemsize == itemsize, data_type
    sharded = v3(
        [64, 64],
        [32, 32],
        codecs=[
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [8, 8],
                    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "index_codecs": IndexCodecs().to_json(),
                },
            }
        ],
    )
    grid = grid_from_metadata("", "zarr.json", sharded)
    assert grid is not None and grid.chunks == (32, 32) and grid.grid_shape() == (2, 2)


def test_zero_d_arrays() -> None:
    old = grid_from_metadata("s", ".zarray", v2([], []))
    assert old is not None and old.grid_shape() == ()
    assert old.chunk_coords("s/0") == ()
    assert old.chunk_key(()) == "s/0"
    assert old.chunk_coords("s/c") is None
    assert old.chunk_coords("s/0.0") is None
    new = grid_from_metadata("", "zarr.json", v3([], []))
    assert new is not None
    assert new.chunk_coords("c") == ()
    assert new.chunk_key(()) == "c"
    assert new.chunk_coords("0") is None
    assert new.chunk_coords("c/0") is None
    assert default_chunks_per_shard(new) == ()
    layout = ShardLayout(new, ())
    assert layout.slots() == 1
    assert layout.shard_of(()) == ((), 0)
    assert layout.shard_name(()) == "c.shard"


@pytest.mark.parametrize(
    "path",
    [
        "a/01.0",
        "a/-1.0",
        "a/1.0.0",
        "a/1",
        "a/+1.0",
        "a/1.0 ",
        "a/1..0",
        "a/1.",
        "a/",
        "a/x.0",
        "a/4.0",  # grid is 4 x 3: row 4 is out of bounds
        "a/0.3",
        "a/.zarray",
        "b/0.0",
        "ab/0.0",
        "0.0",
        "a/0.0/0",
        "a/1e1.0",
        "a/\u0661.0",  # a non-ASCII digit (ARABIC-INDIC ONE)
    ],
)
def test_non_chunk_keys_rejected(path: str) -> None:
    grid = grid_from_metadata("a", ".zarray", v2([16, 9], [4, 3]))
    assert grid is not None
    assert grid.chunk_coords(path) is None
    assert grid.chunk_coords("a/3.2") == (3, 2)


def test_v3_non_chunk_keys_rejected() -> None:
    grid = grid_from_metadata("", "zarr.json", v3([10, 10], [5, 5]))
    assert grid is not None
    for path in ["c/0", "c/0/0/0", "c/01/0", "c/-1/0", "c/2/0", "c", "c0/0", "zarr.json", "0/0"]:
        assert grid.chunk_coords(path) is None, path
    assert grid.chunk_coords("c/1/1") == (1, 1)


def test_empty_dimension_has_no_chunks() -> None:
    grid = grid_from_metadata("", ".zarray", v2([0, 4], [2, 2]))
    assert grid is not None and grid.grid_shape() == (0, 2)
    assert grid.chunk_coords("0.0") is None
    assert default_chunks_per_shard(grid)[0] == 1


def test_groups_give_none() -> None:
    assert grid_from_metadata("", ".zgroup", b'{"zarr_format": 2}') is None
    group = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode()
    assert grid_from_metadata("g", "zarr.json", group) is None


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (".zarray", b"not json", "not valid JSON"),
        (".zarray", b"\xff\xfe", "not valid JSON"),
        (".zarray", b"[1, 2]", "JSON object"),
        (".zarray", v2([4], [2])[:-1] + b', "zarr_format": 3}', "zarr_format"),
        (".zarray", json.dumps({"shape": [4], "dtype": "<u1"}).encode(), "chunks"),
        (".zarray", v2([4, 4], [2]), "does not match"),
        (".zarray", v2([4], [0]), "positive"),
        (".zarray", v2([-4], [2]), "non-negative"),
        (".zarray", v2([4.0], [2]), "list of integers"),
        (".zarray", v2([4], [True]), "list of integers"),
        (".zarray", v2([4], [2], 7), "dtype"),
        (".zarray", v2([4], [2], dimension_separator="-"), "dimension_separator"),
        ("zarr.json", json.dumps({"zarr_format": 3}).encode(), "node_type"),
        ("zarr.json", json.dumps({"zarr_format": 2, "node_type": "array"}).encode(), "zarr_format"),
        ("zarr.json", v3([4], [2], chunk_grid={"name": "rectilinear"}), "regular"),
        ("zarr.json", v3([4], [2], chunk_grid={"name": "regular"}), "chunk_shape"),
        ("zarr.json", v3([4], [2], encoding={"name": "hex"}), "chunk_key_encoding"),
        (
            "zarr.json",
            v3([4], [2], encoding={"name": "default", "configuration": {"separator": ":"}}),
            "separator",
        ),
        ("zarr.json", v3([4], [2], encoding={"name": "default", "configuration": 3}), "zarr.json"),
        ("zarr.json", v3([4, 4], [2]), "does not match"),
        ("metadata.json", b"{}", "not a Zarr metadata"),
    ],
)
def test_malformed_metadata_raises(name: str, data: bytes, message: str) -> None:
    with pytest.raises(PackingError, match=message) as raised:
        grid_from_metadata("arr", name, data)
    assert isinstance(raised.value, ValueError)
    assert f"arr/{name}" in str(raised.value)


def test_find_grids_skips_groups_and_other_files() -> None:
    files = {
        ".zgroup": b'{"zarr_format": 2}',
        ".zattrs": b"{}",
        "b/.zarray": v2([4], [2]),
        "a/.zarray": v2([8, 8], [4, 4], "<i4", dimension_separator="/"),
        "a/.zattrs": b"{}",
        "v3/zarr.json": json.dumps({"zarr_format": 3, "node_type": "group"}).encode(),
        "v3/x/zarr.json": v3([3], [3]),
    }
    grids = find_grids(files)
    assert [g.array_path for g in grids] == ["a", "b", "v3/x"]
    assert grids[0].separator == "/"
    with pytest.raises(PackingError, match=r"b/\.zarray"):
        find_grids({"b/.zarray": b"{"})


# --- layouts and planning ------------------------------------------------------------------------


def test_shard_of_and_names() -> None:
    grid = ChunkGrid("img", (100, 100, 100), (10, 10, 10), "/", "c", 1)
    layout = ShardLayout(grid, (2, 3, 4))
    assert layout.slots() == 24
    assert layout.shard_of((0, 0, 0)) == ((0, 0, 0), 0)
    assert layout.shard_of((3, 4, 9)) == ((1, 1, 2), 1 * 12 + 1 * 4 + 1)
    assert layout.shard_name((1, 1, 2)) == "img/c/1/1/2.shard"
    slots = {layout.shard_of((a, b, c))[1] for a in range(2) for b in range(3) for c in range(4)}
    assert slots == set(range(24))
    root_v2 = ShardLayout(ChunkGrid("", (10,), (1,), ".", "", 1), (5,))
    assert root_v2.shard_name((1,)) == "1.shard"
    with pytest.raises(PackingError):
        ShardLayout(grid, (2, 3))
    with pytest.raises(PackingError):
        ShardLayout(grid, (2, 0, 1))


def test_default_chunks_per_shard_4k_chunks() -> None:
    grid = ChunkGrid("", (100_000, 100_000), (32, 32), "/", "c", 4)  # 4 KiB chunks
    cps = default_chunks_per_shard(grid)
    size = math.prod(cps) * grid.chunk_nbytes()
    assert 64 << 20 <= size < (64 << 20) * 1.1
    assert max(cps) <= 2 * min(cps)  # balanced
    assert all(c <= g for c, g in zip(cps, grid.grid_shape(), strict=True))


def test_default_chunks_per_shard_odd_target_lands_near_it() -> None:
    grid = ChunkGrid("", (10**6,) * 3, (16, 16, 16), ".", "", 1)  # 4 KiB chunks
    target = 3 * 10**6
    cps = default_chunks_per_shard(grid, target)
    size = math.prod(cps) * grid.chunk_nbytes()
    assert target <= size < target * 1.3
    assert cps[2] >= cps[0]  # last dimensions first


@given(
    shape=st.lists(st.integers(0, 5000), min_size=1, max_size=4),
    chunk=st.integers(1, 64),
    itemsize=st.sampled_from([1, 2, 4, 8]),
    target=st.integers(1, 1 << 24),
)
def test_default_chunks_per_shard_never_exceeds_grid(
    shape: list[int], chunk: int, itemsize: int, target: int
) -> None:
    grid = ChunkGrid("a", tuple(shape), (chunk,) * len(shape), "/", "c", itemsize)
    cps = default_chunks_per_shard(grid, target)
    assert len(cps) == len(shape) and all(c >= 1 for c in cps)
    assert all(c <= max(1, g) for c, g in zip(cps, grid.grid_shape(), strict=True))
    whole_grid = all(c >= g for c, g in zip(cps, grid.grid_shape(), strict=True))
    assert whole_grid or math.prod(cps) * grid.chunk_nbytes() >= target


def test_default_chunks_per_shard_small_array_is_one_shard() -> None:
    grid = ChunkGrid("", (100, 70), (32, 32), ".", "", 4)
    assert default_chunks_per_shard(grid) == (4, 3)
    big = ChunkGrid("", (1000,), (1000,), ".", "", 1 << 20)  # one chunk beyond the target
    assert default_chunks_per_shard(big) == (1,)


def test_plan_shards_2d_with_metadata() -> None:
    files = {
        ".zgroup": b'{"zarr_format": 2}',
        "img/.zarray": v2([10, 9], [2, 3]),  # grid 5 x 3
        "img/.zattrs": b"{}",
    }
    grid = find_grids(files)[0]
    layout = ShardLayout(grid, (2, 2))
    chunks = [f"img/{i}.{j}" for i in range(5) for j in range(3)]
    extra = ["img/5.0", "img/0.3", "img/01.0", "img/notes.txt", "other/0.0"]
    paths = [*files, chunks[4], *extra, *chunks, chunks[0]]
    plans, loose = plan_shards([layout], paths)
    assert loose == [*files, *extra]
    assert [p.name for p in plans] == [
        "img/0.0.shard",
        "img/0.1.shard",
        "img/1.0.shard",
        "img/1.1.shard",
        "img/2.0.shard",
        "img/2.1.shard",
    ]
    first = plans[0]
    assert first.layout is layout
    assert [(m.path, m.slot) for m in first.members] == [
        ("img/0.0", 0),
        ("img/0.1", 1),
        ("img/1.0", 2),
        ("img/1.1", 3),
    ]
    edge = plans[-1]  # rows 4..5, columns 2..3: one chunk at slot 0
    assert [(m.path, m.slot) for m in edge.members] == [("img/4.2", 0)]
    assert sorted(m.path for p in plans for m in p.members) == sorted(chunks)
    for plan in plans:
        assert [m.slot for m in plan.members] == sorted(m.slot for m in plan.members)


def test_plan_shard_indices_gives_positions_by_slot() -> None:
    layout = ShardLayout(ChunkGrid("", (4, 4), (1, 1), ".", "", 1), (2, 2))
    paths = [".zarray", "1.1", "0.0", "notes", "0.1", "1.1", "3.3"]
    plans, loose = plan_shard_indices([layout], paths)
    assert list(loose) == [0, 3]
    assert [p.name for p in plans] == ["0.0.shard", "1.1.shard"]
    first = plans[0]
    # By slot; of the two positions of "1.1" (one slot) the first is kept.
    assert list(first.slots) == [0, 1, 3]
    assert list(first.positions) == [2, 4, 1]
    assert list(plans[1].positions) == [6]
    assert list(plans[1].slots) == [3]


def test_plan_shards_first_layout_wins_and_nested_arrays() -> None:
    outer = ShardLayout(ChunkGrid("", (4,), (1,), "/", "", 1), (2,))
    inner = ShardLayout(ChunkGrid("sub", (4,), (1,), "/", "", 1), (4,))
    twin = ShardLayout(ChunkGrid("sub", (8,), (1,), "/", "", 1), (4,))
    plans, loose = plan_shards([inner, twin, outer], ["sub/1", "sub/6", "3", "sub/x"])
    assert loose == ["sub/x"]
    by_name = {p.name: p for p in plans}
    assert by_name["sub/0.shard"].layout is inner
    assert by_name["sub/1.shard"].layout is twin
    assert [m.path for m in by_name["sub/1.shard"].members] == ["sub/6"]
    assert [m.path for m in by_name["1.shard"].members] == ["3"]
    whole = ShardLayout(ChunkGrid("sub", (8,), (1,), "/", "", 1), (8,))
    with pytest.raises(PackingError, match="same shard name"):
        plan_shards([inner, whole], ["sub/1", "sub/5"])


# --- building and verifying -------------------------------------------------------------------


def test_build_shard_round_trip() -> None:
    cps = (2, 3)
    members = [
        ("a/0.1", 1, b"first"),
        ("a/.zattrs", None, b"{}"),
        ("a/1.2", 5, b""),
        ("a/1.0", 3, bytes(range(256)) * 10),
    ]
    written: list[str] = []

    def stream() -> Any:
        for member in members:
            written.append(member[0])
            yield member

    sink = io.BytesIO()
    built = build_shard(cps, stream(), sink)
    data = sink.getvalue()
    assert written == [m[0] for m in members]
    assert isinstance(built, BuiltShard)
    assert built.size == len(data)
    assert built.md5 == md5(data)
    index_size = nbytes_encoded(cps, True)
    index = ShardIndex.decode(data[-index_size:], cps)
    index.validate(0, len(data) - index_size)
    assert int(index.present().sum()) == 3
    for (path, slot, content), record in zip(members, built.members, strict=True):
        assert (record.path, record.slot, record.length) == (path, slot, len(content))
        assert data[record.offset : record.offset + record.length] == content
        assert record.md5 == md5(content)
        if slot is not None:
            assert index.get(np.unravel_index(slot, cps)) == (record.offset, record.length)
    assert [r.offset for r in built.members] == [0, 5, 7, 7]
    assert index.get((0, 0)) is None
    assert member_problems(built.members, built.size) == []
    assert verify_members([data], built.members) == []


def test_build_shard_refuses_inconsistent_members() -> None:
    with pytest.raises(PackingError, match="slot 1"):
        build_shard((4,), [("a", 1, b"x"), ("b", 1, b"y")], io.BytesIO())
    with pytest.raises(PackingError, match="slot"):
        build_shard((4,), [("a", 4, b"x")], io.BytesIO())
    with pytest.raises(PackingError, match="twice"):
        build_shard((4,), [("a", 0, b"x"), ("a", None, b"y")], io.BytesIO())


def test_build_shard_empty() -> None:
    sink = io.BytesIO()
    built = build_shard((2, 2), [], sink)
    assert built.members == ()
    assert ShardIndex.decode(sink.getvalue(), (2, 2)).is_empty()
    assert built.size == 16 * 4 + 4


@pytest.mark.parametrize("encoding", ["/", "."])
def test_interop_zarr_python_reads_built_shards(tmp_path: Path, encoding: str) -> None:
    """Chunk files of an unsharded zarr-python array, packed by plan_shards/build_shard, are
    the shards of the same array with the sharding_indexed codec."""
    source = tmp_path / "source"
    data = np.arange(37 * 23, dtype="int32").reshape(37, 23)
    data[8:16, :] = 0  # whole chunks of fill value: zarr-python leaves them out
    root = zarr.open_group(str(source), mode="w", zarr_format=3)
    array = root.create_group("g").create_array(
        "img",
        shape=data.shape,
        chunks=(4, 5),
        dtype="int32",
        fill_value=0,
        chunk_key_encoding={"name": "default", "separator": encoding},
        compressors=[zarr.codecs.ZstdCodec(level=1)],
    )
    array[...] = data
    files = {
        p.relative_to(source).as_posix(): p.read_bytes() for p in source.rglob("*") if p.is_file()
    }
    metadata = {path: body for path, body in files.items() if path.endswith("zarr.json")}
    (grid,) = find_grids(metadata)
    assert grid == ChunkGrid("g/img", (37, 23), (4, 5), encoding, "c", 4)
    cps = (3, 2)
    layout = ShardLayout(grid, cps)
    plans, loose = plan_shards([layout], sorted(files))
    assert sorted(loose) == sorted(metadata)
    assert sum(len(p.members) for p in plans) == len(files) - len(metadata) < 10 * 5

    target = tmp_path / "sharded"
    source_doc = json.loads(files["g/img/zarr.json"])
    doc = dict(source_doc)
    doc["chunk_grid"] = {
        "name": "regular",
        "configuration": {"chunk_shape": [c * n for c, n in zip(grid.chunks, cps, strict=True)]},
    }
    doc["codecs"] = [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(grid.chunks),
                "codecs": source_doc["codecs"],
                "index_codecs": IndexCodecs().to_json(),
                "index_location": "end",
            },
        }
    ]
    (target / "g" / "img").mkdir(parents=True)
    (target / "zarr.json").write_bytes(files["zarr.json"])
    (target / "g" / "zarr.json").write_bytes(files["g/zarr.json"])
    (target / "g" / "img" / "zarr.json").write_text(json.dumps(doc))
    for plan in plans:
        sink = io.BytesIO()
        built = build_shard(cps, ((m.path, m.slot, files[m.path]) for m in plan.members), sink)
        assert built.md5 == md5(sink.getvalue())
        assert verify_members([sink.getvalue()], built.members) == []
        # zarr reads the shard at the key of its shard coordinates: the name without ".shard".
        key = plan.name.removesuffix(".shard")
        assert grid.chunk_coords(key) is not None
        out = target / key
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(sink.getvalue())

    reread = zarr.open_array(str(target), path="g/img", mode="r")
    assert reread.shards == (12, 10)
    assert np.array_equal(reread[...], data)
    assert np.array_equal(reread[5:30, 3:21], data[5:30, 3:21])


# --- member_problems ---------------------------------------------------------------------------


def test_member_problems() -> None:
    good = md5(b"x")
    members: list[dict[str, Any]] = [
        {"path": "a", "offset": 0, "length": 10, "md5": good},
        {"path": "b", "offset": 10, "size": 5, "md5": good},  # "size" accepted for length
        {"path": "empty", "offset": 12, "length": 0, "md5": good},  # inside b, but empty
        {"path": "c", "offset": 12, "length": 4, "md5": good},  # overlaps b
        {"path": "d", "offset": 95, "length": 10, "md5": good},  # past the end
        {"path": "e", "offset": -1, "length": 1, "md5": good},
        {"path": "f", "offset": 50, "length": -2, "md5": good},
        {"path": "a", "offset": 60, "length": 1, "md5": good},  # duplicate path
        {"path": "g", "offset": 70, "length": 1, "md5": good.upper()},
        {"path": "h", "offset": 71, "length": 1, "md5": "abc"},
        {"path": "i", "offset": "72", "length": 1, "md5": good},
        {"path": "j", "offset": 80, "md5": good},
    ]
    problems = member_problems(members, 100)
    flagged = [p["path"] for p in problems]
    assert sorted(flagged) == sorted(["c", "d", "e", "f", "a", "g", "h", "i", "j"])
    text = {p["path"]: p["problem"] for p in problems}
    assert "overlaps 'b'" in text["c"]
    assert "past" in text["d"]
    assert "negative offset" in text["e"]
    assert "negative length" in text["f"]
    assert "duplicate" in text["a"]
    assert "md5" in text["g"] and "md5" in text["h"]
    assert "integers" in text["i"] and "integers" in text["j"]
    records = [MemberRecord("x", 0, 4, good, 0), MemberRecord("y", 4, 4, good, None)]
    assert member_problems(records, 8) == []
    assert [p["path"] for p in member_problems(records, 7)] == ["y"]


def test_member_problems_finds_overlaps_in_any_order_of_a_generator() -> None:
    """Members are read once (a generator, as the pack batch parser passes them); ranges out
    of offset order are sorted before the overlap check, in order they are not."""
    good = md5(b"x")
    ranges = [("a", 0, 10), ("b", 10, 5), ("c", 12, 4), ("d", 30, 0), ("e", 30, 2)]
    for order in (ranges, ranges[::-1], [ranges[2], ranges[0], ranges[4], ranges[1], ranges[3]]):
        records = (MemberRecord(p, offset, length, good, None) for p, offset, length in order)
        problems = member_problems(records, 100)
        assert [(p["path"], p["problem"]) for p in problems] == [
            ("c", "range 12..16 overlaps 'b'")
        ], order
    huge = [MemberRecord("big", 1 << 62, 1 << 62, good, None)]
    assert [p["problem"] for p in member_problems(huge, 1 << 64)] == [
        f"range {1 << 62}..{1 << 63} is past any object's size"
    ]


# --- verify_members ----------------------------------------------------------------------------


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


member_contents = st.lists(st.binary(max_size=40), min_size=1, max_size=8)


def built_object(contents: list[bytes], gaps: list[int]) -> tuple[bytes, list[MemberRecord]]:
    """Members separated by gaps of filler bytes (as an index or unpacked bytes would be)."""
    data = b""
    records = []
    for i, (content, gap) in enumerate(zip(contents, gaps, strict=False)):
        data += b"\xaa" * gap
        records.append(MemberRecord(f"m{i}", len(data), len(content), md5(content), i))
        data += content
    return data + b"\xbb" * 7, records


@given(
    contents=member_contents,
    gaps=st.lists(st.integers(0, 5), min_size=8, max_size=8),
    cuts=st.lists(st.integers(0, 400), max_size=12),
    shuffle=st.randoms(use_true_random=False),
)
def test_verify_members_random_blocks(
    contents: list[bytes], gaps: list[int], cuts: list[int], shuffle: Any
) -> None:
    data, records = built_object(contents, gaps)
    shuffle.shuffle(records)  # any order
    assert member_problems(records, len(data)) == []
    assert verify_members(split(data, cuts), records) == []
    assert verify_members(iter([*split(data, cuts), b""]), records) == []


@given(
    contents=member_contents,
    gaps=st.lists(st.integers(0, 5), min_size=8, max_size=8),
    cuts=st.lists(st.integers(0, 400), max_size=12),
    which=st.integers(0, 7),
    where=st.integers(0, 10**6),
)
def test_verify_members_catches_a_flipped_byte(
    contents: list[bytes], gaps: list[int], cuts: list[int], which: int, where: int
) -> None:
    data, records = built_object(contents, gaps)
    victims = [r for r in records if r.length]
    if not victims:
        return
    victim = victims[which % len(victims)]
    position = victim.offset + where % victim.length
    corrupt = bytearray(data)
    corrupt[position] ^= 0x01
    result = verify_members(split(bytes(corrupt), cuts), records)
    content = bytes(corrupt[victim.offset : victim.offset + victim.length])
    assert result == [{"path": victim.path, "expected": victim.md5, "actual": md5(content)}]


@given(
    contents=member_contents,
    gaps=st.lists(st.integers(0, 5), min_size=8, max_size=8),
    cuts=st.lists(st.integers(0, 400), max_size=12),
    keep=st.integers(0, 400),
)
def test_verify_members_catches_truncation(
    contents: list[bytes], gaps: list[int], cuts: list[int], keep: int
) -> None:
    data, records = built_object(contents, gaps)
    keep = min(keep, len(data))
    result = verify_members(split(data[:keep], cuts), records)
    cut_short = [r for r in records if r.offset + r.length > keep]
    assert result == [{"path": r.path, "expected": r.md5, "actual": ""} for r in cut_short]


def test_verify_members_reports_each_wrong_member() -> None:
    data = b"0123456789"
    records = [
        MemberRecord("a", 0, 3, md5(b"012"), None),
        MemberRecord("b", 3, 3, md5(b"xxx"), None),
        MemberRecord("z", 10, 0, md5(b""), None),  # empty member at the very end
        MemberRecord("late", 8, 5, md5(b"89abc"), None),
    ]
    result = verify_members([data[:4], data[4:]], records)
    assert result == [
        {"path": "b", "expected": md5(b"xxx"), "actual": md5(b"345")},
        {"path": "late", "expected": md5(b"89abc"), "actual": ""},
    ]
    assert verify_members([], [MemberRecord("e", 0, 0, md5(b""), None)]) == []
