"""The versions contract: what a store keeps of replaced objects (objectstore.versions)."""

from __future__ import annotations

import pytest

from dandizarr.objectstore.base import (
    ObjectNotFound,
    ObjectStore,
)
from dandizarr.testing.store_contract.support import (
    ContractBase,
    keys_of,
    md5,
)


class VersionsContract(ContractBase):
    """Versions: kept on overwrite and delete, found by md5, restored, deleted for good."""

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
