"""What the contract (test_store_contract.py) leaves out: the local backend's presigned URLs
as the web app's storage view answers them, how many requests the S3 backend spends, and what
each backend leaves behind."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from dandizarr.objectstore import DELETE_BATCH_SIZE, ObjectInfo, ObjectStore
from dandizarr.objectstore.base import LISTED_PER_RANGE
from dandizarr.objectstore.local import LocalObjectStore
from dandizarr.objectstore.memory import MemoryObjectStore
from dandizarr.objectstore.s3 import S3ObjectStore
from dandizarr.sharding.store import ObjectStoreKV, VersionMismatch
from dandizarr.testing.store_contract import PresignedURLContract
from tests.support.api import put_key_for
from tests.support.moto_objects import put_objects

DIGITS = b"0123456789"


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class TestLocalURLsServedByTheWebApp(PresignedURLContract):
    """The local store's URLs point at the storage view, which takes a PUT only of a key an
    open upload batch expects (a row in the test database)."""

    @pytest.fixture
    def store(self, local_store: LocalObjectStore) -> LocalObjectStore:
        return local_store

    def put_key(self, store: ObjectStore, key: str, md5_hex: str) -> str:
        return put_key_for(store, key, md5_hex)


def test_sharding_adapter_maps_conditional_reads() -> None:
    # The store's errors are the contract's on every backend: the adapter's mapping of them is
    # checked once, in memory.
    store = MemoryObjectStore()
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


def test_s3_delete_many_sends_batches_of_at_most_1000(
    s3_store: S3ObjectStore, moto_server: str
) -> None:
    keys = [f"del/{i:05d}" for i in range(DELETE_BATCH_SIZE + 7)]
    put_objects(s3_store, dict.fromkeys(keys, b"x"), moto_server)
    batches: list[int] = []
    s3_store.client.meta.events.register(
        "provide-client-params.s3.DeleteObjects",
        lambda params, **_: batches.append(len(params["Delete"]["Objects"])),
    )
    s3_store.delete_many(key for key in [*keys, "del/absent"])
    assert batches == [DELETE_BATCH_SIZE, 8]
    assert list(s3_store.list("del/")) == []


def test_local_put_many_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path, public_url="http://storage.invalid", secret_key="k")
    store.put_many({f"t/{i}": b"x" * i for i in range(20)})
    names = [p.name for p in store.root.rglob("*")]
    assert not [n for n in names if n.startswith(".dandizarr-tmp")]
    assert len(list(store.list("t/"))) == 20


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


@pytest.mark.parametrize("store", [MemoryObjectStore, LocalObjectStore])
def test_warm_up_of_a_store_in_this_process_starts_no_threads(
    store: type[ObjectStore], tmp_path: Path
) -> None:
    made = (
        MemoryObjectStore()
        if store is MemoryObjectStore
        else LocalObjectStore(tmp_path, public_url="http://storage.invalid", secret_key="k")
    )
    made.warm_up()
    made.put_many({f"k/{i}": b"x" for i in range(40)})
    assert made._request_pool is None
