"""What the listing contract (dandizarr.testing.store_contract, on every backend) leaves to the
S3 backend: the page sizes it asks for, and its own ListObjectsV2 parser read against botocore's.
"""

from __future__ import annotations

import hashlib
from typing import Any

import boto3
import pytest

from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr.testing.store_contract import LISTED_KEYS


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def test_listed_keys_order_is_utf8_byte_order() -> None:
    # The contract's expectation itself: byte order, which differs from UTF-16 code unit order.
    assert sorted(LISTED_KEYS, key=lambda k: k.encode("utf-8")) == LISTED_KEYS
    assert sorted(LISTED_KEYS, key=lambda k: k.encode("utf-16-be")) != LISTED_KEYS


def test_s3_list_asks_for_pages_of_page_size(s3_store: S3ObjectStore) -> None:
    for key in LISTED_KEYS:
        s3_store.put(key, key.encode())
    calls: list[Any] = []
    s3_store.client.meta.events.register(
        "provide-client-params.s3.ListObjectsV2", lambda params, **_: calls.append(params)
    )
    assert [i.key for i in s3_store.list("p/", page_size=3)] == LISTED_KEYS
    assert [i.key for i in s3_store.list("p/", start_after="p/a0", page_size=2)] == LISTED_KEYS[6:]
    # 11 keys, 3 a page: 4 requests; then 5 keys, 2 a page: 3 requests.
    assert [params["MaxKeys"] for params in calls] == [3] * 4 + [2] * 3


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
    remote_store: S3ObjectStore, page_size: int
) -> None:
    """Our ListObjectsV2 parser (dandizarr.objectstore.s3_listing) against botocore's own on the
    same
    server: the same keys (URL-encoded in the reply, decoded by botocore's handler), sizes,
    ETags and continuation, for keys XML and URL encoding both have to escape."""
    store = remote_store
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
