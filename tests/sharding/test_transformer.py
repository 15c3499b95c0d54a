"""The sharding storage transformer draft over MemoryStore, DirectoryStore and S3."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dandizarr.sharding.index import ShardFormatError
from dandizarr.sharding.store import CountingStore, DirectoryStore, KeyValueStore, MemoryStore
from dandizarr.sharding.transformer import ShardingTransformer

EMPTY = 2**64 - 1


def transformer(inner: KeyValueStore | None = None, **kwargs: object) -> ShardingTransformer:
    options: dict[str, object] = {"array_path": "foo/baz", "chunks_per_shard": (32, 2)}
    options.update(kwargs)
    return ShardingTransformer(inner if inner is not None else MemoryStore(), **options)  # type: ignore[arg-type]


def test_key_translation_from_the_draft() -> None:
    t = transformer()
    assert t.shard_key("data/root/foo/baz/c96/18") == "data/root/foo/baz/c3/9"
    assert t.shard_key("data/root/foo/baz/c127/19") == "data/root/foo/baz/c3/9"
    assert t.shard_key("data/root/foo/baz/c128/19") == "data/root/foo/baz/c4/9"
    dotted = transformer(separator=".")
    assert dotted.shard_key("data/root/foo/baz/c96.18") == "data/root/foo/baz/c3.9"


@pytest.mark.parametrize(
    "key",
    [
        "meta/root/foo/baz.array.json",
        "data/root/foo/baz/c96",  # wrong number of dimensions
        "data/root/foo/baz/c96/18/1",
        "data/root/foo/baz/c96/-1",
        "data/root/foo/baz/c096/18",  # not canonical: would alias c96/18
        "data/root/foo/baz/c96.18",  # other separator
        "data/root/foo/other/c96/18",
        "data/root/foo/bazz/c96/18",
        "data/root/foo/baz/x96/18",
    ],
)
def test_other_keys_pass_through(key: str) -> None:
    inner = MemoryStore()
    t = transformer(inner)
    assert t.shard_key(key) is None
    t.set(key, b"value")
    assert inner.data == {key: b"value"}
    assert t.get(key) == b"value"
    assert list(t.list_prefix("")) == [key]
    t.erase(key)
    assert inner.data == {}


def test_shard_binary_format() -> None:
    inner = MemoryStore()
    t = transformer(inner, chunks_per_shard=(2, 2))
    t.set_values({"data/root/foo/baz/c1/1": b"dd", "data/root/foo/baz/c0/1": b"b"})
    shard = inner.data["data/root/foo/baz/c0/0"]
    assert len(shard) == 3 + 16 * 4  # index of 16 bytes per chunk at the end
    index = struct.unpack("<8Q", shard[-64:])
    # C order (0,0) (0,1) (1,0) (1,1); chunks written in Morton order: (0,1) then (1,1).
    assert index == (EMPTY, EMPTY, 0, 1, EMPTY, EMPTY, 1, 2)
    assert shard[:3] == b"bdd"


def test_index_size_of_the_draft_example() -> None:
    inner = MemoryStore()
    transformer(inner).set("data/root/foo/baz/c96/18", b"x")
    assert len(inner.data["data/root/foo/baz/c3/9"]) == 1 + 1024


@pytest.fixture(params=["memory", "directory", "s3"])
def inner_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyValueStore]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "directory":
        yield DirectoryStore(tmp_path)
    else:
        s3 = pytest.importorskip("dandizarr.objectstore.s3")
        from dandizarr.sharding.store import ObjectStoreKV

        endpoint = request.getfixturevalue("moto_server")
        bucket = request.getfixturevalue("s3_bucket")
        yield ObjectStoreKV(s3.S3ObjectStore(bucket, endpoint_url=endpoint), prefix="arr/")


def test_chunk_lifecycle(inner_store: KeyValueStore) -> None:
    t = transformer(inner_store, chunks_per_shard=(2, 3))
    values = {
        f"data/root/foo/baz/c{i}/{j}": f"{i},{j}".encode() * (i + 1)
        for i in range(3)
        for j in range(4)
    }
    values["meta/root/foo/baz.array.json"] = b"{}"
    t.set_values(values)
    shards = sorted(inner_store.list_prefix(""))
    assert shards == [
        "data/root/foo/baz/c0/0",
        "data/root/foo/baz/c0/1",
        "data/root/foo/baz/c1/0",
        "data/root/foo/baz/c1/1",
        "meta/root/foo/baz.array.json",
    ]
    for key, value in values.items():
        assert t.get(key) == value
    assert list(t.list()) == sorted(values)
    assert t.get("data/root/foo/baz/c5/5") is None

    # Overwrite one chunk, keep its neighbours.
    t.set("data/root/foo/baz/c1/1", b"new")
    assert t.get("data/root/foo/baz/c1/1") == b"new"
    assert t.get("data/root/foo/baz/c1/2") == values["data/root/foo/baz/c1/2"]

    # Erasing some chunks of a shard keeps the shard; the last one deletes it.
    t.erase_values(["data/root/foo/baz/c2/0", "data/root/foo/baz/c2/9"])
    assert t.get("data/root/foo/baz/c2/0") is None
    assert "data/root/foo/baz/c1/0" in set(inner_store.list_prefix(""))
    t.erase_values(["data/root/foo/baz/c2/1", "data/root/foo/baz/c2/2"])
    assert "data/root/foo/baz/c1/0" not in set(inner_store.list_prefix(""))
    assert t.get("data/root/foo/baz/c2/3") == values["data/root/foo/baz/c2/3"]
    t.erase_prefix("data/root/foo/baz/")
    assert list(inner_store.list_prefix("")) == ["meta/root/foo/baz.array.json"]


def test_partial_values(inner_store: KeyValueStore) -> None:
    t = transformer(inner_store, chunks_per_shard=(4, 4))
    t.set_values({"data/root/foo/baz/c0/0": b"0123456789", "data/root/foo/baz/c1/2": b"abcdef"})
    got = t.get_partial_values(
        [
            ("data/root/foo/baz/c0/0", 2, 5),
            ("data/root/foo/baz/c1/2", -2, None),
            ("data/root/foo/baz/c0/0", 8, 100),
            ("data/root/foo/baz/c3/3", 0, None),
            ("data/root/foo/baz/c1/2", 0, None),
        ]
    )
    assert got == [b"234", b"ef", b"89", None, b"abcdef"]
    t.set_partial_values(
        [
            ("data/root/foo/baz/c0/0", 8, b"XYZ"),
            ("data/root/foo/baz/c1/2", 0, b"A"),
            ("data/root/foo/baz/c2/2", 2, b"new"),
        ]
    )
    assert t.get("data/root/foo/baz/c0/0") == b"01234567XYZ"
    assert t.get("data/root/foo/baz/c1/2") == b"Abcdef"
    assert t.get("data/root/foo/baz/c2/2") == b"\x00\x00new"
    with pytest.raises(ValueError, match="invalid byte range"):
        t.get_partial_values([("data/root/foo/baz/c0/0", 5, 2)])


def test_reads_take_two_requests_per_shard() -> None:
    inner = CountingStore(MemoryStore())
    t = transformer(inner, chunks_per_shard=(4, 4))
    t.set_values(
        {f"data/root/foo/baz/c{i}/{j}": bytes([i, j]) * 100 for i in range(8) for j in range(2)}
    )
    inner.reset()
    keys = [
        ("data/root/foo/baz/c0/0", 0, None),
        ("data/root/foo/baz/c3/1", 10, 20),
        ("data/root/foo/baz/c5/0", 0, None),
    ]
    assert t.get_partial_values(keys) == [
        bytes([0, 0]) * 100,
        (bytes([3, 1]) * 100)[10:20],
        bytes([5, 0]) * 100,
    ]
    assert (
        inner.requests
        == [("get_range", "data/root/foo/baz/c0/0")] * 2
        + [("get_range", "data/root/foo/baz/c1/0")] * 2
    )


def test_writing_a_full_shard_does_not_read() -> None:
    inner = CountingStore(MemoryStore())
    t = transformer(inner, chunks_per_shard=(2, 1))
    t.set_values({"data/root/foo/baz/c0/0": b"a", "data/root/foo/baz/c1/0": b"b"})
    t.erase_values(["data/root/foo/baz/c0/0", "data/root/foo/baz/c1/0"])
    assert [op for op, _ in inner.requests] == ["set", "delete"]


def test_erase_chunk_marks_index_entry_empty() -> None:
    inner = MemoryStore()
    t = transformer(inner, chunks_per_shard=(1, 2))
    t.set_values({"data/root/foo/baz/c0/0": b"aaaa", "data/root/foo/baz/c0/1": b"bb"})
    t.erase("data/root/foo/baz/c0/0")
    shard = inner.data["data/root/foo/baz/c0/0"]
    assert struct.unpack("<4Q", shard[-32:]) == (EMPTY, EMPTY, 0, 2)
    assert shard[:-32] == b"bb"  # the erased chunk's bytes are reclaimed


def test_list_prefix_translates_partial_chunk_prefixes() -> None:
    inner = CountingStore(MemoryStore())
    t = transformer(inner)
    keys = [
        "data/root/foo/baz/c96/18",
        "data/root/foo/baz/c96/1",
        "data/root/foo/baz/c9/18",
        "data/root/foo/baz/c1/0",
    ]
    t.set_values(dict.fromkeys(keys, b"v"))
    inner.reset()
    assert list(t.list_prefix("data/root/foo/baz/c96/1")) == [
        "data/root/foo/baz/c96/1",
        "data/root/foo/baz/c96/18",
    ]
    assert inner.requests[0] == ("list_prefix", "data/root/foo/baz/c3/")
    assert list(t.list_prefix("data/root/foo/baz/c9")) == [
        "data/root/foo/baz/c9/18",  # "/" sorts before "6"
        "data/root/foo/baz/c96/1",
        "data/root/foo/baz/c96/18",
    ]
    assert list(t.list_prefix("data/root/foo/baz/c96/18/")) == []


def test_list_dir() -> None:
    t = transformer(chunks_per_shard=(2, 2))
    t.set_values(
        {
            "meta/root/foo/baz.array.json": b"{}",
            "data/root/foo/baz/c0/0": b"a",
            "data/root/foo/baz/c3/1": b"b",
            "data/root/foo/baz/extra": b"c",
        }
    )
    top = t.list_dir("data/root/")
    assert (top.keys, top.prefixes) == ([], ["data/root/foo/"])
    array = t.list_dir("data/root/foo/baz")
    assert array.keys == ["data/root/foo/baz/extra"]
    # Prefixes for every chunk row the two shards cover (unverified, as the draft allows).
    assert array.prefixes == [f"data/root/foo/baz/c{i}/" for i in range(4)]
    row = t.list_dir("data/root/foo/baz/c3/")
    assert (row.keys, row.prefixes) == (["data/root/foo/baz/c3/1"], [])
    assert t.list_dir("data/root/foo/baz/c2/").keys == []  # covered by a shard, but empty

    dotted = transformer(chunks_per_shard=(2, 2), separator=".")
    dotted.set_values({"data/root/foo/baz/c0.0": b"a", "data/root/foo/baz/c3.1": b"b"})
    assert dotted.list_dir("data/root/foo/baz/").keys == [
        "data/root/foo/baz/c0.0",
        "data/root/foo/baz/c3.1",
    ]


def test_erase_prefix_deletes_whole_shards_without_reading() -> None:
    inner = CountingStore(MemoryStore())
    t = transformer(inner, chunks_per_shard=(1, 4))
    t.set_values({f"data/root/foo/baz/c{i}/{j}": b"x" for i in range(3) for j in range(8)})
    t.set("data/root/foo/baz/zattrs", b"{}")
    inner.reset()
    t.erase_prefix("data/root/foo/baz/c1/")  # chunks_per_shard[0] == 1: shards c1/0, c1/1 whole
    assert [op for op, _ in inner.requests] == ["list_prefix", "delete", "delete"]
    t.erase_prefix("data/root/foo/baz/c2/1")  # c2/1 only (c2/10.. do not exist)
    assert list(t.list_prefix("data/root/foo/baz/c2/")) == [
        f"data/root/foo/baz/c2/{j}" for j in (0, 2, 3, 4, 5, 6, 7)
    ]
    t.erase_prefix("data/root/foo/baz/c")
    assert list(t.list()) == ["data/root/foo/baz/zattrs"]


def test_corrupt_shards() -> None:
    inner = MemoryStore()
    t = transformer(inner, chunks_per_shard=(1, 2))
    inner.data["data/root/foo/baz/c0/0"] = b"\x00" * 20  # shorter than the 32-byte index
    with pytest.raises(ShardFormatError):
        t.get("data/root/foo/baz/c0/0")
    inner.data["data/root/foo/baz/c0/0"] = struct.pack("<4Q", 0, 100, EMPTY, EMPTY)
    with pytest.raises(ShardFormatError, match="past the end"):
        t.get("data/root/foo/baz/c0/0")
    with pytest.raises(ShardFormatError):
        t.set("data/root/foo/baz/c0/1", b"x")  # rewriting needs the (corrupt) old chunks
    inner.data["data/root/foo/baz/c0/0"] = struct.pack("<4Q", 0, EMPTY, EMPTY, EMPTY)
    with pytest.raises(ShardFormatError):
        t.get("data/root/foo/baz/c0/1")


def test_reads_notice_a_concurrently_rewritten_shard() -> None:
    inner = MemoryStore()
    t = transformer(inner, chunks_per_shard=(1, 2))
    t.set("data/root/foo/baz/c0/0", b"before")
    read = t.get_range("data/root/foo/baz/c0/0", 0)
    assert read is not None and read.data == b"before"
    t.set("data/root/foo/baz/c0/1", b"neighbour")
    from dandizarr.sharding.store import VersionMismatch

    with pytest.raises(VersionMismatch):
        t.get_range("data/root/foo/baz/c0/0", 0, if_version=read.version)


@given(
    st.dictionaries(
        st.tuples(st.integers(0, 5), st.integers(0, 5)), st.binary(max_size=8), max_size=20
    ),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=10),
)
@settings(max_examples=40, deadline=None)
def test_behaves_like_a_dict(
    values: dict[tuple[int, int], bytes], erased: list[tuple[int, int]]
) -> None:
    t = transformer(chunks_per_shard=(2, 3))
    model = {f"data/root/foo/baz/c{i}/{j}": v for (i, j), v in values.items()}
    t.set_values(model)
    erased_keys = [f"data/root/foo/baz/c{i}/{j}" for i, j in erased]
    t.erase_values(erased_keys)
    for key in erased_keys:
        model.pop(key, None)
    assert list(t.list()) == sorted(model)
    assert all(t.get(k) == v for k, v in model.items())
    assert len(list(t.inner.list_prefix(""))) == len({t.shard_key(k) for k in model})
