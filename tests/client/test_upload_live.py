"""Upload and download against the live service (S3 on moto, PostgreSQL, tasks inline)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dandizarr.client import AuthenticationError, BatchConflict, NotFound
from dandizarr.client.progress import NullProgress
from dandizarr_server.zarr_api.models import Batch
from tests.support.live_client import Service, local_checksum, make_tree


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_round_trip_upload_then_download(
    service: Service, tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, files = tree
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok, result
    assert result.name == "sample.zarr"
    assert (result.uploaded_files, result.skipped_files) == (40, 0)
    # 40 files, 7 per request and 14 per batch: each batch grew by an add while its PUTs ran.
    assert result.batches == 3
    batches = Batch.objects.filter(archive__zarr_id=result.zarr_id).order_by("sequence")
    assert [b.files.count() for b in batches] == [14, 14, 12]
    assert result.server_checksum == local_checksum(root)
    assert service.remote_files(result.zarr_id) == {
        path: ((root / path).stat().st_size, md5) for path, md5 in files.items()
    }
    archive = service.archive(result.zarr_id)
    assert (archive["file_count"], archive["checksum"]) == (40, result.server_checksum)

    dest = tmp_path / "copy"
    with service.client() as client:
        downloaded = client.download(result.zarr_id, dest)
    assert downloaded.ok and downloaded.downloaded_files == 40
    assert downloaded.local_checksum == result.server_checksum
    for path in files:
        assert (dest / path).read_bytes() == (root / path).read_bytes()

    # A directory of it, through the CLI; then again with nothing left to fetch.
    sub = tmp_path / "sub"
    done = service.cli("download", result.zarr_id, str(sub), "--path", "0/c")
    assert done.returncode == 0, done.stderr
    chunk_files = [p for p in files if p.startswith("0/c/")]
    assert sorted(p.relative_to(sub).as_posix() for p in sub.rglob("*") if p.is_file()) == sorted(
        p.removeprefix("0/c/") for p in chunk_files
    )
    status, again = service.cli_json("download", result.zarr_id, str(sub), "--path", "0/c")
    assert status == 0 and again["ok"]
    assert (again["downloaded_files"], again["skipped_files"]) == (0, len(chunk_files))


def test_a_service_without_upload_add_gets_one_batch_per_request(
    service: Service, tree: tuple[Path, dict[str, str]], settings: Any
) -> None:
    settings.DANDIZARR_OPEN_BATCH_FILE_LIMIT = settings.DANDIZARR_BATCH_LIMIT  # no growing
    root, _ = tree
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok and result.batches == 6  # 40 files, 7 per batch
    assert result.server_checksum == local_checksum(root)


def test_a_small_rest_joins_the_last_batch(service: Service, tmp_path: Path, settings: Any) -> None:
    """14 files per batch (the client's cap, the service allowing 28): 30 files go as 14 and
    16, the last 2 joining the second batch rather than making a third; the CLI's
    --batch-files sets the cap."""
    settings.DANDIZARR_OPEN_BATCH_FILE_LIMIT = 28
    root = tmp_path / "thirty.zarr"
    make_tree(root, 30, seed=5)
    count = sum(1 for p in root.rglob("*") if p.is_file())
    status, result = service.cli_json(
        "upload", str(root), "--dandiset", service.dandiset, "--batch-files", "14"
    )
    assert status == 0 and result["ok"], result
    batches = Batch.objects.filter(archive__zarr_id=result["zarr_id"]).order_by("sequence")
    assert [b.files.count() for b in batches] == [14, count - 14]
    assert count - 14 > 14  # the second batch did pass the cap


def test_second_upload_sends_only_what_changed(
    service: Service, tree: tuple[Path, dict[str, str]]
) -> None:
    root, _ = tree
    status, first = service.cli_json("upload", str(root), "--dandiset", service.dandiset)
    assert status == 0 and first["uploaded_files"] == 40
    status, second = service.cli_json("upload", str(root), "--dandiset", service.dandiset)
    assert status == 0 and second["ok"]
    assert (second["zarr_id"], second["uploaded_files"], second["skipped_files"]) == (
        first["zarr_id"],
        0,
        40,
    )
    (root / "0/c/0/1").write_bytes(b"new content")
    (root / "0/c/new").write_bytes(b"a new file")
    status, third = service.cli_json("upload", str(root), "--zarr-id", first["zarr_id"])
    assert status == 0 and third["ok"]
    assert (third["uploaded_files"], third["skipped_files"]) == (2, 39)
    assert third["server_checksum"] == local_checksum(root)


def test_sync_deletes_remote_files_absent_locally(
    service: Service, tree: tuple[Path, dict[str, str]]
) -> None:
    root, _ = tree
    status, first = service.cli_json("upload", str(root), "--dandiset", service.dandiset)
    assert status == 0
    zarr_id = first["zarr_id"]
    for gone in ("0/c/0/1", "1/c/0.0", ".zattrs"):
        (root / gone).unlink()
    # Without --sync the remote files stay, and the check is against what the server should
    # then hold.
    status, kept = service.cli_json("upload", str(root), "--zarr-id", zarr_id)
    assert status == 0 and kept["ok"]
    assert (kept["remote_only_files"], kept["deleted_files"]) == (3, 0)
    assert kept["server_checksum"] == first["server_checksum"] != kept["local_checksum"]
    status, synced = service.cli_json("upload", str(root), "--zarr-id", zarr_id, "--sync")
    assert status == 0 and synced["ok"]
    assert synced["deleted_files"] == 3
    assert synced["server_checksum"] == synced["local_checksum"] == local_checksum(root)
    remote = service.remote_files(zarr_id)
    assert len(remote) == 37 and "0/c/0/1" not in remote and ".zattrs" not in remote


class ChangeFileOnFirstBatch(NullProgress):
    """Rewrites the first file of the first batch after it was hashed, before its PUT."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.victim = ""
        self.batches: list[list[str]] = []

    def batch(self, number: int, paths: Sequence[str]) -> None:
        self.batches.append(list(paths))
        if number == 1:
            self.victim = paths[0]
            (self.root / self.victim).write_bytes(b"changed after hashing")


def test_file_changed_between_hashing_and_upload_is_reported_not_uploaded(
    service: Service, tree: tuple[Path, dict[str, str]]
) -> None:
    root, _ = tree
    progress = ChangeFileOnFirstBatch(root)
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset, progress=progress)
    victim = progress.victim
    assert result.changed_files == [victim]
    assert not result.ok
    assert result.uploaded_files == 39
    # The first batch was started again without it.
    assert result.batch_restarts == 1
    assert victim not in progress.batches[1]
    remote = service.remote_files(result.zarr_id)
    assert victim not in remote and len(remote) == 39
    # Nothing of it reached storage either (its batch was cancelled).
    assert not [k for k in service.bucket_keys() if k.endswith("/" + victim)]
    # The next run sends its current content.
    with service.client() as client:
        again = client.upload(root, zarr_id=result.zarr_id)
    assert again.ok and (again.uploaded_files, again.skipped_files) == (1, 39)
    assert service.remote_files(result.zarr_id)[victim][1] == again_md5(root / victim)


def again_md5(path: Path) -> str:
    import hashlib

    return hashlib.md5(path.read_bytes()).hexdigest()


def test_another_clients_open_batch_is_a_clear_409(
    service: Service, tree: tuple[Path, dict[str, str]]
) -> None:
    root, _ = tree
    response = service.api(
        "POST", "/api/zarr/", json={"name": "busy.zarr", "dandiset": service.dandiset}
    )
    assert response.status_code == 201, response.text
    zarr_id = response.json()["zarr_id"]
    opened = service.api(
        "POST", f"/api/zarr/{zarr_id}/upload/", json=[{"path": "x", "etag": "0" * 32}]
    )
    assert opened.status_code == 200, opened.text

    done = service.cli("upload", str(root), "--zarr-id", zarr_id)
    assert done.returncode == 1
    assert "has an upload batch open that this machine did not start" in done.stderr
    assert "--cancel-open-batch" in done.stderr
    # Someone else's batch is left alone.
    assert service.api("GET", f"/api/zarr/{zarr_id}/upload/").status_code == 204
    with service.client() as client, pytest.raises(BatchConflict):
        client.upload(root, zarr_id=zarr_id)

    status, result = service.cli_json("upload", str(root), "--zarr-id", zarr_id,
                                      "--cancel-open-batch")  # fmt: skip
    assert status == 0 and result["ok"] and result["uploaded_files"] == 40
    assert "x" not in service.remote_files(zarr_id)


def test_bad_token_and_unknown_dandiset_are_clear(
    service: Service, tree: tuple[Path, dict[str, str]]
) -> None:
    root, _ = tree
    done = service.cli("upload", str(root), "--dandiset", service.dandiset, "--token", "nope")
    assert done.returncode == 1
    assert "rejected the credentials" in done.stderr and "Traceback" not in done.stderr
    done = service.cli("upload", str(root), "--dandiset", "999999")
    assert done.returncode == 1
    assert "dandiset 999999 does not exist" in done.stderr and "Traceback" not in done.stderr
    status, summary = service.cli_json("upload", str(root), "--dandiset", "999999")
    assert status == 1 and summary["ok"] is False
    assert "dandiset 999999 does not exist" in summary["error"]
    done = service.cli("upload", str(root), "--dandiset", service.dandiset, DANDIZARR_TOKEN="")
    assert done.returncode == 1 and "needs an API token" in done.stderr
    done = service.cli("ls", "00000000-0000-0000-0000-000000000000")
    assert done.returncode == 1 and "no zarr archive" in done.stderr
    with service.client(token="nope") as client, pytest.raises(AuthenticationError):
        client.upload(root, dandiset=service.dandiset)
    with service.client() as client, pytest.raises(NotFound):
        client.upload(root, dandiset="999999")


def test_ls_lists_directories_with_sizes_and_digests(service: Service, tmp_path: Path) -> None:
    root = tmp_path / "small.zarr"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c").write_bytes(b"12345")
    (root / "a" / "d").write_bytes(b"123")
    (root / "top").write_bytes(b"1")
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok
    zarr_id = result.zarr_id

    done = service.cli("ls", zarr_id)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert [line[-1] for line in lines] == ["a/", "top"]
    assert lines[0][0] == "8" and lines[1][:2] == ["1", again_md5(root / "top")]

    done = service.cli("ls", zarr_id, "a")
    assert [line.split()[-1] for line in done.stdout.splitlines()] == ["b/", "d"]
    done = service.cli("ls", zarr_id, "a/b/c")
    assert done.stdout.split() == ["5", again_md5(root / "a/b/c"), "a/b/c"]
    done = service.cli("ls", zarr_id, "-r")
    assert [line.split()[-1] for line in done.stdout.splitlines()] == ["a/b/c", "a/d", "top"]
    done = service.cli("ls", zarr_id, "nothing/here")
    assert done.returncode == 1 and "404" in done.stderr


def test_empty_directory_uploads_to_an_empty_archive(service: Service, tmp_path: Path) -> None:
    root = tmp_path / "empty.zarr"
    root.mkdir()
    with service.client() as client:
        result = client.upload(root, dandiset=service.dandiset)
    assert result.ok and result.uploaded_files == 0 and result.batches == 0


def test_many_files_in_more_batches(service: Service, tmp_path: Path) -> None:
    root = tmp_path / "bigger.zarr"
    make_tree(root, 150, seed=3, size=3000)
    status, result = service.cli_json("upload", str(root), "--dandiset", service.dandiset,
                                      "-j", "16")  # fmt: skip
    assert status == 0 and result["ok"]
    assert result["uploaded_files"] == 150 and result["batches"] == 11  # 14 per batch
    assert result["server_checksum"] == local_checksum(root)


def test_a_second_upload_matches_the_servers_files_in_path_order(
    service: Service, tmp_path: Path
) -> None:
    """Names whose path order differs from a per-directory order ("a-b" < "a/x" < "a0"): the
    second upload matches each file to the server's (a wrong match would send it again)."""
    root = tmp_path / "order.zarr"
    for path in ("a!", "a-b", "a/x", "a/b-c/d", "a/b/c", "a0", "a.b/c", "é", "Z"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(path.encode())
    status, first = service.cli_json("upload", str(root), "--dandiset", service.dandiset)
    assert status == 0 and first["uploaded_files"] == 9
    (root / "a-b").unlink()
    (root / "a/b-c/e").write_bytes(b"new")
    status, second = service.cli_json("upload", str(root), "--zarr-id", first["zarr_id"])
    assert status == 0 and second["ok"]
    assert (second["uploaded_files"], second["skipped_files"]) == (1, 8)
    assert (second["remote_only_files"], second["deleted_files"]) == (1, 0)
    assert second["server_checksum"] == second["expected_checksum"]


def _draft_assets(service: Service) -> list[dict[str, Any]]:
    listed = service.api("GET", f"/api/dandisets/{service.dandiset}/versions/draft/assets/")
    assert listed.status_code == 200, listed.text
    results: list[dict[str, Any]] = listed.json()["results"]
    return results


def test_an_upload_makes_the_archive_an_asset_of_the_draft_once(
    service: Service, tree: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """Issue #49, 5: as the `dandi` client does, so publishing and `dandi download` see it;
    a second upload finds its asset, and another archive's asset at the path is left alone."""
    root, _ = tree
    with service.client() as client:
        first = client.upload(root, dandiset=service.dandiset)
        again = client.upload(root, dandiset=service.dandiset)
    assert first.ok and again.ok
    assets = _draft_assets(service)
    assert [(a["path"], a["zarr_id"]) for a in assets] == [("sample.zarr", first.zarr_id)]
    assert first.asset_id == again.asset_id == assets[0]["asset_id"]
    status, shown = service.cli_json("upload", str(root), "--dandiset", service.dandiset)
    assert status == 0 and shown["asset_id"] == first.asset_id

    other = tmp_path / "other.zarr"
    make_tree(other, 4, seed=3)
    with service.client() as client:
        taken = client.upload(other, dandiset=service.dandiset, name="elsewhere.zarr")
        moved = service.api(
            "PATCH",
            f"/api/dandisets/{service.dandiset}/versions/draft/assets/{taken.asset_id}/",
            json={"path": "sample2.zarr"},
        )
        assert moved.status_code == 200, moved.text
        clash = tmp_path / "sample2.zarr"
        make_tree(clash, 4, seed=4)
        result = client.upload(clash, dandiset=service.dandiset)
    assert result.ok and result.asset_id is None  # the path is another archive's asset
    by_path = {a["path"]: a["zarr_id"] for a in _draft_assets(service)}
    assert by_path == {"sample.zarr": first.zarr_id, "sample2.zarr": taken.zarr_id}
