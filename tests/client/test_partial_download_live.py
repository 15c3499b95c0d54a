"""``dandizarr download --include/--exclude``: a part of an archive, chosen by paths and glob
patterns, lands exactly, each file verified against the server's md5; the result says it is
partial and what it proved (not the tree checksum). Loose and packed archives, moto and
SeaweedFS."""

from __future__ import annotations

import hashlib
from pathlib import Path

import boto3
import pytest

from tests.support.live_client import Service
from tests.support.sharded_client import upload_packed, write_archive

INCLUDES = ["0/c/1", "**/zarr.json", "1/c/2.*"]
EXCLUDES = ["0/c/1/4", "*/c/*/7"]


def _selected(files: dict[str, str]) -> set[str]:
    """What INCLUDES and EXCLUDES take, spelled out by hand."""

    def included(path: str) -> bool:
        return path.startswith("0/c/1/") or path == "zarr.json" or path.startswith("1/c/2.")

    def excluded(path: str) -> bool:
        return path == "0/c/1/4" or (path.count("/") == 3 and path.endswith("/7"))

    return {p for p in files if included(p) and not excluded(p)}


def _on_disk(dest: Path) -> dict[str, str]:
    return {
        p.relative_to(dest).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
        for p in dest.rglob("*")
        if p.is_file()
    }


def _pattern_args() -> list[str]:
    return [a for p in INCLUDES for a in ("--include", p)] + [
        a for p in EXCLUDES for a in ("--exclude", p)
    ]


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_include_and_exclude_download_exactly_the_selected_files(
    service: Service, tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, files = tree
    with service.client() as client:
        uploaded = client.upload(root, dandiset=service.dandiset)
    expected = _selected(files)
    assert 3 < len(expected) < len(files) // 2

    dest = tmp_path / "part"
    code, result = service.cli_json("download", uploaded.zarr_id, str(dest), *_pattern_args())
    assert code == 0, result
    assert _on_disk(dest) == {p: files[p] for p in expected}
    assert result["ok"] and result["partial"]
    assert result["files"] == result["downloaded_files"] == len(expected)
    assert result["includes"] == INCLUDES and result["excludes"] == EXCLUDES
    assert result["local_checksum"] is None  # no tree checksum is claimed for a part
    assert result["server_checksum"] == uploaded.server_checksum
    assert (
        f"each of the {len(expected)} files matches the server's size and md5"
        in (result["verified"])
    )

    # The whole archive: the tree checksum is what it proves.
    code, whole = service.cli_json("download", uploaded.zarr_id, str(tmp_path / "whole"))
    assert code == 0 and not whole["partial"]
    assert whole["local_checksum"] == whole["server_checksum"]
    assert whole["verified"].endswith(f"the tree checksum {uploaded.server_checksum}")

    # Again into the same directory: every file is there with the right md5, and kept.
    code, again = service.cli_json("download", uploaded.zarr_id, str(dest), *_pattern_args())
    assert code == 0 and again["skipped_files"] == len(expected) and again["downloaded_files"] == 0


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_a_packed_archive_downloads_in_part(service: Service, tmp_path: Path) -> None:
    """Packed files come as byte ranges of their shards: a selection cuts the shard runs, and
    each file taken is still verified on its own."""
    files = write_archive(tmp_path / "image.zarr")
    result = upload_packed(service, tmp_path / "image.zarr")
    args = ["--include", "0/0", "--include", "**/.zarray", "--exclude", "0/0/1"]
    dest = tmp_path / "part"
    code, got = service.cli_json("download", result["zarr_id"], str(dest), *args)
    assert code == 0 and got["ok"] and got["partial"], got
    expected = {
        p: hashlib.md5(data).hexdigest()
        for p, data in files.items()
        if (p.startswith("0/0/") and not p.startswith("0/0/1/")) or p.endswith(".zarray")
    }
    assert _on_disk(dest) == expected and got["downloaded_files"] == len(expected)


@pytest.mark.s3_servers("moto")
def test_patterns_are_from_the_root_under_path(
    service: Service, tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """With ``--path`` the files land relative to it; the patterns still name paths from the
    archive's root; a selection outside ``--path`` or matching nothing is an error."""
    root, files = tree
    with service.client() as client:
        uploaded = client.upload(root, dandiset=service.dandiset)
    dest = tmp_path / "under"
    args = ["download", uploaded.zarr_id, str(dest), "--path", "0", "--include", "0/c/2/*"]
    code, result = service.cli_json(*args)
    assert code == 0, result
    assert _on_disk(dest) == {
        p.removeprefix("0/"): md5 for p, md5 in files.items() if p.startswith("0/c/2/")
    }

    for include in ("1/c/*", "0/c/nothing*"):
        args = ["download", uploaded.zarr_id, str(tmp_path / "none"), "--path", "0"]
        done = service.cli(*args, "--include", include)
        assert done.returncode != 0
        assert "matches the include and exclude patterns" in done.stderr


@pytest.mark.s3_servers("moto")
def test_each_selected_file_is_verified_and_only_those(
    service: Service, tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """Storage changed behind the service's back: a selected file is refused by its md5 (the
    download fails naming it); a changed file outside the selection is never fetched."""
    root, files = tree
    inside, outside = (
        next(p for p in sorted(files) if p.startswith(d) and (root / p).stat().st_size)
        for d in ("0/c/1/", "0/c/2/")
    )
    with service.client() as client:
        uploaded = client.upload(root, dandiset=service.dandiset)
        keys = {p: str(client.stat(uploaded.zarr_id, p)["s3_key"]) for p in (inside, outside)}
    s3 = boto3.client(
        "s3",
        endpoint_url=service.moto,
        region_name="us-east-1",
        aws_access_key_id=service.access_key,
        aws_secret_access_key=service.secret_key,
    )
    for path, key in keys.items():
        good = (root / path).read_bytes()  # same size, other bytes: only the md5 tells
        s3.put_object(Bucket=service.bucket, Key=key, Body=bytes(b ^ 0xFF for b in good))

    fine = tmp_path / "fine"
    args = ["download", uploaded.zarr_id, str(fine), "--include", "0/c/2", "--exclude", outside]
    code, result = service.cli_json(*args)
    assert code == 0 and result["ok"], result
    assert _on_disk(fine) == {
        p: m for p, m in files.items() if p.startswith("0/c/2/") and p != outside
    }

    bad = tmp_path / "bad"
    done = service.cli("download", uploaded.zarr_id, str(bad), "--include", "0/c/1")
    assert done.returncode != 0
    assert f"1 files could not be downloaded, e.g. {inside}" in done.stderr
    assert inside not in _on_disk(bad)
