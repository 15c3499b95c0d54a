"""Browsing reads each .checksum once per tree version
(dandizarr_server.zarr_api.runtime.tree.ListingCache)."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from celery.exceptions import Retry

from dandizarr.checksums import (
    DirectoryListing,
    FileEntry,
    decode_checksum_file,
    encode_checksum_file,
)
from dandizarr_server.zarr_api.models import ZarrArchive
from dandizarr_server.zarr_api.runtime.tree import (
    CachedTree,
    CacheKey,
    ListingCache,
    StorageChecksumTree,
    listing_bytes,
)
from dandizarr_server.zarr_api.services import tree_updates
from dandizarr_server.zarr_api.services.audit import archive_audit
from tests.support.api import Actor, md5, upload
from tests.support.tree_check import assert_tree_matches_storage


def test_pages_and_entries_of_a_directory_read_its_checksum_once_per_version(
    owner: Actor, zarr_id: str
) -> None:
    files = {f"big/{i:03d}": str(i).encode() for i in range(120)}
    assert upload(owner.client, zarr_id, files).status_code == 200
    reads = StorageChecksumTree.total_reads
    for page in (1, 2, 3):
        response = owner.client.get(
            f"/api/zarr/{zarr_id}/files/big", {"page": page, "page_size": 50}
        )
        assert response.status_code == 200
    entry = owner.client.get(f"/api/zarr/{zarr_id}/files/big/007").json()
    assert entry["digest"] == md5(b"7")
    # "big" comes from what the tree update wrote (the batch start made this process's cache);
    # "big/007" is no directory, as the cached "big" says: storage is not asked.
    assert StorageChecksumTree.total_reads == reads
    # A new batch is a new version of the tree: its listings are read afresh.
    assert upload(owner.client, zarr_id, {"big/007": b"seven"}).status_code == 200
    entry = owner.client.get(f"/api/zarr/{zarr_id}/files/big/007").json()
    assert entry["digest"] == md5(b"seven")
    listing = owner.client.get(f"/api/zarr/{zarr_id}/files/big", {"page_size": 200}).json()
    assert {r["name"]: r["digest"] for r in listing["results"]}["007"] == md5(b"seven")


def test_listing_cache_holds_at_most_its_entries_and_drops_the_oldest() -> None:
    def listing(n: int) -> DirectoryListing:
        return DirectoryListing({f"f{i}": FileEntry(f"f{i}", md5(b""), 0) for i in range(n)})

    def key(directory: str) -> CacheKey:
        return ("z", 1, directory)

    cache = ListingCache(max_bytes=listing_bytes(listing(9)) * 5 // 2)
    cache.put(key("a"), listing(9))
    cache.put(key("b"), listing(9))
    assert cache.get(key("a"))[0]  # "a" is now the most recently used
    cache.put(key("c"), listing(9))  # 3 listings > 2.5: the least recently used ("b") goes
    assert [cache.get(key(k))[0] for k in "abc"] == [True, False, True]
    cache.put(key("huge"), listing(100))  # larger than the whole cache: not kept
    assert cache.get(key("huge")) == (False, None)
    cache.put(key("absent"), None)
    assert cache.get(key("absent")) == (True, None)
    # What eviction dropped is not carried to a new version either.
    cache.carry("z", 1, 2, {})
    assert [cache.get(("z", 2, k))[0] for k in ["a", "b", "c", "absent"]] == [
        True,
        False,
        True,
        True,
    ]
    assert cache.get(key("a")) == (False, None)


@pytest.mark.parametrize("name", ["{i}", "chunk.{i}.{i}", "été-{i}"])
def test_listing_bytes_is_within_a_fifth_of_what_a_decoded_listing_holds(name: str) -> None:
    """The cache's bound is in bytes of memory: its estimate of a decoded listing (files and
    directories, names short and long) is checked against what decoding allocates."""
    files = {
        name.format(i=i): FileEntry(name.format(i=i), md5(str(i).encode()), 300 + i)
        for i in range(1000)
    }
    data = encode_checksum_file(DirectoryListing(files))
    tracemalloc.start()
    try:
        decoded = decode_checksum_file(data)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 0.8 <= listing_bytes(decoded) / held <= 1.2, (listing_bytes(decoded), held)


def test_a_committed_update_drops_the_archives_listings_of_older_versions() -> None:
    """Readers key by the committed version, so an update's ``remember`` carries what it read
    to the new version and drops the archive's listings of any other (they would fill the
    cache, read no more); other archives' stay."""
    listing = DirectoryListing({"f": FileEntry("f", md5(b""), 0)})
    cache = ListingCache(max_bytes=1 << 20)
    cache.put(("z", "v0", "old"), listing)  # read before an audit, say
    cache.put(("z", "v1", "a"), listing)
    cache.put(("z", "v1", "b"), listing)
    cache.put(("other", "v1", "a"), listing)
    tree = CachedTree(StorageChecksumTree(None, "z"), "v1", cache)  # type: ignore[arg-type]
    tree.written["a"] = listing
    tree.remember("v2")
    assert cache.get(("z", "v2", "a")) == (True, listing)
    assert cache.get(("z", "v2", "b")) == (True, listing)  # carried
    assert not cache.get(("z", "v1", "a"))[0] and not cache.get(("z", "v1", "b"))[0]
    assert not cache.get(("z", "v0", "old"))[0]
    assert cache.get(("other", "v1", "a"))[0]


def test_batch_start_checks_paths_against_the_listings_the_last_update_wrote(
    owner: Actor, zarr_id: str
) -> None:
    """The tree update hands what it wrote to this process's read cache: the next start reads
    no .checksum back from storage, and still sees what the update changed."""
    owner.client.get(f"/api/zarr/{zarr_id}/")  # this process serves reads, as a web process does
    assert owner.client.get(f"/api/zarr/{zarr_id}/files/").status_code == 200
    url = f"/api/zarr/{zarr_id}/upload/"
    assert upload(owner.client, zarr_id, {"a/b/c": b"1"}).status_code == 200
    reads = StorageChecksumTree.total_reads
    response = owner.client.post(url, [{"path": "a/b", "etag": md5(b"")}], format="json")
    assert response.status_code == 400
    assert "'a/b' is a directory" in response.json()["detail"]
    response = owner.client.post(url, [{"path": "a/b/x", "etag": md5(b"x")}], format="json")
    assert response.status_code == 200, response.content
    assert StorageChecksumTree.total_reads == reads
    assert owner.client.delete(url).status_code == 204
    # A second update: the cache follows the new version ("a/b/x" is now a file).
    assert upload(owner.client, zarr_id, {"a/b/x": b"x"}).status_code == 200
    response = owner.client.post(url, [{"path": "a/b/x/y", "etag": md5(b"")}], format="json")
    assert response.status_code == 400
    assert "inside 'a/b/x'" in response.json()["detail"]


def test_a_tree_update_reads_back_only_what_no_committed_update_of_this_process_wrote(
    owner: Actor, zarr_id: str
) -> None:
    """Steady uploads: each update finds the listings it needs in what the previous one wrote.
    After an audit (a new version this process did not write) it reads storage again."""
    assert upload(owner.client, zarr_id, {"d/0": b"0"}).status_code == 200
    reads = StorageChecksumTree.total_reads
    for i in range(1, 4):
        assert upload(owner.client, zarr_id, {f"d/{i}": str(i).encode()}).status_code == 200
    assert StorageChecksumTree.total_reads == reads
    assert_tree_matches_storage(zarr_id)
    archive_audit(ZarrArchive.objects.get(zarr_id=zarr_id))
    reads = StorageChecksumTree.total_reads
    assert upload(owner.client, zarr_id, {"d/9": b"9"}).status_code == 200
    assert StorageChecksumTree.total_reads > reads
    assert_tree_matches_storage(zarr_id)


def test_a_new_version_keeps_the_listings_its_update_did_not_change() -> None:
    def listing(digest: str) -> DirectoryListing:
        return DirectoryListing({"f": FileEntry("f", digest, 1)})

    cache = ListingCache(max_bytes=1 << 20)
    for directory in ("", "kept", "changed", "gone"):
        cache.put(("z", 1, directory), listing(md5(directory.encode())))
    cache.put(("z", 1, "new"), None)  # absent at version 1
    cache.put(("other", 1, "kept"), listing(md5(b"other")))
    changed = listing(md5(b"changed again"))
    cache.carry("z", 1, 2, {"changed": changed, "gone": None, "new": listing(md5(b"n"))})
    assert cache.get(("z", 2, "kept")) == (True, listing(md5(b"kept")))
    assert cache.get(("z", 2, "changed")) == (True, changed)
    assert cache.get(("z", 2, "gone")) == (True, None)
    assert cache.get(("z", 2, "new")) == (True, listing(md5(b"n")))
    assert cache.get(("z", 1, "kept")) == (False, None)  # moved, not copied
    assert cache.get(("other", 1, "kept"))[0]  # another archive is untouched
    cache.forget("z")
    assert [cache.get(("z", 2, d))[0] for d in ("", "kept", "changed")] == [False] * 3
    assert cache.get(("other", 1, "kept"))[0]


def test_listings_an_update_changed_are_served_fresh_and_the_others_without_a_read(
    owner: Actor, zarr_id: str
) -> None:
    """The update's new version carries the listings it did not write: "b" (unchanged) is not
    read again, "a" and the root (changed) are the update's own, never the old ones."""
    assert upload(owner.client, zarr_id, {"a/x": b"1", "b/y": b"1", "c/z": b"1"}).status_code
    reads = StorageChecksumTree.total_reads
    assert upload(owner.client, zarr_id, {"a/x": b"2"}).status_code == 200
    assert upload(owner.client, zarr_id, {"a/new/w": b"3"}).status_code == 200
    assert StorageChecksumTree.total_reads == reads  # starts and updates: all from the cache
    a = owner.client.get(f"/api/zarr/{zarr_id}/files/a").json()["results"]
    assert {r["name"]: r.get("digest") for r in a if r["name"] == "x"} == {"x": md5(b"2")}
    assert "new" in {r["name"] for r in a}
    b = owner.client.get(f"/api/zarr/{zarr_id}/files/b").json()["results"]
    assert [r["digest"] for r in b] == [md5(b"1")]
    assert StorageChecksumTree.total_reads == reads
    assert_tree_matches_storage(zarr_id)
    # A file may not become a directory, though the cache had "a/x" as a file two versions ago.
    url = f"/api/zarr/{zarr_id}/upload/"
    response = owner.client.post(url, [{"path": "a/x/y", "etag": md5(b"")}], format="json")
    assert response.status_code == 400
    assert "inside 'a/x'" in response.json()["detail"]


def test_an_update_that_fails_after_writing_leaves_no_listing_in_the_cache(
    owner: Actor, zarr_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its listings are in storage but in no committed version: the next update reads storage."""
    assert upload(owner.client, zarr_id, {"d/0": b"0"}).status_code == 200

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("after the writes")

    monkeypatch.setattr(tree_updates, "locations_apply", fail)
    with pytest.raises(Retry):  # the eager task, failed, asks to be retried
        upload(owner.client, zarr_id, {"d/1": b"1"})
    monkeypatch.undo()
    reads = StorageChecksumTree.total_reads
    assert tree_updates.tree_update_apply(ZarrArchive.objects.get(zarr_id=zarr_id).pk)
    assert StorageChecksumTree.total_reads > reads  # "d" and the root, from storage
    assert_tree_matches_storage(zarr_id)
