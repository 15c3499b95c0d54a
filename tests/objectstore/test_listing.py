"""The listing-order contract (``ObjectStore.list``), on every backend.

S3 and the local backend list in UTF-8 byte order; SeaweedFS lists directory by directory. The
contract: ``list`` gives every key once in the backend's order, ``list_ordered`` gives byte
order or raises ListingOrderError, ``list_sorted`` gives byte order always, and nothing infers
a key's absence from a listing's order (``head_many``).
"""

from __future__ import annotations

import hashlib
from typing import Any

import boto3
import pytest

from dandizarr.objectstore import ListingOrderError, ObjectInfo, ObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


# Chosen so UTF-8 byte order differs from UTF-16 order (U+FFFF vs U+1F600), from a directory
# walk's order ('/' sorts between '-' and '0': "p/a-b" < "p/a/b" < "p/a0"), and so a page
# boundary falls on U+FFFF (SeaweedFS repeats that key on the next page).
LISTED_KEYS = [
    "p/A",
    "p/a-b",
    "p/a/b",
    "p/a/c/d",
    "p/a0",
    "p/ab",
    "p/z",
    "p/é",
    "p/\uffff",
    "p/\U0001f600",
]


def put_listed_keys(store: ObjectStore) -> None:
    for key in reversed(LISTED_KEYS):
        store.put(key, key.encode())
    store.put("other/x", b"not under p/")


def keys_of(infos: Any) -> list[str]:
    return [info.key for info in infos]


def assert_listing(listed: list[str], expected: list[str], byte_order: bool) -> None:
    """``listed`` is ``expected``: exactly, on a byte-order backend; else each key once."""
    if byte_order:
        assert listed == expected
    else:
        assert sorted(listed) == expected and len(set(listed)) == len(listed)


def test_listed_keys_order_is_utf8_byte_order() -> None:
    # The expectation itself: byte order, which differs from UTF-16 code unit order here.
    assert sorted(LISTED_KEYS, key=lambda k: k.encode("utf-8")) == LISTED_KEYS
    assert sorted(LISTED_KEYS, key=lambda k: k.encode("utf-16-be")) != LISTED_KEYS


def test_list_every_key_once_in_the_backends_order(
    store: ObjectStore, lists_in_byte_order: bool
) -> None:
    put_listed_keys(store)
    listed = list(store.list("p/"))
    assert_listing(keys_of(listed), LISTED_KEYS, lists_in_byte_order)
    assert all(
        info == ObjectInfo(info.key, len(info.key.encode()), md5(info.key.encode()))
        for info in listed
    )
    everything = sorted([*LISTED_KEYS, "other/x"])
    assert_listing(keys_of(store.list()), everything, lists_in_byte_order)


def test_list_sorted_is_byte_order_on_every_backend(store: ObjectStore) -> None:
    put_listed_keys(store)
    assert keys_of(store.list_sorted("p/")) == LISTED_KEYS
    assert keys_of(store.list_sorted()) == sorted([*LISTED_KEYS, "other/x"])
    assert store.list_sorted("p/a/")[0] == ObjectInfo("p/a/b", 5, md5(b"p/a/b"))
    assert store.list_sorted("nothing/") == []


def test_list_ordered_streams_byte_order_or_says_it_cannot(
    store: ObjectStore, lists_in_byte_order: bool
) -> None:
    put_listed_keys(store)
    if lists_in_byte_order:
        assert keys_of(store.list_ordered("p/")) == LISTED_KEYS
        return
    streamed: list[str] = []
    with pytest.raises(ListingOrderError) as raised:
        streamed.extend(info.key for info in store.list_ordered("p/"))
    # Everything yielded before the error was in byte order; the error names both keys.
    assert streamed == sorted(streamed) and streamed
    assert raised.value.key < raised.value.previous
    assert repr(raised.value.key) in str(raised.value)
    assert "byte order" in str(raised.value)


def test_list_prefix_is_a_string_prefix(store: ObjectStore, lists_in_byte_order: bool) -> None:
    put_listed_keys(store)

    def listed(prefix: str) -> list[str]:
        return keys_of(store.list(prefix))

    assert_listing(
        listed("p/a"), ["p/a-b", "p/a/b", "p/a/c/d", "p/a0", "p/ab"], lists_in_byte_order
    )
    assert listed("p/a/") == ["p/a/b", "p/a/c/d"]
    assert listed("p/a/c/d") == ["p/a/c/d"]
    assert listed("p/nothing") == []
    assert listed("nothing/") == []


def test_list_start_after(store: ObjectStore, lists_in_byte_order: bool) -> None:
    put_listed_keys(store)

    def keys(start_after: str) -> list[str]:
        return keys_of(store.list("p/", start_after=start_after))

    assert keys("p/\U0001f600") == []
    assert keys("a") == keys_of(store.list("p/"))  # before the prefix
    assert keys("p/é") == LISTED_KEYS[8:]  # past every directory: the orders agree
    if not lists_in_byte_order:
        # A position in the server's own walk: only ever fewer keys, never foreign ones.
        for start_after in ["p/a/b", "p/a/c", "p/a/", "p/a-a"]:
            listed = keys(start_after)
            assert set(listed) < set(LISTED_KEYS) and len(set(listed)) == len(listed)
        return
    assert keys("p/a/b") == LISTED_KEYS[3:]
    # Not itself a key, and inside a "directory": its later siblings still come.
    assert keys("p/a/c") == LISTED_KEYS[3:]
    assert keys("p/a/") == LISTED_KEYS[2:]
    assert keys("p/a-a") == LISTED_KEYS[1:]


def test_list_pagination(store: ObjectStore) -> None:
    put_listed_keys(store)
    calls: list[Any] = []
    if isinstance(store, S3ObjectStore):
        store.client.meta.events.register(
            "provide-client-params.s3.ListObjectsV2", lambda params, **_: calls.append(params)
        )
    whole = keys_of(store.list("p/"))
    assert keys_of(store.list("p/", page_size=3)) == whole
    after_a0 = keys_of(store.list("p/", start_after="p/a0", page_size=2))
    assert after_a0 == ["p/ab", "p/z", "p/é", "p/\uffff", "p/\U0001f600"]
    if isinstance(store, S3ObjectStore):
        # 10 keys at once, then 3 a page: 4 requests; then 5 keys, 2 a page: 3 requests.
        assert len(calls) == 1 + 4 + 3
        assert [params["MaxKeys"] for params in calls[1:]] == [3] * 4 + [2] * 3


def test_head_many_never_takes_a_key_the_listing_did_not_show_as_absent(
    store: ObjectStore,
) -> None:
    """A batch of "p/a-b" and "p/a/b": on SeaweedFS a listing from just before "p/a-b" skips
    the directory "p/a" entirely, yet both files are present."""
    put_listed_keys(store)
    wanted = ["p/a-b", "p/a/b", "p/a/c/d", "p/a/absent", "p/a0", "p/a-c"]
    result = store.head_many(wanted)
    assert result == {key: store.head(key) for key in wanted}
    assert [key for key, info in result.items() if info is None] == ["p/a/absent", "p/a-c"]
    assert result["p/a/b"] == ObjectInfo("p/a/b", 5, md5(b"p/a/b"))


AWKWARD_KEYS = [
    "q/a b",
    "q/a+b",
    "q/a&b<c>'\"",
    "q/%41%2F",
    "q/~!$()*,;=:@",
    "q/é\u00a0",
    "q/\U0001f600",
    "q/x" * 50,
]


@pytest.mark.parametrize("page_size", [2, 1000])
def test_the_fast_listing_parser_reads_what_botocore_reads(
    store: ObjectStore, page_size: int
) -> None:
    """Our ListObjectsV2 parser (dandizarr.objectstore.s3_listing) against botocore's own on the
    same
    server: the same keys (URL-encoded in the reply, decoded by botocore's handler), sizes,
    ETags and continuation, for keys XML and URL encoding both have to escape."""
    if not isinstance(store, S3ObjectStore):
        pytest.skip("the parser is the S3 backend's")
    for key in AWKWARD_KEYS:
        store.put(key, key.encode() * 3)
    # botocore's default parser: a session of its own.
    plain = boto3.session.Session(
        aws_access_key_id=store._session.get_credentials().access_key,
        aws_secret_access_key=store._session.get_credentials().secret_key,
    ).client("s3", endpoint_url=store.endpoint_url, region_name=store.region)
    expected: list[tuple[str, int, str]] = []
    params: dict[str, Any] = {"Bucket": store.bucket, "Prefix": "q/", "MaxKeys": page_size}
    while True:
        page = plain.list_objects_v2(**params)
        for item in page.get("Contents", []):
            entry = (item["Key"], item["Size"], item["ETag"].strip('"'))
            if not expected or expected[-1] != entry:  # SeaweedFS may repeat a page's last key
                expected.append(entry)
        if not page.get("IsTruncated"):
            break
        params["ContinuationToken"] = page["NextContinuationToken"]
    listed = [(i.key, i.size, i.etag) for i in store.list("q/", page_size=page_size)]
    assert listed == expected
    assert sorted(k for k, _, _ in listed) == sorted(AWKWARD_KEYS)
    assert {etag for _, _, etag in listed} == {md5(k.encode() * 3) for k in AWKWARD_KEYS}
