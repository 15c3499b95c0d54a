"""Partial work with the newest dandi CLI (0.81), unmodified: ``upload --zarr-mode patch``
updates an archive without deleting what is not local, and downloads select assets by glob
(``--path-type glob``) and files inside a Zarr asset (``--zarr FILTER``, a URL into the
archive); on SeaweedFS (md5-bound URLs enforced) and on the local backend."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.dandi import (
    DANDI_NEWEST,
    DandiService,
    download_dandiset,
    tree_of,
    upload_dandiset,
    zarr_checksum_of,
)
from tests.support.dandi_trees import zarr_v2, zarr_v3


def _files_url(service: DandiService, location: str) -> str:
    """The form of URL that selects assets by a location (a folder, or with ``--path-type
    glob`` a glob)."""
    return f"{service.url}/api/dandiset/{service.dandiset}/draft/files?location={location}"


@pytest.mark.parametrize("dandi_service", ["seaweedfs"], indirect=True)
def test_patch_mode_updates_and_keeps_remote_only_files(
    dandi_service: DandiService, tmp_path: Path
) -> None:
    """Upload, then change two files, add one and delete two locally: ``--zarr-mode patch``
    updates the changed, adds the new and keeps the deleted ones; the server's checksum is
    the tree of the union, and a full download gives that tree back."""
    service = dandi_service
    (tmp_path / "work").mkdir()
    dandiset_dir = download_dandiset(service, tmp_path / "work")
    local = dandiset_dir / "v3.zarr"
    zarr_v3(local)
    upload_dandiset(service, dandiset_dir)
    union = tmp_path / "union"
    shutil.copytree(local, union)

    for changed in ("x/c/0", "déjà/y/c/0"):
        (local / changed).write_bytes(b"patched " + (local / changed).read_bytes())
    (local / "x/c/2").write_bytes(b"\x03\x04")
    (local / "x/c/1").unlink()
    (local / "déjà/zarr.json").unlink()
    for path in ("x/c/0", "déjà/y/c/0", "x/c/2"):
        shutil.copyfile(local / path, union / path)
    upload_dandiset(service, dandiset_dir, "--zarr-mode", "patch")

    expected = zarr_checksum_of(union)
    assert expected != zarr_checksum_of(local)  # the remote-only files count
    asset = service.assets()["v3.zarr"]
    archive = service.archive(asset["zarr"])
    assert archive["status"] == "Complete"
    assert archive["checksum"] == expected
    assert archive["file_count"] == len(tree_of(union))
    # The asset's metadata is the union's too, whatever size of its local part dandi sent.
    draft = f"/api/dandisets/{service.dandiset}/versions/draft/"
    metadata = service.api("GET", f"{draft}assets/{asset['asset_id']}/").json()
    assert metadata["digest"]["dandi:dandi-zarr-checksum"] == expected
    assert metadata["contentSize"] == sum(p.stat().st_size for p in union.rglob("*") if p.is_file())

    (tmp_path / "fresh").mkdir()
    fresh = download_dandiset(service, tmp_path / "fresh") / "v3.zarr"
    assert tree_of(fresh) == tree_of(union)  # dandi checked the checksum too


@pytest.mark.parametrize("dandi_service", ["local"], indirect=True)
def test_glob_download_selects_assets(dandi_service: DandiService, tmp_path: Path) -> None:
    """``--path-type glob`` selects whole assets by their path (the assets listing's
    ``glob``): the matching Zarr assets download complete, checksum verified; others do not."""
    service = dandi_service
    (tmp_path / "work").mkdir()
    dandiset_dir = download_dandiset(service, tmp_path / "work")
    zarr_v2(dandiset_dir / "sub-1" / "a.zarr")
    zarr_v3(dandiset_dir / "sub-1" / "b.zarr")
    zarr_v3(dandiset_dir / "sub-2" / "a.zarr")
    upload_dandiset(service, dandiset_dir)

    def zarrs(into: Path) -> dict[str, Path]:
        found = [p for p in into.rglob("*.zarr") if p.is_dir()]
        return {p.relative_to(p.parents[1]).as_posix(): p for p in found}

    by_glob = tmp_path / "glob"
    by_glob.mkdir()
    url = _files_url(service, "SUB-*/a.zarr")  # case-insensitive, as the DANDI Archive's
    service.dandi(DANDI_NEWEST, ["download", "--path-type", "glob", url, "-o", str(by_glob)],
                  cwd=tmp_path)  # fmt: skip
    got = zarrs(by_glob)
    assert sorted(got) == ["sub-1/a.zarr", "sub-2/a.zarr"]
    for name, path in got.items():
        assert tree_of(path) == tree_of(dandiset_dir / name)

    folder = tmp_path / "folder"
    folder.mkdir()
    url = _files_url(service, "sub-1/")  # ?path= a prefix, as the DANDI API's
    service.dandi(DANDI_NEWEST, ["download", url, "-o", str(folder)], cwd=tmp_path)
    got = zarrs(folder)
    assert sorted(got) == ["sub-1/a.zarr", "sub-1/b.zarr"]
    for name, path in got.items():
        assert tree_of(path) == tree_of(dandiset_dir / name)


@pytest.mark.parametrize("dandi_service", ["seaweedfs"], indirect=True)
def test_zarr_filters_download_part_of_an_archive(
    dandi_service: DandiService, tmp_path: Path
) -> None:
    """Inside one Zarr asset, dandi selects files itself (``--zarr glob:`` filters, a URL
    into the archive) from the archive's ``files`` listing: exactly those land, each checked
    against the server's md5 by dandi; no whole-archive checksum is claimed."""
    service = dandi_service
    (tmp_path / "work").mkdir()
    dandiset_dir = download_dandiset(service, tmp_path / "work")
    source = dandiset_dir / "v2.zarr"
    zarr_v2(source)
    upload_dandiset(service, dandiset_dir)
    whole = tree_of(source)

    asset_url = (
        f"{service.url}/api/dandisets/{service.dandiset}/versions/draft/assets/?path=v2.zarr"
    )
    into = tmp_path / "filtered"
    into.mkdir()
    args = ["download", "--zarr", "glob:arr/*", "--zarr", "metadata", asset_url, "-o", str(into)]
    service.dandi(DANDI_NEWEST, args, cwd=tmp_path)
    (got_dir,) = into.rglob("v2.zarr")
    got = tree_of(got_dir)
    expected = {
        path: md5
        for path, md5 in whole.items()
        if path.startswith("arr/") or path.rsplit("/", 1)[-1] in {".zgroup", ".zarray", ".zattrs"}
    }
    assert got == expected and len(got) < len(whole)

    # What a URL into the archive (dandi://INSTANCE/ID/v2.zarr/grüße/sub) selects.
    into = tmp_path / "by-path"
    into.mkdir()
    args = ["download", "--zarr", "path:grüße/sub", asset_url, "-o", str(into)]
    service.dandi(DANDI_NEWEST, args, cwd=tmp_path)
    (got_dir,) = into.rglob("v2.zarr")
    assert tree_of(got_dir) == {p: m for p, m in whole.items() if p.startswith("grüße/sub/")}
