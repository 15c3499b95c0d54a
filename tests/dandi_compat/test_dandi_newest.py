"""The newest dandi CLI (0.81), unmodified, uploads Zarr v2 and v3 archives into a dandiset
(POST files/, DELETE files/, finalize/), re-uploads after changes, and downloads them back with
exact checksums; on SeaweedFS (md5-bound URLs enforced) and on the local backend."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.dandi import (
    DANDI_NEWEST,
    DandiService,
    tree_of,
    zarr_checksum_of,
)
from tests.support.dandi_trees import modify, zarr_v2, zarr_v3


def _api_key_env(service: DandiService) -> dict[str, str]:
    # The newest dandi names a URL instance by its API host:port and reads {NAME}_API_KEY.
    netloc = urlsplit(service.url).netloc
    return {f"{netloc.upper()}_API_KEY": service.token, "DANDI_API_KEY": service.token}


def _download(service: DandiService, into: Path) -> Path:
    url = f"{service.url}/api/dandisets/{service.dandiset}/versions/draft/"
    service.dandi(DANDI_NEWEST, ["download", url, "-o", str(into)], cwd=into.parent)
    return into / service.dandiset


def _upload(service: DandiService, dandiset_dir: Path) -> None:
    service.dandi(
        DANDI_NEWEST, ["upload", "-i", service.url], cwd=dandiset_dir, **_api_key_env(service)
    )


def _check(service: DandiService, local: Path, asset_path: str) -> str:
    asset = service.assets()[asset_path]
    archive = service.archive(asset["zarr"])
    expected = zarr_checksum_of(local)
    assert archive["status"] == "Complete"
    assert archive["checksum"] == expected
    metadata = service.api(
        "GET", f"/api/dandisets/{service.dandiset}/versions/draft/assets/{asset['asset_id']}/"
    ).json()
    assert metadata["digest"]["dandi:dandi-zarr-checksum"] == expected
    assert metadata["contentSize"] == sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
    return expected


def test_newest_dandi_uploads_and_downloads(dandi_service: DandiService, tmp_path: Path) -> None:
    service = dandi_service
    first = tmp_path / "first"
    first.mkdir()
    dandiset_dir = _download(service, first)
    assert (dandiset_dir / "dandiset.yaml").exists()
    zarr_v2(dandiset_dir / "v2.zarr")
    zarr_v3(dandiset_dir / "v3.zarr")
    _upload(service, dandiset_dir)
    _check(service, dandiset_dir / "v2.zarr", "v2.zarr")
    _check(service, dandiset_dir / "v3.zarr", "v3.zarr")

    modify(dandiset_dir / "v2.zarr", changed="arr/0.0", added="grüße/sub/vals/2", removed="arr/1.0")
    modify(dandiset_dir / "v3.zarr", changed="x/c/0", added="déjà/y/c/1", removed="x/c/1")
    _upload(service, dandiset_dir)
    checksums = {
        name: _check(service, dandiset_dir / name, name) for name in ("v2.zarr", "v3.zarr")
    }

    second = tmp_path / "second"
    second.mkdir()
    fresh = _download(service, second)
    for name, checksum in checksums.items():
        assert tree_of(fresh / name) == tree_of(dandiset_dir / name)
        assert zarr_checksum_of(fresh / name) == checksum
    shutil.rmtree(second)


def test_newest_dandi_downloads_a_sharded_archive(
    dandi_service: DandiService, tmp_path: Path
) -> None:
    from dandizarr.client import DandizarrClient

    service = dandi_service
    source = tmp_path / "packed.zarr"
    zarr_v2(source)
    with DandizarrClient(service.url, service.token) as client:
        result = client.upload(source, dandiset=service.dandiset, name="packed.zarr", pack=True)
    archive = service.archive(result.zarr_id)
    assert archive["layout"] == "sharded" and archive["shard_count"] > 0
    # The upload made the archive the draft's asset at its name, as `dandi upload` would.
    assert service.assets()["packed.zarr"]["zarr_id"] == result.zarr_id

    (tmp_path / "download").mkdir()
    fresh = _download(service, tmp_path / "download")
    assert tree_of(fresh / "packed.zarr") == tree_of(source)
    assert zarr_checksum_of(fresh / "packed.zarr") == archive["checksum"]


@pytest.mark.parametrize("dandi_service", ["seaweedfs"], indirect=True)
def test_newest_dandi_uploads_and_downloads_an_embargoed_dandiset(
    dandi_service: DandiService, tmp_path: Path
) -> None:
    """With ``DANDI_API_KEY`` the owner uploads into and downloads a private dandiset; without
    it, the dandiset is not there."""
    service = dandi_service
    created = service.api("POST", "/api/dandisets/?embargo=true", json={"name": "embargoed"})
    assert created.status_code == 201 and created.json()["embargo_status"] == "EMBARGOED"
    private = DandiService(service.url, service.token, created.json()["identifier"], service.home)
    key = _api_key_env(private)
    url = f"{private.url}/api/dandisets/{private.dandiset}/versions/draft/"
    (tmp_path / "first").mkdir()
    private.dandi(DANDI_NEWEST, ["download", url, "-o", str(tmp_path / "first")],
                  cwd=tmp_path, **key)  # fmt: skip
    dandiset_dir = tmp_path / "first" / private.dandiset
    zarr_v3(dandiset_dir / "v3.zarr")
    _upload(private, dandiset_dir)
    checksum = _check(private, dandiset_dir / "v3.zarr", "v3.zarr")

    (tmp_path / "second").mkdir()
    private.dandi(DANDI_NEWEST, ["download", url, "-o", str(tmp_path / "second")],
                  cwd=tmp_path, **key)  # fmt: skip
    fresh = tmp_path / "second" / private.dandiset / "v3.zarr"
    assert zarr_checksum_of(fresh) == checksum
    assert tree_of(fresh) == tree_of(dandiset_dir / "v3.zarr")

    (tmp_path / "anonymous").mkdir()
    with pytest.raises(AssertionError, match=r"dandi .* failed"):
        private.dandi(DANDI_NEWEST, ["download", url, "-o", str(tmp_path / "anonymous")],
                      cwd=tmp_path)  # fmt: skip
    assert not list((tmp_path / "anonymous").rglob("*.zarr"))


def _publish(service: DandiService) -> str:
    response = service.api("POST", f"/api/dandisets/{service.dandiset}/versions/draft/publish/")
    assert response.status_code == 201, response.content
    return str(response.json()["version"])


@pytest.mark.parametrize("dandi_service", ["seaweedfs"], indirect=True)
def test_newest_dandi_downloads_every_published_version_exactly(
    dandi_service: DandiService, tmp_path: Path
) -> None:
    """Publish, change the draft, publish again, change it again: each published version
    downloads as it was (the dandi client checks each archive's checksum), and so does the
    draft."""
    service = dandi_service
    work = tmp_path / "work"
    work.mkdir()
    dandiset_dir = _download(service, work)
    zarr_v2(dandiset_dir / "v2.zarr")
    _upload(service, dandiset_dir)
    states = {_publish(service): tree_of(dandiset_dir / "v2.zarr")}
    modify(dandiset_dir / "v2.zarr", changed="arr/0.0", added="grüße/sub/vals/2", removed="arr/1.0")
    _upload(service, dandiset_dir)
    states[_publish(service)] = tree_of(dandiset_dir / "v2.zarr")
    modify(dandiset_dir / "v2.zarr", changed="arr/0.1", added="more/x", removed="grüße/sub/vals/2")
    _upload(service, dandiset_dir)
    states["draft"] = tree_of(dandiset_dir / "v2.zarr")
    assert len({str(sorted(s.items())) for s in states.values()}) == 3

    for number, (version, expected) in enumerate(states.items()):
        into = tmp_path / f"get-{number}"
        into.mkdir()
        url = f"{service.url}/api/dandisets/{service.dandiset}/versions/{version}/"
        service.dandi(DANDI_NEWEST, ["download", url, "-o", str(into)], cwd=tmp_path)
        assert tree_of(into / service.dandiset / "v2.zarr") == expected, version
