"""``dandizarr serve`` as a user runs it (``make serve``): SQLite (IMMEDIATE transactions, WAL)
and the local object store under its data directory, tasks inline, Django's threaded server
(TCP_NODELAY). A client uploads into it in many batches and downloads the archive back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from bench.live_service import free_port, wait_for
from dandizarr.client import DandizarrClient
from tests.client.conftest import make_tree
from tests.client.test_upload_live import local_checksum


class Serve:
    def __init__(self, data_dir: Path, **env: str) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in {"DATABASE_URL"}},
            "DANDIZARR_DATA_DIR": str(data_dir),
            "DANDIZARR_PORT": str(self.port),
            "DANDIZARR_LOG_LEVEL": "WARNING",
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Serve:
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "dandizarr"), "serve"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self.url + "/api/info/", self.process, "dandizarr serve")
        return self

    @property
    def token(self) -> str:
        return (self.data_dir / "admin-token").read_text().strip()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(20)

    def api(self, method: str, path: str, **kwargs: object) -> requests.Response:
        headers = {"Authorization": f"Token {self.token}"}
        return requests.request(method, self.url + path, headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    server = Serve(tmp_path / "var", DANDIZARR_BATCH_LIMIT="9").start()
    yield server
    server.stop()


def test_upload_into_the_embedded_service_and_back(serve: Serve, tmp_path: Path) -> None:
    root = tmp_path / "e.zarr"
    files = make_tree(root, 60)
    with DandizarrClient(serve.url, serve.token, jobs=8) as client:
        dandiset = client.create_dandiset("embedded")["identifier"]
        result = client.upload(root, dandiset=dandiset)
        assert result.ok, result.to_json()
        assert (result.uploaded_files, result.batches) == (60, 7)
        assert result.server_checksum == local_checksum(root)
        downloaded = client.download(result.zarr_id, tmp_path / "copy")
    assert downloaded.ok and downloaded.local_checksum == result.server_checksum
    for path in files:
        assert (tmp_path / "copy" / path).read_bytes() == (root / path).read_bytes()
