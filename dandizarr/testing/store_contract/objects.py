"""The contract of objects: puts, gets, ranges, missing keys, ETags, head_many, deletes."""

from __future__ import annotations

import pytest

from dandizarr.objectstore.base import (
    DELETE_BATCH_SIZE,
    InvalidRange,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    PreconditionFailed,
)
from dandizarr.testing.store_contract.support import (
    DIGITS,
    ContractBase,
    keys_of,
    md5,
)


class ObjectsContract(ContractBase):
    """Objects: what each read and write of one key (or a batch of keys) does."""

    def test_put_returns_info_and_get_returns_body(self, store: ObjectStore) -> None:
        info = store.put("a/b/c.bin", DIGITS, content_type="application/octet-stream")
        assert info == ObjectInfo("a/b/c.bin", 10, md5(DIGITS))
        assert store.get("a/b/c.bin") == DIGITS
        assert store.put("a/empty", b"") == ObjectInfo("a/empty", 0, md5(b""))
        assert store.get("a/empty") == b""

    def test_put_overwrites(self, store: ObjectStore) -> None:
        store.put("k", b"old")
        info = store.put("k", b"new body")
        assert store.get("k") == b"new body"
        assert store.head("k") == info == ObjectInfo("k", 8, md5(b"new body"))
        assert keys_of(store.list()) == ["k"]

    def test_missing_keys_raise_or_answer_none(self, store: ObjectStore) -> None:
        store.put("dir/child", b"x")
        # A "directory" of other keys is not an object either.
        for key in ["no/such/key", "dir", "dir/child/deeper"]:
            with pytest.raises(ObjectNotFound) as raised:
                store.get(key)
            assert raised.value.key == key and isinstance(raised.value, KeyError)
            with pytest.raises(ObjectNotFound):
                store.get_range(key, 0, 4)
            with pytest.raises(ObjectNotFound):
                store.get_range(key, 3, 3)
            # Not on first iteration: the caller learns before it starts a response.
            with pytest.raises(ObjectNotFound):
                store.iter_chunks(key)
            assert store.head(key) is None
            assert not store.exists(key)
        assert store.exists("dir/child")
        # A conditional read of a missing key is a missing key, not a failed condition (SeaweedFS
        # answers a directory's name 412 here, so the name is one no key lies below).
        with pytest.raises(ObjectNotFound):
            store.read_range("no/such/key", 0, 1, if_match=md5(b"x"))

    @pytest.mark.parametrize(
        ("start", "end", "expected"),
        [
            (0, None, DIGITS),
            (2, 5, b"234"),
            (7, None, b"789"),
            (5, 100, b"56789"),  # an end past the object is clamped
            (9, 10, b"9"),
            (-3, None, b"789"),  # suffix
            (-30, None, DIGITS),  # a suffix longer than the object is the whole object
            (10, None, b""),  # at the end, not past it
            (4, 4, b""),
        ],
    )
    def test_get_range(
        self, store: ObjectStore, start: int, end: int | None, expected: bytes
    ) -> None:
        store.put("digits", DIGITS)
        assert store.get_range("digits", start, end) == expected
        assert store.read_range("digits", start, end) == (expected, md5(DIGITS))

    def test_invalid_ranges_raise_invalid_range(self, store: ObjectStore) -> None:
        store.put("digits", DIGITS)
        store.put("empty", b"")
        for key, start, end in [
            ("digits", 11, None),
            ("digits", 11, 20),
            ("digits", 11, 11),
            ("digits", 5, 3),  # no range
            ("digits", -2, 5),  # a suffix takes no end
            ("empty", 1, None),
        ]:
            with pytest.raises(InvalidRange):
                store.get_range(key, start, end)
            with pytest.raises(InvalidRange):
                store.read_range(key, start, end)
        assert store.get_range("empty", 0) == b""
        assert store.get_range("empty", 0, 10) == b""
        assert store.get_range("empty", -5) == b""

    def test_read_range_returns_etag_and_checks_if_match(self, store: ObjectStore) -> None:
        etag = store.put("obj", DIGITS).etag
        assert etag == md5(DIGITS)
        assert store.read_range("obj", 1, 3) == (b"12", etag)
        assert store.read_range("obj", -2, if_match=etag) == (b"89", etag)
        # The quoted HTTP form is accepted too.
        assert store.read_range("obj", 0, 1, if_match=f'"{etag}"') == (b"0", etag)
        assert store.read_range("obj", 10, if_match=etag) == (b"", etag)
        with pytest.raises(PreconditionFailed) as raised:
            store.read_range("obj", 0, 4, if_match=md5(b"something else"))
        assert raised.value.key == "obj"

    def test_read_range_if_match_after_the_object_changed(self, store: ObjectStore) -> None:
        old = store.put("obj", b"version one").etag
        store.put("obj", b"version two")
        # The precondition is evaluated before the range, as S3 does.
        for start, end in [(0, 7), (100, None), (3, 3)]:
            with pytest.raises(PreconditionFailed):
                store.read_range("obj", start, end, if_match=old)

    def test_iter_chunks(self, store: ObjectStore) -> None:
        body = bytes(range(256)) * 4 + b"tail"
        store.put("big", body)
        chunks = list(store.iter_chunks("big", chunk_size=100))
        assert b"".join(chunks) == body
        assert len(chunks) > 1
        assert all(0 < len(chunk) <= 100 for chunk in chunks)

    def test_put_many_stores_every_object(self, store: ObjectStore) -> None:
        items = {f"pm/{i % 7}/{i}/.checksum": f"listing {i}".encode() for i in range(60)}
        store.put("pm/0/0/.checksum", b"the old version")
        store.put_many(items)
        for key, body in items.items():
            assert store.get(key) == body
        assert store.list_sorted("pm/") == [
            ObjectInfo(key, len(items[key]), md5(items[key])) for key in sorted(items)
        ]
        store.put_many({})

    def test_head_many(self, store: ObjectStore) -> None:
        keys = [f"many/{i}" for i in range(40)]
        for key in keys[:30]:
            store.put(key, key.encode())
        result = store.head_many(keys)
        assert list(result) == keys
        for key in keys[:30]:
            assert result[key] == ObjectInfo(key, len(key), md5(key.encode()))
        assert all(result[key] is None for key in keys[30:])
        assert store.head_many([]) == {}

    def test_head_many_agrees_with_head_wherever_keys_lie(self, store: ObjectStore) -> None:
        """Keys among many foreign ones, in other directories, before and after everything
        stored, duplicated, non-ASCII, and keys a directory walk lists out of byte order."""
        self.put_bulk(store, {f"hm/d/{i:05d}": b"x" * (i % 7) for i in range(0, 3000, 3)})
        self.put_listed_keys(store)
        for key in ["hm/a", "hm/d\u00e9/1", "hm/z/\U0001f600", "hm/\ue000"]:
            store.put(key, key.encode())
        wanted = [f"hm/d/{i:05d}" for i in range(0, 3000, 50)]
        wanted += [f"hm/d/{i:05d}" for i in (1, 2, 2999)]
        wanted += ["hm/a", "hm/d\u00e9/1", "hm/z/\U0001f600", "hm/\ue000", "hm/0", "hm/zz"]
        wanted += ["a", "zz", "hm/d/00000", "hm/d/00000"]
        # On SeaweedFS a listing from just before "p/a-b" skips the directory "p/a".
        wanted += ["p/a-b", "p/a/b", "p/a/c/d", "p/a/absent", "p/a0", "p/a-c"]
        result = store.head_many(wanted)
        assert list(result) == list(dict.fromkeys(wanted))
        assert result == {key: store.head(key) for key in wanted}
        absent = {key for key, info in result.items() if info is None}
        assert {"hm/d/00001", "p/a/absent", "p/a-c", "a", "zz"} <= absent
        assert result["hm/d/00150"] == ObjectInfo("hm/d/00150", 3, md5(b"xxx"))
        assert result["p/a/b"] == ObjectInfo("p/a/b", 5, md5(b"p/a/b"))

    def test_delete(self, store: ObjectStore) -> None:
        store.put("one", b"1")
        store.delete("one")
        store.delete("one")  # absent: fine
        assert store.head("one") is None
        with pytest.raises(ObjectNotFound):
            store.get("one")
        store.delete("never/there")
        store.delete_many([])
        # A deleted key can be written again.
        store.put("one", b"again")
        assert store.get("one") == b"again"

    def test_delete_many_more_than_one_batch(self, store: ObjectStore) -> None:
        keys = [f"del/{i:05d}" for i in range(DELETE_BATCH_SIZE + 7)]
        self.put_bulk(store, dict.fromkeys(keys, b"x"))
        store.put("keep/this", b"y")
        store.put("del-x", b"a sibling of the prefix")
        # Absent keys are fine; a generator is consumed lazily.
        store.delete_many(key for key in [*keys, "del/absent"])
        assert list(store.list("del/")) == []
        assert keys_of(store.list()) == ["del-x", "keep/this"]
        assert store.get("keep/this") == b"y"
