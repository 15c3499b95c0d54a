"""dandi 0.48.1, the one real client of the batch flow (POST upload/, PUT with X-Amz-ACL and no
Content-MD5, upload/complete/, ingest/), unmodified: uploads, re-uploads and downloads Zarr v2
and v3 archives with exact checksums, on SeaweedFS (its ACL URLs) and the local backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.dandi import (
    DANDI_048,
    PORT_8000_GROUP,
    DandiService,
    tree_of,
    zarr_checksum_of,
)
from tests.support.dandi_trees import modify, zarr_v2, zarr_v3

INSTANCE = "dandi-api-local-docker-tests"
# Its service listens on 127.0.0.1:8000 (dandi_service_8000): one worker runs them, one by one.
pytestmark = pytest.mark.xdist_group(PORT_8000_GROUP)


def _env(service: DandiService) -> dict[str, str]:
    return {"DANDI_INSTANCEHOST": "127.0.0.1", "DANDI_API_KEY": service.token}


def _download(service: DandiService, into: Path) -> Path:
    into.mkdir()
    url = f"dandi://{INSTANCE}/{service.dandiset}@draft"
    service.dandi(DANDI_048, ["download", url, "-o", str(into)], cwd=into, **_env(service))
    return into / service.dandiset


def _upload(service: DandiService, dandiset_dir: Path) -> None:
    """Both archives, the v2 one validated by dandi first."""
    service.dandi(
        DANDI_048, ["upload", "-i", INSTANCE, "v2.zarr"], cwd=dandiset_dir, **_env(service)
    )
    # Its zarr library (2.x) cannot open a Zarr v3, so its validation must be skipped.
    skip = ["upload", "-i", INSTANCE, "--validation", "skip", "v3.zarr"]
    service.dandi(DANDI_048, skip, cwd=dandiset_dir, **_env(service))


def _upload_unvalidated(service: DandiService, dandiset_dir: Path) -> None:
    """Both archives in one run of dandi, neither validated: where the validated upload (above)
    is not what the test is about, one start of dandi and one wait for its checksums, not two."""
    both = ["upload", "-i", INSTANCE, "--validation", "skip", "v2.zarr", "v3.zarr"]
    service.dandi(DANDI_048, both, cwd=dandiset_dir, **_env(service))


def _check(service: DandiService, local: Path, asset_path: str) -> str:
    archive = service.archive(service.assets()[asset_path]["zarr"])
    assert archive["status"] == "Complete"
    assert archive["checksum"] == zarr_checksum_of(local)
    return str(archive["checksum"])


@pytest.mark.parametrize("dandi_service_8000", ["seaweedfs"], indirect=True)
def test_dandi_048_uploads_and_downloads(dandi_service_8000: DandiService, tmp_path: Path) -> None:
    service = dandi_service_8000
    dandiset_dir = _download(service, tmp_path / "first")
    assert (dandiset_dir / "dandiset.yaml").exists()
    zarr_v2(dandiset_dir / "v2.zarr")
    zarr_v3(dandiset_dir / "v3.zarr")
    _upload(service, dandiset_dir)
    assert set(service.assets()) == {"v2.zarr", "v3.zarr"}
    for name in ("v2.zarr", "v3.zarr"):
        _check(service, dandiset_dir / name, name)

    modify(dandiset_dir / "v2.zarr", changed="arr/0.1", added="arr/9/deep", removed="arr/0.0")
    modify(dandiset_dir / "v3.zarr", changed="déjà/y/c/0", added="x/c/2", removed="x/c/1")
    _upload(service, dandiset_dir)
    checksums = {
        name: _check(service, dandiset_dir / name, name) for name in ("v2.zarr", "v3.zarr")
    }

    fresh = _download(service, tmp_path / "second")
    for name, checksum in checksums.items():
        assert tree_of(fresh / name) == tree_of(dandiset_dir / name)
        assert zarr_checksum_of(fresh / name) == checksum


@pytest.mark.parametrize("dandi_service_8000", ["local"], indirect=True)
def test_dandi_048_downloads_a_published_version_after_the_draft_changed(
    dandi_service_8000: DandiService, tmp_path: Path
) -> None:
    service = dandi_service_8000
    dandiset_dir = _download(service, tmp_path / "first")
    zarr_v2(dandiset_dir / "v2.zarr")
    zarr_v3(dandiset_dir / "v3.zarr")
    # (The test above uploads and re-uploads them with dandi's validation of the v2 one.)
    _upload_unvalidated(service, dandiset_dir)
    published = {name: tree_of(dandiset_dir / name) for name in ("v2.zarr", "v3.zarr")}
    response = service.api("POST", f"/api/dandisets/{service.dandiset}/versions/draft/publish/")
    assert response.status_code == 201, response.content
    version = response.json()["version"]
    modify(dandiset_dir / "v2.zarr", changed="arr/0.1", added="arr/9/deep", removed="arr/0.0")
    modify(dandiset_dir / "v3.zarr", changed="déjà/y/c/0", added="x/c/2", removed="x/c/1")
    _upload_unvalidated(service, dandiset_dir)

    into = tmp_path / "published"
    into.mkdir()
    url = f"dandi://{INSTANCE}/{service.dandiset}@{version}"
    service.dandi(DANDI_048, ["download", url, "-o", str(into)], cwd=into, **_env(service))
    for name, tree in published.items():
        assert tree_of(into / service.dandiset / name) == tree
        assert tree != tree_of(dandiset_dir / name)
