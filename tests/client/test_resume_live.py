"""Interrupted uploads: killed outright (resume on the next run) or stopped with a signal
(the open batch is cancelled on the way out)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.live_client import Service, make_tree

FILES = 150


def start_upload_and_wait_for_progress(
    service: Service, root: Path
) -> tuple[str, subprocess.Popen[str]]:
    """Start the CLI on a fresh archive; return once the server holds some of its files."""
    response = service.api(
        "POST", "/api/zarr/", json={"name": root.name, "dandiset": service.dandiset}
    )
    assert response.status_code == 201, response.text
    zarr_id = response.json()["zarr_id"]
    process = service.popen("upload", str(root), "--zarr-id", zarr_id, "-j", "2", "--no-progress")
    deadline = time.monotonic() + 180
    while service.archive(zarr_id)["file_count"] == 0:
        if process.poll() is not None:
            pytest.fail(f"the upload ended before any batch completed:\n{process.stderr.read()}")
        assert time.monotonic() < deadline, "no batch completed in 180 s"
        time.sleep(0.02)
    return zarr_id, process


@pytest.mark.s3_servers("moto", "seaweedfs")
def test_killed_upload_resumes_without_uploading_again(service: Service, tmp_path: Path) -> None:
    root = tmp_path / "killed.zarr"
    make_tree(root, FILES, seed=5, size=2000)
    zarr_id, process = start_upload_and_wait_for_progress(service, root)
    process.kill()
    process.communicate()
    # Killed mid-upload, not finished: the test means nothing otherwise.
    assert process.returncode == -signal.SIGKILL
    held = service.remote_files(zarr_id)
    assert 0 < len(held) < FILES

    status, result = service.cli_json("upload", str(root), "--zarr-id", zarr_id)
    assert status == 0 and result["ok"], result
    # Everything the server held was skipped, not sent again. (A batch the killed run had
    # fully uploaded is completed by this run and skipped too.)
    assert result["skipped_files"] >= len(held)
    assert result["uploaded_files"] + result["skipped_files"] == FILES
    assert result["put_requests"] == result["uploaded_files"]
    assert len(service.remote_files(zarr_id)) == FILES
    assert service.api("GET", f"/api/zarr/{zarr_id}/upload/").status_code == 404
    # The run's bookkeeping of its open batch is gone.
    assert not list(service.state_dir.glob("*.json"))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_upload_cancels_its_open_batch(
    service: Service, tmp_path: Path, signum: signal.Signals
) -> None:
    root = tmp_path / "interrupted.zarr"
    # Enough batches that the signal lands mid-upload even when the machine is busy (the
    # progress poll shares this process with the live server).
    files = 4 * FILES
    make_tree(root, files, seed=6, size=2000)
    zarr_id, process = start_upload_and_wait_for_progress(service, root)
    assert process.poll() is None, "the upload finished before it could be interrupted"
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    # No batch of its own is left open, and storage holds exactly what the tree lists.
    assert service.api("GET", f"/api/zarr/{zarr_id}/upload/").status_code == 404
    held = service.remote_files(zarr_id)
    assert 0 < len(held) < files
    chunk_keys = [k for k in service.bucket_keys() if zarr_id in k and ".checksum" not in k]
    assert len(chunk_keys) == len(held)

    status, result = service.cli_json("upload", str(root), "--zarr-id", zarr_id)
    assert status == 0 and result["ok"]
    assert result["skipped_files"] == len(held)
    assert result["uploaded_files"] == files - len(held)
