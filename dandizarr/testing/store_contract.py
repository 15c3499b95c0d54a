"""The object-store contract: what every ``ObjectStore`` backend must do, as one test class.

In the manner of zarr-python's ``zarr.testing.store.StoreTests``: a backend's test module
subclasses ``StoreContract``, overrides the ``store`` fixture (a fresh, empty store per test) and
sets the flags its backend needs; pytest then runs every contract test against it. What not
every backend has is a class of its own to mix in (``MultipartContract``,
``PresignedURLContract``), so no test is collected only to skip.
The service relies on each behaviour here (key order, ranges and their errors, missing keys,
ETags, versions, multipart uploads), so a backend that passes can stand in for another.

Needs pytest (and ``requests`` for URL tests), nothing of the server or Django: the in-memory and
local backends run the contract without a database. Presigned URLs need an HTTP server to answer
them; ``PresignedURLContract`` holds those tests apart, for stores that serve their URLs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
import requests

from dandizarr.objectstore.base import (
    DELETE_BATCH_SIZE,
    InvalidRange,
    ListingOrderError,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    PreconditionFailed,
)
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.multipart import MIN_PART, composite_etag, part_ranges

__all__ = ["LISTED_KEYS", "MultipartContract", "PresignedURLContract", "StoreContract", "md5"]

DIGITS = b"0123456789"

# Chosen so UTF-8 byte order differs from UTF-16 order (U+FFFF vs U+1F600), from a directory
# walk's order ('/' sorts between '-' and '0', '.' between them: "p/a-b" < "p/a.b" < "p/a/b" <
# "p/a0"), and so a page boundary falls on U+FFFF (SeaweedFS repeats that key on the next page).
LISTED_KEYS = [
    "p/A",
    "p/a-b",
    "p/a.b",
    "p/a/b",
    "p/a/c/d",
    "p/a0",
    "p/ab",
    "p/z",
    "p/é",
    "p/\uffff",
    "p/\U0001f600",
]


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def keys_of(infos: Any) -> list[str]:
    return [info.key for info in infos]


class StoreContract:
    """The contract tests; subclass, override ``store``, set the flags."""

    # Whether ``list`` streams in UTF-8 byte order and reads ``start_after`` as a position in
    # it (S3, local, memory). SeaweedFS lists directory by directory: such a store must still
    # list every key once, and ``list_ordered`` must say it cannot stream byte order.
    lists_in_byte_order: ClassVar[bool] = True
    # Whether a DELETE leaves a delete marker among the versions (S3 and memory; the local
    # backend keeps the replaced file and lists no marker).
    writes_delete_markers: ClassVar[bool] = True

    @pytest.fixture
    def store(self) -> ObjectStore:
        """A fresh, empty store (a backend's test class overrides this)."""
        raise NotImplementedError("a StoreContract subclass provides the store fixture")

    def put_bulk(self, store: ObjectStore, items: Mapping[str, bytes]) -> None:
        """Store many objects for a test whose subject is reading them (a backend may do it
        faster than ``put_many``: moto's model directly)."""
        store.put_many(items)

    def put_listed_keys(self, store: ObjectStore) -> None:
        for key in reversed(LISTED_KEYS):
            store.put(key, key.encode())
        store.put("other/x", b"not under p/")

    def assert_listing(self, listed: list[str], expected: list[str]) -> None:
        """``listed`` is ``expected``: exactly, on a byte-order store; else each key once."""
        if self.lists_in_byte_order:
            assert listed == expected
        else:
            assert sorted(listed) == expected and len(set(listed)) == len(listed)

    # --- objects --------------------------------------------------------------------------------

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

    # --- listing --------------------------------------------------------------------------------

    def test_list_every_key_once_in_order(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)
        listed = list(store.list("p/"))
        self.assert_listing(keys_of(listed), LISTED_KEYS)
        assert all(
            info == ObjectInfo(info.key, len(info.key.encode()), md5(info.key.encode()))
            for info in listed
        )
        # The empty prefix is every key.
        self.assert_listing(keys_of(store.list()), sorted([*LISTED_KEYS, "other/x"]))
        self.assert_listing(keys_of(store.list("")), sorted([*LISTED_KEYS, "other/x"]))

    def test_list_sorted_is_byte_order(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)
        assert keys_of(store.list_sorted("p/")) == LISTED_KEYS
        assert keys_of(store.list_sorted()) == sorted([*LISTED_KEYS, "other/x"])
        assert store.list_sorted("p/a/")[0] == ObjectInfo("p/a/b", 5, md5(b"p/a/b"))
        assert store.list_sorted("nothing/") == []

    def test_list_ordered_streams_byte_order_or_says_it_cannot(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)
        if self.lists_in_byte_order:
            assert keys_of(store.list_ordered("p/")) == LISTED_KEYS
            return
        streamed: list[str] = []
        with pytest.raises(ListingOrderError) as raised:
            streamed.extend(info.key for info in store.list_ordered("p/"))
        # Everything yielded before the error was in byte order; the error names both keys.
        assert streamed == sorted(streamed) and streamed
        assert raised.value.key < raised.value.previous
        assert repr(raised.value.key) in str(raised.value)

    def test_list_prefix_is_a_string_prefix(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)

        def listed(prefix: str) -> list[str]:
            return keys_of(store.list(prefix))

        self.assert_listing(listed("p/a"), LISTED_KEYS[1:7])
        self.assert_listing(listed("p/a."), ["p/a.b"])
        assert listed("p/a/") == ["p/a/b", "p/a/c/d"]
        assert listed("p/a/c/d") == ["p/a/c/d"]
        assert listed("p/nothing") == []
        assert listed("nothing/") == []

    def test_list_start_after(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)

        def keys(start_after: str, prefix: str = "p/") -> list[str]:
            return keys_of(store.list(prefix, start_after=start_after))

        assert keys("p/\U0001f600") == []
        assert keys("a") == keys_of(store.list("p/"))  # before the prefix
        assert keys("p/é") == LISTED_KEYS[9:]  # past every directory: the orders agree
        if not self.lists_in_byte_order:
            # A position in the server's own walk: only ever fewer keys, never foreign ones.
            for start_after in ["p/a/b", "p/a/c", "p/a/", "p/a-a"]:
                listed = keys(start_after)
                assert set(listed) < set(LISTED_KEYS) and len(set(listed)) == len(listed)
            return
        assert keys("p/a/b") == LISTED_KEYS[4:]
        # Not itself a key, and inside a "directory": its later siblings still come.
        assert keys("p/a/c") == LISTED_KEYS[4:]
        assert keys("p/a/") == LISTED_KEYS[3:]
        assert keys("p/a-a") == LISTED_KEYS[1:]
        assert keys("p/a-b") == LISTED_KEYS[2:]
        assert keys("", prefix="") == sorted([*LISTED_KEYS, "other/x"])
        assert keys("p/a/b", prefix="p/a/") == ["p/a/c/d"]

    def test_list_pagination(self, store: ObjectStore) -> None:
        self.put_listed_keys(store)
        whole = keys_of(store.list("p/"))
        assert keys_of(store.list("p/", page_size=3)) == whole
        after_a0 = keys_of(store.list("p/", start_after="p/a0", page_size=2))
        assert after_a0 == ["p/ab", "p/z", "p/é", "p/\uffff", "p/\U0001f600"]

    # --- versions -------------------------------------------------------------------------------

    @pytest.fixture
    def versioned(self, store: ObjectStore) -> ObjectStore:
        assert not store.versioning_enabled()
        store.enable_versioning()
        assert store.versioning_enabled()
        return store

    def test_versions_keep_what_was_overwritten(self, versioned: ObjectStore) -> None:
        store = versioned
        store.put("v/k", b"first")
        store.put("v/k", b"second")
        store.put("v/other", b"o")
        versions = [v for v in store.list_versions("v/k") if v.key == "v/k"]
        assert [(v.etag, v.size, v.latest) for v in versions] == [
            (md5(b"second"), 6, True),
            (md5(b"first"), 5, False),
        ]
        newest, oldest = versions
        assert oldest.replaced_at is not None and newest.replaced_at is None
        assert oldest.idle_since() >= oldest.modified
        assert store.get_version_range("v/k", oldest.version_id, 1, 4) == b"irs"
        assert store.get_version_range("v/k", newest.version_id, 0, 6) == b"second"
        assert keys_of(store.list_versions("v/")) == ["v/k", "v/k", "v/other"]
        found = store.find_version("v/k", md5(b"first"))
        assert found is not None and (found.version_id, found.latest) == (oldest.version_id, False)
        latest = store.find_version("v/k", None)
        assert latest is not None and latest.etag == md5(b"second")
        assert store.find_version("v/k", md5(b"never")) is None
        assert store.find_version("v/absent", None) is None

    def test_versions_survive_a_delete_and_restore(self, versioned: ObjectStore) -> None:
        store = versioned
        store.put("v/k", b"first")
        store.put("v/k", b"second")
        store.delete("v/k")
        assert store.head("v/k") is None and list(store.list("v/")) == []
        markers = [v for v in store.list_versions("v/k") if v.delete_marker]
        assert len(markers) == (1 if self.writes_delete_markers else 0)
        if markers:
            assert markers[0].latest and markers[0].etag == ""
        # A delete marker is never what a reader finds.
        newest = store.find_version("v/k", None)
        assert newest is not None and newest.etag == md5(b"second")
        first = store.find_version("v/k", md5(b"first"))
        assert first is not None
        store.restore_version("v/k", first.version_id)
        assert store.get("v/k") == b"first"
        assert keys_of(store.list("v/")) == ["v/k"]
        # The bytes the restore replaced are kept in turn.
        assert store.find_version("v/k", md5(b"second")) is not None

    def test_delete_versions_for_good(self, versioned: ObjectStore) -> None:
        store = versioned
        store.put("v/k", b"first")
        store.put("v/k", b"second")
        first = store.find_version("v/k", md5(b"first"))
        assert first is not None
        store.delete_versions([(first.key, first.version_id), ("v/absent", first.version_id)])
        store.delete_versions([(first.key, first.version_id)])  # gone already: fine
        assert store.find_version("v/k", md5(b"first")) is None
        with pytest.raises(ObjectNotFound):
            store.get_version_range("v/k", first.version_id, 0, 1)
        assert store.get("v/k") == b"second"
        # Deleting the current version by id removes the object.
        second = store.find_version("v/k", md5(b"second"))
        assert second is not None
        store.delete_versions([("v/k", second.version_id)])
        assert store.head("v/k") is None


class MultipartContract:
    """Multipart uploads, for stores that take them (``takes_multipart``: S3, memory)."""

    @pytest.fixture
    def store(self) -> ObjectStore:
        raise NotImplementedError("a MultipartContract subclass provides the store fixture")

    def upload_part(
        self, store: ObjectStore, key: str, upload_id: str, number: int, data: bytes
    ) -> None:
        """PUT part ``number`` of a multipart upload as a client does: to its presigned URL."""
        [url] = store.presigned_part_urls(
            key, upload_id, [md5(data)], expires_in=600, first_part=number
        )
        response = requests.put(
            url, data=data, headers={"Content-MD5": content_md5_header(md5(data))}, timeout=60
        )
        assert response.status_code == 200, response.text

    @pytest.fixture
    def multipart(self, store: ObjectStore) -> ObjectStore:
        assert store.takes_multipart
        return store

    def upload_parts(
        self, store: ObjectStore, key: str, upload_id: str, data: bytes, size: int
    ) -> list[str]:
        ranges = part_ranges(len(data), size)
        for number, (a, b) in enumerate(ranges, start=1):
            self.upload_part(store, key, upload_id, number, data[a:b])
        return [md5(data[a:b]) for a, b in ranges]

    def test_multipart_parts_complete_into_the_composite_etag(self, multipart: ObjectStore) -> None:
        store, key = multipart, "zarr/a/big"
        data = os.urandom(2 * MIN_PART + 1234)
        upload_id = store.create_multipart_upload(key)
        assert store.head(key) is None  # nothing visible before completion
        md5s = self.upload_parts(store, key, upload_id, data, MIN_PART)
        parts = store.list_parts(key, upload_id)
        assert [(p.number, p.etag, p.size) for p in parts] == [
            (1, md5s[0], MIN_PART),
            (2, md5s[1], MIN_PART),
            (3, md5s[2], 1234),
        ]
        assert [u.upload_id for u in store.list_multipart_uploads("zarr/a/")] == [upload_id]
        assert list(store.list_multipart_uploads("zarr/b/")) == []
        etag = store.complete_multipart_upload(key, upload_id, [(p.number, p.etag) for p in parts])
        assert etag == composite_etag(md5s)
        assert store.head(key) == ObjectInfo(key, len(data), etag)
        assert store.get(key) == data
        assert store.get_range(key, MIN_PART - 2, MIN_PART + 2) == data[MIN_PART - 2 : MIN_PART + 2]
        assert list(store.list_multipart_uploads("zarr/a/")) == []
        with pytest.raises(ObjectNotFound):
            store.list_parts(key, upload_id)

    def test_multipart_abort_drops_the_parts(self, multipart: ObjectStore) -> None:
        store, key = multipart, "zarr/a/aborted"
        upload_id = store.create_multipart_upload(key)
        self.upload_parts(store, key, upload_id, os.urandom(1000), 600)
        store.abort_multipart_upload(key, upload_id)
        store.abort_multipart_upload(key, upload_id)  # gone already: fine
        with pytest.raises(ObjectNotFound):
            store.list_parts(key, upload_id)
        assert list(store.list_multipart_uploads("zarr/a/")) == []
        assert store.head(key) is None

    def test_multipart_parts_below_the_minimum_are_refused(self, multipart: ObjectStore) -> None:
        """Why tests use 5 MiB parts: every store refuses smaller ones, as S3 does."""
        store, key = multipart, "zarr/a/small"
        upload_id = store.create_multipart_upload(key)
        self.upload_parts(store, key, upload_id, os.urandom(3000), 1000)
        parts = store.list_parts(key, upload_id)
        with pytest.raises(ObjectStoreError, match="EntityTooSmall"):
            store.complete_multipart_upload(key, upload_id, [(p.number, p.etag) for p in parts])
        assert store.head(key) is None


class PresignedURLContract:
    """Presigned URLs, for stores whose URLs an HTTP server answers (S3; the local backend
    with the web app's storage view)."""

    # What a GET of a missing key's URL answers (moto: 403 for a URL with response-header
    # overrides; S3 and SeaweedFS: 404).
    missing_get_status: ClassVar[int] = 404

    @pytest.fixture
    def store(self) -> ObjectStore:
        raise NotImplementedError("a PresignedURLContract subclass provides the store fixture")

    def put_key(self, store: ObjectStore, key: str, md5_hex: str) -> str:
        """A key the store takes a presigned PUT at (the local endpoint takes only keys an
        upload batch expects: its test class overrides this)."""
        return key

    @pytest.mark.parametrize("path", ["up/file.bin", "up/naïve name +%?#.bin"])
    def test_presigned_put_with_content_md5(self, store: ObjectStore, path: str) -> None:
        body = f"uploaded through a presigned URL to {path}".encode()
        key = self.put_key(store, path, md5(body))
        url = store.presigned_put_url(key, md5(body), expires_in=60)
        response = requests.put(
            url, data=body, headers={"Content-MD5": content_md5_header(md5(body))}, timeout=30
        )
        assert response.status_code == 200, response.text
        assert response.headers["ETag"].strip('"') == md5(body)
        assert store.head(key) == ObjectInfo(key, len(body), md5(body))
        assert store.get(key) == body

    def test_presigned_get_with_range(self, store: ObjectStore) -> None:
        store.put("down/digits", DIGITS)
        url = store.presigned_get_url("down/digits", expires_in=60)
        whole = requests.get(url, timeout=30)
        assert whole.status_code == 200
        assert whole.content == DIGITS
        assert whole.headers["ETag"].strip('"') == md5(DIGITS)
        part = requests.get(url, headers={"Range": "bytes=2-5"}, timeout=30)
        assert part.status_code == 206
        assert part.content == b"2345"
        assert part.headers["Content-Range"] == "bytes 2-5/10"
        suffix = requests.get(url, headers={"Range": "bytes=-3"}, timeout=30)
        assert suffix.status_code == 206
        assert suffix.content == b"789"
        beyond = requests.get(url, headers={"Range": "bytes=10-"}, timeout=30)
        assert beyond.status_code == 416
        missing = store.presigned_get_url("down/missing", expires_in=60)
        assert requests.get(missing, timeout=30).status_code == self.missing_get_status

    @pytest.mark.parametrize("uploaded_type", ["text/html", "image/svg+xml"])
    def test_presigned_get_serves_user_bytes_as_an_inert_attachment(
        self, store: ObjectStore, uploaded_type: str
    ) -> None:
        """Whatever type the uploader gave, a storage URL's reply is bytes to save, never a
        page: the local endpoint sets it, S3 URLs carry it as signed response-header overrides."""
        store.put("down/evil.html", b"<script>parent.pwned=1</script>", content_type=uploaded_type)
        url = store.presigned_get_urls(["down/evil.html"], expires_in=60)[0]
        for signed in (url, store.presigned_get_url("down/evil.html", expires_in=60)):
            response = requests.get(signed, timeout=30)
            assert response.status_code == 200
            assert response.content == b"<script>parent.pwned=1</script>"
            assert response.headers["Content-Type"] == "application/octet-stream"
            assert response.headers["Content-Disposition"] == "attachment"
