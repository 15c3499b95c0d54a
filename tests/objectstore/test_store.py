"""One suite, run against both backends: they must be interchangeable."""

from __future__ import annotations

import hashlib

import pytest
import requests

from dandizarr.objectstore import (
    DELETE_BATCH_SIZE,
    InvalidRange,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    PreconditionFailed,
)
from dandizarr.objectstore.base import LISTED_PER_RANGE
from dandizarr.objectstore.digests import content_md5_header
from dandizarr.objectstore.local import LocalObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr.sharding.store import ObjectStoreKV, VersionMismatch
from tests.support.api import put_key_for
from tests.support.moto_objects import put_objects

DIGITS = b"0123456789"


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def test_put_returns_info_and_get_returns_body(store: ObjectStore) -> None:
    info = store.put("a/b/c.bin", DIGITS, content_type="application/octet-stream")
    assert info == ObjectInfo("a/b/c.bin", 10, md5(DIGITS))
    assert store.get("a/b/c.bin") == DIGITS


def test_put_overwrites(store: ObjectStore) -> None:
    store.put("k", b"old")
    info = store.put("k", b"new body")
    assert store.get("k") == b"new body"
    assert store.head("k") == info == ObjectInfo("k", 8, md5(b"new body"))


def test_get_missing_raises(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as raised:
        store.get("no/such/key")
    assert raised.value.key == "no/such/key"
    # A "directory" of other keys is not an object either.
    store.put("dir/child", b"x")
    with pytest.raises(ObjectNotFound):
        store.get("dir")


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
def test_get_range(store: ObjectStore, start: int, end: int | None, expected: bytes) -> None:
    store.put("digits", DIGITS)
    assert store.get_range("digits", start, end) == expected


@pytest.mark.parametrize(
    ("start", "end"),
    [(11, None), (11, 20), (11, 11), (5, 3), (-2, 5)],
)
def test_get_range_invalid(store: ObjectStore, start: int, end: int | None) -> None:
    store.put("digits", DIGITS)
    with pytest.raises(InvalidRange):
        store.get_range("digits", start, end)


def test_get_range_of_empty_object(store: ObjectStore) -> None:
    store.put("empty", b"")
    assert store.get_range("empty", 0) == b""
    assert store.get_range("empty", 0, 10) == b""
    assert store.get_range("empty", -5) == b""
    with pytest.raises(InvalidRange):
        store.get_range("empty", 1)


def test_get_range_missing(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound):
        store.get_range("missing", 0, 4)
    with pytest.raises(ObjectNotFound):
        store.get_range("missing", 3, 3)


def test_read_range_returns_etag_and_checks_if_match(store: ObjectStore) -> None:
    etag = store.put("obj", DIGITS).etag
    assert store.read_range("obj", 1, 3) == (b"12", md5(DIGITS))
    assert store.read_range("obj", -2, if_match=etag) == (b"89", etag)
    # The quoted HTTP form is accepted too.
    assert store.read_range("obj", 0, 1, if_match=f'"{etag}"') == (b"0", etag)
    # The same empty range check travels with the condition.
    assert store.read_range("obj", 10, if_match=etag) == (b"", etag)
    with pytest.raises(PreconditionFailed) as raised:
        store.read_range("obj", 0, 4, if_match=md5(b"something else"))
    assert raised.value.key == "obj"


def test_read_range_if_match_after_the_object_changed(store: ObjectStore) -> None:
    old = store.put("obj", b"version one").etag
    store.put("obj", b"version two")
    with pytest.raises(PreconditionFailed):
        store.read_range("obj", 0, 7, if_match=old)
    # The precondition is evaluated before the range, as S3 does.
    with pytest.raises(PreconditionFailed):
        store.read_range("obj", 100, if_match=old)
    with pytest.raises(PreconditionFailed):
        store.read_range("obj", 3, 3, if_match=old)


def test_sharding_adapter_maps_conditional_reads(store: ObjectStore) -> None:
    kv = ObjectStoreKV(store, prefix="zarr/x/")
    kv.set("c/0", DIGITS)
    read = kv.get_range("c/0", -4)
    assert read is not None
    assert read.data == b"6789"
    store.put("zarr/x/c/0", b"rewritten")
    with pytest.raises(VersionMismatch):
        kv.get_range("c/0", 0, 2, if_version=read.version)
    assert kv.get_range("absent", 0, 2) is None
    assert list(kv.list_prefix("c/")) == ["c/0"]


def test_iter_chunks(store: ObjectStore) -> None:
    body = bytes(range(256)) * 4 + b"tail"
    store.put("big", body)
    chunks = list(store.iter_chunks("big", chunk_size=100))
    assert b"".join(chunks) == body
    assert len(chunks) > 1
    assert all(0 < len(chunk) <= 100 for chunk in chunks)


def test_iter_chunks_missing_raises_at_call(store: ObjectStore) -> None:
    # Not on first iteration: the caller learns before starting to stream a response.
    with pytest.raises(ObjectNotFound):
        store.iter_chunks("missing")


def test_head(store: ObjectStore) -> None:
    body = b"hello world"
    store.put("dir/hello.txt", body)
    assert store.head("dir/hello.txt") == ObjectInfo("dir/hello.txt", len(body), md5(body))
    assert store.head("dir/absent") is None
    assert store.head("dir") is None
    assert store.exists("dir/hello.txt")
    assert not store.exists("dir/absent")


def test_head_many(store: ObjectStore) -> None:
    keys = [f"many/{i}" for i in range(40)]
    for key in keys[:30]:
        store.put(key, key.encode())
    result = store.head_many(keys)
    assert list(result) == keys
    for key in keys[:30]:
        assert result[key] == ObjectInfo(key, len(key), md5(key.encode()))
    assert all(result[key] is None for key in keys[30:])
    assert store.head_many([]) == {}


def test_head_many_agrees_with_head_wherever_keys_lie(store: ObjectStore, moto_server: str) -> None:
    """Listing-based lookups give exactly what one HEAD per key gives: keys among many foreign
    ones, in other directories, before and after everything stored, duplicated, non-ASCII."""
    put_objects(store, {f"hm/d/{i:05d}": b"x" * (i % 7) for i in range(0, 3000, 3)}, moto_server)
    for key in ["hm/a", "hm/d\u00e9/1", "hm/z/\U0001f600", "hm/\ue000"]:
        store.put(key, key.encode())
    wanted = [f"hm/d/{i:05d}" for i in range(0, 3000, 50)] + [f"hm/d/{i:05d}" for i in (1, 2, 2999)]
    wanted += ["hm/a", "hm/d\u00e9/1", "hm/z/\U0001f600", "hm/\ue000", "hm/0", "hm/zz", "a", "zz"]
    wanted += ["hm/d/00000", "hm/d/00000"]
    result = store.head_many(wanted)
    assert list(result) == list(dict.fromkeys(wanted))
    assert result == {key: store.head(key) for key in wanted}
    assert result["hm/d/00150"] is not None and result["hm/d/00001"] is None


def test_s3_head_many_lists_a_contiguous_batch_in_one_request(
    s3_store: S3ObjectStore, moto_server: str
) -> None:
    keys = [f"batch/{i:04d}" for i in range(500)]
    put_objects(s3_store, {key: key.encode() for key in keys[:450]}, moto_server)
    calls: list[str] = []
    s3_store.client.meta.events.register(
        "before-call.s3.*", lambda model, **_: calls.append(model.name)
    )
    assert all(s3_store.head_many(keys[:450]).values())
    assert calls == ["ListObjectsV2"]
    calls.clear()
    result = s3_store.head_many(keys)
    # A listing proves presence only: the 50 keys it did not show are asked for one by one.
    assert sorted(calls) == ["HeadObject"] * 50 + ["ListObjectsV2"]
    assert sum(info is not None for info in result.values()) == 450
    assert result["batch/0449"] == ObjectInfo("batch/0449", 10, md5(b"batch/0449"))


def test_s3_head_many_lists_a_large_batch_in_ranges_at_once(
    s3_store: S3ObjectStore, moto_server: str
) -> None:
    keys = [f"big/{i:05d}" for i in range(2 * LISTED_PER_RANGE + 10)]
    put_objects(s3_store, {key: key.encode() for key in keys[:-5]}, moto_server)
    calls: list[str] = []
    s3_store.client.meta.events.register(
        "before-call.s3.*", lambda model, **_: calls.append(model.name)
    )
    result = s3_store.head_many(keys)
    # One listing per range of 1,000 wanted keys (each a page), the 5 absent ones asked for.
    assert sorted(calls) == ["HeadObject"] * 5 + ["ListObjectsV2"] * 3
    assert result == {key: (ObjectInfo(key, 9, md5(key.encode())) if i < len(keys) - 5 else None)
                      for i, key in enumerate(keys)}  # fmt: skip


def test_delete_many_more_than_one_batch(store: ObjectStore, moto_server: str) -> None:
    keys = [f"del/{i:05d}" for i in range(DELETE_BATCH_SIZE + 7)]
    put_objects(store, dict.fromkeys(keys, b"x"), moto_server)
    store.put("keep/this", b"y")
    batches: list[int] = []
    if isinstance(store, S3ObjectStore):
        store.client.meta.events.register(
            "provide-client-params.s3.DeleteObjects",
            lambda params, **_: batches.append(len(params["Delete"]["Objects"])),
        )
    # Absent keys are fine; a generator is consumed lazily.
    store.delete_many(key for key in [*keys, "del/absent"])
    assert list(store.list("del/")) == []
    assert store.get("keep/this") == b"y"
    if isinstance(store, S3ObjectStore):
        assert batches == [DELETE_BATCH_SIZE, 8]


def test_delete_single_and_absent(store: ObjectStore) -> None:
    store.put("one", b"1")
    store.delete("one")
    store.delete("one")
    assert store.head("one") is None
    store.delete_many([])


def test_presigned_put_with_content_md5(store: ObjectStore) -> None:
    body = b"uploaded through a presigned URL"
    key = put_key_for(store, "up/file.bin", md5(body))
    url = store.presigned_put_url(key, md5(body), expires_in=60)
    response = requests.put(
        url, data=body, headers={"Content-MD5": content_md5_header(md5(body))}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert response.headers["ETag"].strip('"') == md5(body)
    assert store.head(key) == ObjectInfo(key, len(body), md5(body))
    assert store.get(key) == body


def test_presigned_put_of_a_non_ascii_key(store: ObjectStore) -> None:
    body = b"odd key"
    key = put_key_for(store, "up/naïve name +%?#.bin", md5(body))
    url = store.presigned_put_url(key, md5(body), expires_in=60)
    response = requests.put(
        url, data=body, headers={"Content-MD5": content_md5_header(md5(body))}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert store.get(key) == body


def test_presigned_get_with_range(store: ObjectStore) -> None:
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


def test_presigned_get_missing_is_404(store: ObjectStore, request: pytest.FixtureRequest) -> None:
    url = store.presigned_get_url("down/missing", expires_in=60)
    # moto answers a GET with response-header overrides (dandizarr.objectstore.user_bytes) of a
    # missing
    # key 403; S3 and SeaweedFS answer 404.
    moto = request.node.callspec.params["store"] == "s3"
    assert requests.get(url, timeout=30).status_code == (403 if moto else 404)


@pytest.mark.parametrize("uploaded_type", ["text/html", "image/svg+xml"])
def test_presigned_get_serves_user_bytes_as_an_inert_attachment(
    store: ObjectStore, uploaded_type: str
) -> None:
    """Whatever type the uploader gave, a storage URL's reply is bytes to save, never a page:
    the local endpoint sets it, S3 URLs carry it as signed response-header overrides."""
    store.put("down/evil.html", b"<script>parent.pwned=1</script>", content_type=uploaded_type)
    url = store.presigned_get_urls(["down/evil.html"], expires_in=60)[0]
    for signed in (url, store.presigned_get_url("down/evil.html", expires_in=60)):
        response = requests.get(signed, timeout=30)
        assert response.status_code == 200
        assert response.content == b"<script>parent.pwned=1</script>"
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert response.headers["Content-Disposition"] == "attachment"


def test_put_many_stores_every_object(store: ObjectStore) -> None:
    items = {f"pm/{i % 7}/{i}/.checksum": f"listing {i}".encode() for i in range(60)}
    store.put("pm/0/0/.checksum", b"the old version")
    store.put_many(items)
    for key, body in items.items():
        assert store.get(key) == body
        assert store.head(key) == ObjectInfo(key, len(body), md5(body))
    assert sorted(info.key for info in store.list("pm/")) == sorted(items)
    store.put_many({})


def test_local_put_many_leaves_no_temporary_files(local_store: LocalObjectStore) -> None:
    local_store.put_many({f"t/{i}": b"x" * i for i in range(20)})
    names = [p.name for p in local_store.root.rglob("*")]
    assert not [n for n in names if n.startswith(".dandizarr-tmp")]
    assert len(list(local_store.list("t/"))) == 20


def test_s3_warm_up_starts_the_request_pool_and_the_signer(s3_store: S3ObjectStore) -> None:
    assert s3_store._request_pool is None and s3_store._presign_base is None
    assert s3_store._request_base is None
    s3_store.warm_up()
    pool = s3_store._request_pool
    assert pool is not None and len(pool._threads) == s3_store.concurrency
    assert s3_store._presign_base is not None and s3_store._request_base is not None
    # A batch run afterwards starts no thread of its own.
    s3_store.put_many({f"warm/{i}": b"x" for i in range(3 * s3_store.concurrency)})
    assert len(pool._threads) == s3_store.concurrency
    assert len(list(s3_store.list("warm/"))) == 3 * s3_store.concurrency


def test_warm_up_of_a_local_store_starts_no_threads(local_store: LocalObjectStore) -> None:
    store = local_store
    store.warm_up()
    assert store._request_pool is None
