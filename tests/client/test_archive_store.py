"""``ArchiveStore`` against the live service (Django's test server, S3 on moto over HTTP):
zarr arrays written locally by zarr-python, uploaded through the API, read back through it."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
import zarr
from rest_framework.authtoken.models import Token
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from dandizarr.client.errors import ClientError
from dandizarr.client.store import ArchiveStore
from dandizarr.client.store_reads import FileEntry as _Entry
from tests.support.api import Actor, make_actor, upload

PROTO = default_buffer_prototype()


@dataclass
class Uploaded:
    server: str
    zarr_id: str
    root: Path  # the local copy that was uploaded
    files: dict[str, bytes]
    owner: Actor
    opened: list[ArchiveStore] = field(default_factory=list)

    def store(self, zarr_id: str | None = None, **kwargs: Any) -> ArchiveStore:
        """A store on this archive (or another), closed when the test ends: an open pooled
        connection would keep a live-server thread, and its database session, alive."""
        return self.keep(ArchiveStore(self.server, zarr_id or self.zarr_id, **kwargs))

    def keep(self, store: ArchiveStore) -> ArchiveStore:
        self.opened.append(store)
        return store


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def upload_tree(owner: Actor, zarr_id: str, root: Path, batch_limit: int) -> dict[str, bytes]:
    files = read_tree(root)
    items = list(files.items())
    for start in range(0, len(items), batch_limit):
        done = upload(owner.client, zarr_id, dict(items[start : start + batch_limit]))
        assert done.status_code == 200, done.content
    archive = owner.client.get(f"/api/zarr/{zarr_id}/").json()
    assert (archive["checksum_status"], archive["file_count"]) == ("complete", len(files))
    return files


# --- the arrays --------------------------------------------------------------------------------

DATA = np.arange(37 * 23, dtype="float64").reshape(37, 23) / 7
LABELS = (np.arange(50) % 7).astype("uint8")
SHARDED = np.arange(16 * 16, dtype="int16").reshape(16, 16) - 100
X = np.arange(9 * 11, dtype="int32").reshape(9, 11) * -3
Y = np.linspace(0, 1, 6 * 10, dtype="float32").reshape(6, 10)


def expected_data() -> Any:
    expected = np.full((37, 23), np.nan)
    expected[:25] = DATA[:25]  # chunk row 3 (rows 30-36) is never written: fill value
    return expected


def write_v3(root: Path) -> None:
    group = zarr.open_group(LocalStore(root), mode="w", zarr_format=3)
    group.attrs["title"] = "v3 sample"
    data = group.create_array(
        "data", shape=(37, 23), chunks=(10, 7), dtype="float64", fill_value=np.nan
    )
    data[:25] = DATA[:25]
    data.attrs["unit"] = "mV"
    labels = group.create_group("sub").create_array(
        "labels", shape=(50,), chunks=(8,), dtype="uint8"
    )
    labels[:] = LABELS
    sharded = group.create_array(
        "sharded", shape=(16, 16), shards=(8, 8), chunks=(4, 4), dtype="int16"
    )
    sharded[:] = SHARDED


def write_v2(root: Path) -> None:
    group = zarr.open_group(LocalStore(root), mode="w", zarr_format=2)
    group.attrs["title"] = "v2 sample"
    x = group.create_array("x", shape=(9, 11), chunks=(4, 4), dtype="int32")
    x[:] = X
    y = group.create_array(
        "y",
        shape=(6, 10),
        chunks=(4, 3),
        dtype="float32",
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )
    y[:] = Y


@pytest.fixture
def owner(transactional_db: None) -> Actor:
    return make_actor("owner")


@pytest.fixture
def s3_service(live_server: Any, settings: Any, moto_server: str, s3_bucket: str) -> str:
    settings.DANDIZARR_STORAGE = "s3"
    settings.DANDIZARR_S3_ENDPOINT_URL = moto_server
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = None
    settings.DANDIZARR_S3_BUCKET = s3_bucket
    settings.DANDIZARR_BATCH_LIMIT = 9  # several batches even for these small trees
    return str(live_server.url)


def make_archive(owner: Actor, name: str) -> str:
    response = owner.client.post("/api/dandisets/", {"name": name}, format="json")
    assert response.status_code == 201, response.content
    response = owner.client.post(
        "/api/zarr/", {"name": name, "dandiset": response.json()["identifier"]}, format="json"
    )
    assert response.status_code == 201, response.content
    return str(response.json()["zarr_id"])


def uploaded(owner: Actor, server: str, tmp_path: Path, name: str, settings: Any) -> Uploaded:
    root = tmp_path / name
    (write_v3 if name == "v3.zarr" else write_v2)(root)
    zarr_id = make_archive(owner, name)
    files = upload_tree(owner, zarr_id, root, settings.DANDIZARR_BATCH_LIMIT)
    return Uploaded(server, zarr_id, root, files, owner)


@pytest.fixture
def v3(owner: Actor, s3_service: str, tmp_path: Path, settings: Any) -> Iterator[Uploaded]:
    archive = uploaded(owner, s3_service, tmp_path, "v3.zarr", settings)
    yield archive
    for store in archive.opened:
        store.close()


@pytest.fixture
def v2(owner: Actor, s3_service: str, tmp_path: Path, settings: Any) -> Iterator[Uploaded]:
    archive = uploaded(owner, s3_service, tmp_path, "v2.zarr", settings)
    yield archive
    for store in archive.opened:
        store.close()


def member(group: zarr.Group, name: str) -> zarr.Array:
    found = group[name]
    assert isinstance(found, zarr.Array), name
    return found


def assert_same(actual: Any, expected: Any) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


def get(store: ArchiveStore, key: str, byte_range: Any = None) -> bytes | None:
    buffer = sync(store.get(key, PROTO, byte_range))
    return None if buffer is None else buffer.to_bytes()


def collect(iterator: Any) -> list[str]:
    async def run() -> list[str]:
        return [key async for key in iterator]

    return sync(run())


# --- reading arrays ----------------------------------------------------------------------------


def test_v3_group_and_arrays_read_exactly(v3: Uploaded) -> None:
    assert "c/3/0" not in "".join(v3.files)  # the fill-value chunks really are absent
    store = v3.store()
    group = zarr.open_group(store=store, mode="r")
    assert group.metadata.zarr_format == 3
    assert group.attrs["title"] == "v3 sample"
    assert sorted(name for name, _ in group.members()) == ["data", "sharded", "sub"]
    data = member(group, "data")
    assert data.attrs["unit"] == "mV"
    assert_same(data[:], expected_data())
    assert_same(data[28:33, 5:9], expected_data()[28:33, 5:9])
    assert_same(zarr.open_array(store=store, path="sub/labels", mode="r")[:], LABELS)
    sharded = zarr.open_array(store=store, path="sharded", mode="r")
    assert sharded.shards == (8, 8)
    assert_same(sharded[:], SHARDED)
    assert_same(sharded[5:7, 9:15], SHARDED[5:7, 9:15])  # inner chunks by byte range
    # The same answers as zarr reading the local copy.
    local = zarr.open_group(LocalStore(v3.root, read_only=True), mode="r")
    assert_same(member(group, "sub/labels")[:], member(local, "sub/labels")[:])


def test_v2_group_and_arrays_read_exactly(v2: Uploaded) -> None:
    assert "y/0/0" in v2.files and "x/0.0" in v2.files  # both chunk key separators
    store = v2.store()
    group = zarr.open_group(store=store, mode="r")
    assert group.metadata.zarr_format == 2
    assert group.attrs["title"] == "v2 sample"
    assert_same(member(group, "x")[:], X)
    assert_same(member(group, "y")[:], Y)
    x = zarr.open_array(store=store, path="x", mode="r", zarr_format=2)
    assert_same(x[3:8, 2:10], X[3:8, 2:10])
    opened = zarr.open(store=store, mode="r")
    assert isinstance(opened, zarr.Group)


def test_a_missing_archive_or_array_is_not_found(v3: Uploaded) -> None:
    with pytest.raises(FileNotFoundError):
        zarr.open_array(store=v3.store(), path="nothing", mode="r")
    absent = v3.store(str(uuid.uuid4()))
    with pytest.raises(FileNotFoundError, match="no zarr archive"):
        zarr.open_group(store=absent, mode="r")
    with pytest.raises(FileNotFoundError, match="no zarr archive"):
        get(absent, "zarr.json")


# --- keys, ranges, listings --------------------------------------------------------------------


def test_absent_keys_are_none_and_present_keys_exist(v3: Uploaded) -> None:
    store = v3.store()
    for key in ("nope", "data/.zarray", "data/c/3/0", "data/c/0/9", "no/such/dir/key", "data/c"):
        assert get(store, key) is None, key
        assert sync(store.exists(key)) is False, key
    for key, body in v3.files.items():
        assert sync(store.exists(key)), key
        assert sync(store.getsize(key)) == len(body)
    with pytest.raises(FileNotFoundError):
        sync(store.getsize("data/c/3/0"))
    assert sync(store.getsize_prefix("sub/")) == sum(
        len(b) for k, b in v3.files.items() if k.startswith("sub/")
    )


def test_every_file_reads_back_whole(v3: Uploaded) -> None:
    store = v3.store()
    for key, body in v3.files.items():
        assert get(store, key) == body, key


def test_partial_reads(v3: Uploaded) -> None:
    store = v3.store()
    key = "data/zarr.json"
    body = v3.files[key]
    size = len(body)
    assert size > 40
    cases = [
        (RangeByteRequest(3, 17), body[3:17]),
        (RangeByteRequest(0, 1), body[:1]),
        (RangeByteRequest(size - 5, size + 100), body[size - 5 :]),
        (RangeByteRequest(size + 3, size + 9), b""),
        (RangeByteRequest(7, 7), b""),
        (OffsetByteRequest(size - 11), body[size - 11 :]),
        (OffsetByteRequest(0), body),
        (OffsetByteRequest(size), b""),
        (SuffixByteRequest(9), body[-9:]),
        (SuffixByteRequest(size + 50), body),
        (SuffixByteRequest(0), b""),
    ]
    for byte_range, expected in cases:
        assert get(store, key, byte_range) == expected, byte_range
    values = sync(
        store.get_partial_values(
            PROTO, [(key, RangeByteRequest(1, 4)), ("absent", None), (key, SuffixByteRequest(2))]
        )
    )
    assert [None if v is None else v.to_bytes() for v in values] == [body[1:4], None, body[-2:]]


def test_a_cached_key_costs_one_storage_request_per_read(v3: Uploaded) -> None:
    store = v3.store()
    key = "sharded/c/0/1"
    body = v3.files[key]
    assert get(store, key) == body
    # The archive (on opening), the file's entry (size, md5, URL); then the bytes.
    assert (store.api_requests, store.storage_requests) == (2, 1)
    assert get(store, key, SuffixByteRequest(20)) == body[-20:]
    assert get(store, key, RangeByteRequest(5, 30)) == body[5:30]
    assert (store.api_requests, store.storage_requests) == (2, 3)
    # An absent key costs one look-up, once; a size too.
    assert get(store, "sharded/c/0/7") is None
    assert get(store, "sharded/c/0/7") is None
    assert sync(store.getsize("sharded/c/0/0")) == len(v3.files["sharded/c/0/0"])
    assert sync(store.getsize("sharded/c/0/0")) == len(v3.files["sharded/c/0/0"])
    assert (store.api_requests, store.storage_requests) == (4, 3)


def test_a_listed_directory_answers_absent_keys_and_sizes(v3: Uploaded) -> None:
    store = v3.store()
    assert collect(store.list_dir("sharded/c/0")) == sorted(
        k.rsplit("/", 1)[1] for k in v3.files if k.startswith("sharded/c/0/")
    )
    before = store.api_requests
    assert get(store, "sharded/c/0/7") is None
    assert sync(store.getsize("sharded/c/0/0")) == len(v3.files["sharded/c/0/0"])
    assert store.api_requests == before
    # Reading a listed key asks only for its URL.
    assert get(store, "sharded/c/0/0") == v3.files["sharded/c/0/0"]
    assert store.api_requests == before + 1


def test_reading_a_whole_array_never_lists_its_directories(v3: Uploaded) -> None:
    store = v3.store()
    array = zarr.open_array(store=store, path="data", mode="r")
    assert_same(array[:], expected_data())
    chunks = [k for k in v3.files if k.startswith("data/c/")]
    assert len(chunks) == 12
    # Reads: zarr.json and every chunk once. Service calls: the archive (on opening) and one
    # entry per key zarr asked for (present or not), never a directory listing.
    assert store.storage_requests == 1 + len(chunks)
    assert store.api_requests == 1 + len(store._entries)
    assert not store._directories
    assert {k for k, e in store._entries.items() if e is not None} == {"data/zarr.json", *chunks}


def test_listing(v3: Uploaded) -> None:
    store = v3.store()
    keys = collect(store.list())
    assert len(keys) == len(set(keys))
    assert set(keys) == set(v3.files)
    assert set(collect(store.list_prefix("data/"))) == {
        k for k in v3.files if k.startswith("data/")
    }
    assert set(collect(store.list_prefix("sub/labels/c/"))) == {
        k for k in v3.files if k.startswith("sub/labels/c/")
    }
    # A prefix is a string prefix, not only a directory.
    assert set(collect(store.list_prefix("sh"))) == {k for k in v3.files if k.startswith("sh")}
    assert set(collect(store.list_prefix(""))) == set(v3.files)
    assert collect(store.list_prefix("absent/")) == []
    assert collect(store.list_dir("")) == ["data", "sharded", "sub", "zarr.json"]
    assert collect(store.list_dir("data/")) == ["c", "zarr.json"]
    assert collect(store.list_dir("data/c")) == ["0", "1", "2"]
    assert collect(store.list_dir("absent")) == []
    assert sync(store.is_empty("sub")) is False
    assert sync(store.is_empty("absent")) is True


def test_listings_of_many_pages(v3: Uploaded) -> None:
    """Small pages, so every listing follows ``next`` links (directory and recursive)."""
    store = v3.store(page_size=2, recursive_limit=3)
    assert collect(store.list()) == collect(v3.store().list())
    assert set(collect(store.list())) == set(v3.files)
    assert set(collect(store.list_prefix("sub/"))) == {k for k in v3.files if k.startswith("sub/")}
    assert collect(store.list_dir("")) == ["data", "sharded", "sub", "zarr.json"]
    assert collect(store.list_dir("data/c/0")) == ["0", "1", "2", "3"]
    assert get(store, "data/c/0/3") == v3.files["data/c/0/3"]
    assert get(store, "data/c/0/4") is None
    assert_same(zarr.open_array(store=store, path="data", mode="r")[:], expected_data())


# --- staleness ---------------------------------------------------------------------------------


def test_an_expired_download_url_is_fetched_again(v3: Uploaded) -> None:
    store = v3.store()
    key = "sub/labels/zarr.json"
    assert get(store, key, RangeByteRequest(0, 5)) == v3.files[key][:5]
    # Swap the cached URL for one storage refuses (403, as for an expired presigned URL): the
    # store must ask the service for a fresh one rather than fail.
    entry = store._entries[key]
    assert entry is not None and entry.url is not None
    store._entries[key] = _Entry(entry.size, entry.digest, entry.url.split("?")[0])
    before = store.api_requests
    assert get(store, key) == v3.files[key]
    assert store.api_requests > before


def test_a_file_changed_or_deleted_after_caching_is_read_afresh(v3: Uploaded) -> None:
    store = v3.store()
    changed, deleted = "sub/labels/c/0", "sub/labels/c/1"
    assert get(store, changed) == v3.files[changed]
    assert get(store, deleted) == v3.files[deleted]
    new = b"not the chunk it was, and longer than it was" * 3
    assert upload(v3.owner.client, v3.zarr_id, {changed: new}).status_code == 200
    response = v3.owner.client.delete(
        f"/api/zarr/{v3.zarr_id}/files/", [{"path": deleted}], format="json"
    )
    assert response.status_code == 204, response.content
    assert get(store, changed) == new
    assert get(store, deleted) is None


def test_a_whole_read_must_match_the_trees_md5(v3: Uploaded, settings: Any) -> None:
    """Bytes changed in storage behind the service's back (same size): a whole read is refused
    rather than returned unverified; a range read cannot be checked and returns what is there."""
    key = "sub/labels/c/2"
    body = v3.files[key]
    forged = bytes(b ^ 0xFF for b in body)
    s3 = boto3.client(
        "s3", endpoint_url=settings.DANDIZARR_S3_ENDPOINT_URL, region_name="us-east-1"
    )
    s3.put_object(Bucket=settings.DANDIZARR_S3_BUCKET, Key=f"zarr/{v3.zarr_id}/{key}", Body=forged)
    store = v3.store()
    assert sync(store.getsize(key)) == len(body)
    with pytest.raises(ClientError, match="does not match"):
        get(store, key)
    assert get(store, key, RangeByteRequest(0, 3)) == forged[:3]


# --- the store itself --------------------------------------------------------------------------


def test_store_properties(v3: Uploaded) -> None:
    store = v3.store()
    assert store.read_only
    assert not store.supports_writes and not store.supports_deletes
    assert store.supports_listing and not store.supports_partial_writes
    assert store == ArchiveStore(v3.server + "/", v3.zarr_id, token="whatever")
    assert store != ArchiveStore(v3.server, "other")
    assert v3.keep(store.with_read_only(True)) == store
    with pytest.raises(ClientError):  # writing begins a session: a token is needed
        store.with_read_only(False)
    with pytest.raises(ValueError):
        zarr.open_group(store=store, mode="a")
    with pytest.raises(ValueError):
        sync(store.set("x", PROTO.buffer.from_bytes(b"1")))
    token = Token.objects.get(user=v3.owner.user).key
    copy = v3.keep(pickle.loads(pickle.dumps(v3.store(token=token, page_size=2))))
    assert copy == store
    assert (copy.token, copy.page_size, copy.read_only) == (token, 2, True)
    assert_same(zarr.open_array(store=copy, path="sub/labels", mode="r")[:], LABELS)
