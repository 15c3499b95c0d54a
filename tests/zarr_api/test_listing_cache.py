"""Browsing reads each .checksum once per tree version (zarr_api.tree.ListingCache)."""

from __future__ import annotations

from checksums import DirectoryListing, FileEntry
from tests.support.api import Actor, md5, upload
from tests.support.tree_check import assert_tree_matches_storage
from zarr_api.models import ZarrArchive
from zarr_api.services.audit import archive_audit
from zarr_api.tree import CachedTree, ListingCache, StorageChecksumTree


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
    # "big/007" is no directory: its own probe reads storage once.
    assert StorageChecksumTree.total_reads - reads == 1
    # A new batch is a new version of the tree: its listings are read afresh.
    assert upload(owner.client, zarr_id, {"big/007": b"seven"}).status_code == 200
    entry = owner.client.get(f"/api/zarr/{zarr_id}/files/big/007").json()
    assert entry["digest"] == md5(b"seven")
    listing = owner.client.get(f"/api/zarr/{zarr_id}/files/big", {"page_size": 200}).json()
    assert {r["name"]: r["digest"] for r in listing["results"]}["007"] == md5(b"seven")


def test_listing_cache_holds_at_most_its_entries_and_drops_the_oldest() -> None:
    def listing(n: int) -> DirectoryListing:
        return DirectoryListing({f"f{i}": FileEntry(f"f{i}", md5(b""), 0) for i in range(n)})

    cache = ListingCache(max_entries=25)
    cache.put("a", listing(9))  # 10 entries with its own
    cache.put("b", listing(9))
    assert cache.get("a")[0]  # "a" is now the most recently used
    cache.put("c", listing(9))  # 30 > 25: the least recently used ("b") goes
    assert [cache.get(k)[0] for k in "abc"] == [True, False, True]
    cache.put("huge", listing(100))  # larger than the whole cache: not kept
    assert cache.get("huge") == (False, None)
    cache.put("absent", None)
    assert cache.get("absent") == (True, None)


def test_a_committed_update_drops_the_archives_listings_of_older_versions() -> None:
    """Readers key by the committed version, so an update's ``remember`` replaces the archive's
    older listings (they would fill the cache, read no more); other archives' stay."""
    listing = DirectoryListing({"f": FileEntry("f", md5(b""), 0)})
    cache = ListingCache(max_entries=100)
    cache.put(("z", "v1", "a"), listing)
    cache.put(("z", "v1", "b"), listing)
    cache.put(("other", "v1", "a"), listing)
    tree = CachedTree(StorageChecksumTree(None, "z"), "v1", cache)  # type: ignore[arg-type]
    tree.written["a"] = listing
    tree.remember("v2")
    assert cache.get(("z", "v2", "a")) == (True, listing)
    assert not cache.get(("z", "v1", "a"))[0] and not cache.get(("z", "v1", "b"))[0]
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
