"""Check that an archive's stored .checksum tree is exactly what its storage listing gives."""

from __future__ import annotations

import hashlib

from dandizarr.checksums import DirectoryListing, compute_tree, decode_checksum_file
from dandizarr_server.zarr_api.domain.keys import checksums_prefix, files_prefix
from dandizarr_server.zarr_api.models import ShardMember, ZarrArchive
from dandizarr_server.zarr_api.runtime.storage import get_store


def assert_tree_matches_storage(zarr_id: str) -> None:
    store = get_store()
    prefix = files_prefix(zarr_id)
    expected: dict[str, DirectoryListing] = {}
    # A packed file is its member row's byte range of its shard, hashed here from storage.
    members = {
        m.path: (
            m.length,
            hashlib.md5(
                store.get_range(m.shard.key, m.offset, m.offset + m.length) if m.length else b""
            ).hexdigest(),
        )
        for m in ShardMember.objects.filter(archive__zarr_id=zarr_id).select_related("shard")
    }
    for path, (_, md5) in members.items():
        row = ShardMember.objects.get(archive__zarr_id=zarr_id, path=path)
        assert row.md5 == md5, f"member {path!r}: row says {row.md5}, shard holds {md5}"
    # A multipart object's ETag is no md5: its bytes are hashed here.
    files = {
        i.key[len(prefix) :]: (
            i.size,
            i.etag if "-" not in i.etag else hashlib.md5(store.get(i.key)).hexdigest(),
        )
        for i in store.list(prefix)
    }
    doubled = sorted(files.keys() & members.keys())
    assert not doubled, f"packed files still have loose objects: {doubled}"
    files.update(members)
    summary = compute_tree(
        ((path, size, md5) for path, (size, md5) in sorted(files.items())),
        on_directory=lambda d, listing: expected.__setitem__(d, listing),
    )
    checksum_prefix = checksums_prefix(zarr_id)
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
