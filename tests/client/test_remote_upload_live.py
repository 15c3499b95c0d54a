"""``dandizarr upload URL``: a Zarr in a remote store (S3 on SeaweedFS, an HTTP server, a
``file://`` URL) streamed into a write session of the live service, no local copy; its
checksum against ``dandizarr checksum`` of the same tree on disk."""

from __future__ import annotations

import functools
import http.server
import json
import os
import signal
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dandizarr.client.remote_source import RemoteTree
from dandizarr_server.zarr_api.models import ZarrArchive
from tests.support.live_client import Service, make_tree

# Source files bigger than the pieces the tests read them in: streamed, never held whole.
PIECE = 64 << 10


def local_cli_checksum(service: Service, root: Path) -> str:
    """What ``dandizarr checksum`` gives for the tree on disk."""
    done = service.cli("checksum", str(root))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[0]


def tree_with_big_files(root: Path) -> dict[str, str]:
    files = make_tree(root, 30, size=2000)
    for name, size in (("big/0", 5 * PIECE + 123), ("big/1", 3 * PIECE)):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(os.urandom(size))
    return files


def put_tree_in_bucket(s3: Any, bucket: str, root: Path, prefix: str) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        s3.put_object(
            Bucket=bucket,
            Key=f"{prefix}/{path.relative_to(root).as_posix()}",
            Body=path.read_bytes(),
        )


def remote_upload(service: Service, url: str, *args: str, **env: str) -> tuple[int, dict[str, Any]]:
    return service.cli_json(
        "upload", url, "--dandiset", service.dandiset, "--piece-size", str(PIECE), *args, **env
    )


@pytest.mark.s3_servers("seaweedfs")
def test_upload_from_s3_equals_the_local_checksum(
    service: Service, seaweedfs: Any, tmp_path: Path
) -> None:
    root = tmp_path / "sample.zarr"
    tree_with_big_files(root)
    source = seaweedfs.create_bucket("source-of-remote-upload")
    put_tree_in_bucket(seaweedfs.client(), source, root, "subject/sample.zarr")
    env = {"AWS_ACCESS_KEY_ID": service.access_key, "AWS_SECRET_ACCESS_KEY": service.secret_key}
    url = f"s3://{source}/subject/sample.zarr"
    endpoint = f"endpoint_url={seaweedfs.endpoint_url}"
    status, result = remote_upload(service, url, "--storage-option", endpoint, **env)
    assert status == 0, result
    assert result["name"] == "sample.zarr"
    assert (result["uploaded_files"], result["skipped_files"]) == (32, 0)
    assert result["server_checksum"] == local_cli_checksum(service, root)
    on_server = service.remote_files(result["zarr_id"])
    assert on_server["big/0"][0] == 5 * PIECE + 123
    # Again: the draft holds every file with its md5, nothing is sent.
    status, again = remote_upload(service, url, "--storage-option", endpoint, **env)
    assert status == 0, again
    assert (again["uploaded_files"], again["skipped_files"]) == (0, 32)
    assert again["server_checksum"] == result["server_checksum"]


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served by python's http.server (listings as HTML links, no Range
    support): its path and URL."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_upload_from_https_equals_the_local_checksum(
    service: Service, http_root: tuple[Path, str]
) -> None:
    served, base = http_root
    root = served / "image.zarr"
    files = tree_with_big_files(root)
    status, result = remote_upload(service, f"{base}/image.zarr/")
    assert status == 0, result
    assert result["name"] == "image.zarr"
    assert result["uploaded_files"] == len(files) + 2
    assert result["server_checksum"] == local_cli_checksum(service, root)


@pytest.mark.s3_servers("seaweedfs")  # moto runs in this process: it would hold the bytes
def test_a_file_bigger_than_a_piece_is_streamed_in_bounded_memory(
    service: Service, tmp_path: Path
) -> None:
    """A 24 MiB file read in 256 KiB pieces: the upload's peak of Python memory stays far
    below the file (whole-file buffering would hold it once at least)."""
    root = tmp_path / "one.zarr"
    root.mkdir()
    (root / "zarr.json").write_text('{"zarr_format": 3}')
    (root / "data").write_bytes(os.urandom(24 << 20))
    tree = RemoteTree(root.as_uri(), piece_bytes=256 << 10)
    with service.client(jobs=2) as client:
        client.info()  # the connection pools and the service's first answers, before the peak
        tracemalloc.start()
        try:
            result = client.upload_remote(
                root.as_uri(), dandiset=service.dandiset, piece_bytes=256 << 10
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.ok, result
    assert result.uploaded_bytes == (24 << 20) + len('{"zarr_format": 3}')
    assert peak < 8 << 20, f"peak {peak:,} bytes"
    assert max(len(piece) for piece in tree.pieces("data")) == 256 << 10


def session_staged(service: Service, zarr_id: str) -> tuple[str, int] | None:
    """The session a running upload noted (in its state directory), and the files staged."""
    notes = list(service.state_dir.glob("session-*.json"))
    if not notes:
        return None
    session_id = json.loads(notes[0].read_text())["session_id"]
    response = service.api("GET", f"/api/zarr/{zarr_id}/sessions/{session_id}/")
    return session_id, int(response.json()["files"])


def test_a_killed_upload_leaves_the_draft_and_the_next_run_completes(
    service: Service, tmp_path: Path
) -> None:
    root = tmp_path / "killed.zarr"
    make_tree(root, 400, size=4000)
    upload = service.popen(
        "upload", root.as_uri(), "--dandiset", service.dandiset, "--jobs", "1", "--no-progress"
    )
    staged: tuple[str, int] | None = None
    zarr_id = None
    while upload.poll() is None:
        archive = ZarrArchive.objects.filter(name="killed.zarr").first()
        if archive is not None:
            zarr_id = str(archive.zarr_id)
            staged = session_staged(service, zarr_id)
            if staged is not None and staged[1] >= 20:
                break
        time.sleep(0.02)
    assert upload.poll() is None, "the upload finished before it could be killed"
    os.kill(upload.pid, signal.SIGKILL)
    upload.communicate()
    assert zarr_id is not None and staged is not None
    assert service.archive(zarr_id)["file_count"] == 0  # the draft as it was: empty
    assert service.remote_files(zarr_id) == {}
    status, result = remote_upload(service, root.as_uri())
    assert status == 0, result
    assert result["zarr_id"] == zarr_id
    assert result["server_checksum"] == local_cli_checksum(service, root)
    # What the killed run sent was not sent again (but the one file it may have staged and
    # not sent yet, with one job: sent again, or the commit would find it missing).
    assert result["skipped_files"] >= staged[1] - 1
    assert result["uploaded_files"] == 400 - result["skipped_files"]
    assert not list(service.state_dir.glob("session-*.json"))


def test_a_source_that_is_missing_or_not_a_zarr_is_refused_and_changes_nothing(
    service: Service, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not a zarr")
    for url, said in (
        ((tmp_path / "absent.zarr").as_uri(), "does not exist"),
        (plain.as_uri(), "is not a Zarr"),
        ("nosuchprotocol://x/y.zarr", "nosuchprotocol"),
    ):
        done = service.cli("upload", url, "--dandiset", service.dandiset)
        assert done.returncode == 1, done.stderr
        assert said in done.stderr, done.stderr
    assert not ZarrArchive.objects.exists()


def test_a_file_over_the_multipart_threshold_goes_in_parts(
    service: Service, tmp_path: Path, settings: Any
) -> None:
    """Past the service's multipart threshold a remote file is streamed into the session in
    parts (``put_stream``), and the checksum is still the local one."""
    settings.DANDIZARR_MULTIPART_THRESHOLD_BYTES = 6 << 20
    settings.DANDIZARR_MULTIPART_PART_BYTES = 5 << 20
    root = tmp_path / "big.zarr"
    root.mkdir()
    (root / "zarr.json").write_text('{"zarr_format": 3}')
    (root / "c").write_bytes(os.urandom(11 << 20))
    status, result = remote_upload(service, root.as_uri())
    assert status == 0, result
    assert result["server_checksum"] == local_cli_checksum(service, root)
    assert service.remote_files(result["zarr_id"])["c"][0] == 11 << 20
