"""Check that an archive's stored .checksum tree is exactly what its storage listing gives."""

from __future__ import annotations

from checksums import DirectoryListing, compute_tree, decode_checksum_file
from zarr_api.models import ZarrArchive
from zarr_api.storage import get_store


def assert_tree_matches_storage(zarr_id: str) -> None:
    store = get_store()
    prefix = f"zarr/{zarr_id}/"
    expected: dict[str, DirectoryListing] = {}
    summary = compute_tree(
        ((i.key[len(prefix) :], i.size, i.etag) for i in store.list(prefix)),
        on_directory=lambda d, listing: expected.__setitem__(d, listing),
    )
    checksum_prefix = f"zarr_checksums/{zarr_id}/"
    stored = {}
    for info in store.list(checksum_prefix):
        relative = info.key[len(checksum_prefix) :]
        assert relative.endswith(".checksum"), relative
        directory = relative[: -len(".checksum")].rstrip("/")
        stored[directory] = decode_checksum_file(store.get(info.key))
    if summary.count == 0:
        assert stored == {}, f"an empty archive keeps .checksum files: {sorted(stored)}"
    else:
        assert sorted(stored) == sorted(expected), "directories with a .checksum differ"
        for directory, listing in expected.items():
            assert stored[directory] == listing, f".checksum of {directory!r} drifted"
    archive = ZarrArchive.objects.get(zarr_id=zarr_id)
    assert (archive.checksum, archive.file_count, archive.size) == (
        summary.digest,
        summary.count,
        summary.size,
    )
