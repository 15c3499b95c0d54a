"""Running the real ``dandi`` CLI against a live service: where each release's venv is
(``make test`` builds them), the service as its user sees it, and the storage it runs on."""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from dandizarr_server.zarr_api.services.publishing import ensure_storage_versioning
from tests.support import seaweedfs as weed
from tests.support.live_users import user_with_dandiset

REPO = Path(__file__).resolve().parents[2]
DANDI_NEWEST = REPO / ".venv-dandi" / "bin"
# The xdist group of the tests whose service listens on 127.0.0.1:8000 (dandi 0.48.1's test
# instance): one worker runs them one after the other.
PORT_8000_GROUP = "port-8000"
DANDI_048 = REPO / ".venv-dandi-0.48" / "bin"


@dataclass
class DandiService:
    url: str
    token: str
    dandiset: str
    home: Path

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Token {self.token}"}
        return requests.request(method, self.url + path, headers=headers, timeout=60, **kwargs)

    def dandi(
        self, venv: Path, args: list[str], *, cwd: Path, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run ``dandi`` as a user would, with a fresh home (no keyring, no digest cache)."""
        executable = venv / "dandi"
        if not executable.exists():
            pytest.fail(f"{executable} is missing: run `make dandi-venvs` (make test does)")
        full_env = {
            "PATH": f"{venv}:{os.environ.get('PATH', '')}",
            "HOME": str(self.home),
            "DANDI_NO_ET": "1",
            "DANDI_CACHE": "ignore",
            "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
            **env,
        }
        done = subprocess.run(
            [str(executable), *args],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"dandi {args} failed:\n{done.stdout}\n{done.stderr}"
        return done

    def archive(self, zarr_id: str) -> dict[str, Any]:
        response = self.api("GET", f"/api/zarr/{zarr_id}/")
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    def assets(self) -> dict[str, dict[str, Any]]:
        response = self.api("GET", f"/api/dandisets/{self.dandiset}/versions/draft/assets/")
        assert response.status_code == 200, response.text
        return {a["path"]: a for a in response.json()["results"]}


def zarr_checksum_of(directory: Path) -> str:
    """The tree checksum of a local directory by the ``zarr_checksum`` package (dandi's)."""
    done = subprocess.run(
        [
            str(DANDI_NEWEST / "python"),
            "-c",
            "import sys; from zarr_checksum import compute_zarr_checksum;"
            "from zarr_checksum.generators import yield_files_local;"
            "print(compute_zarr_checksum(yield_files_local(sys.argv[1])).digest)",
            str(directory),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def tree_of(directory: Path) -> dict[str, str]:
    return {
        p.relative_to(directory).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def configure_storage(
    settings: Any, kind: str, url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings.PUBLIC_URL = url
    if kind == "local":
        settings.DANDIZARR_STORAGE = "local"
        settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "storage"
        return
    server = request.getfixturevalue("seaweedfs")
    settings.DANDIZARR_STORAGE = "s3"
    settings.DANDIZARR_S3_ENDPOINT_URL = server.endpoint_url
    settings.DANDIZARR_S3_PRESIGN_ENDPOINT_URL = None
    settings.DANDIZARR_S3_BUCKET = request.getfixturevalue("seaweedfs_bucket")
    settings.DANDIZARR_S3_ACCESS_KEY_ID = weed.ACCESS_KEY
    settings.DANDIZARR_S3_SECRET_ACCESS_KEY = weed.SECRET_KEY
    # As ``manage.py ensure_bucket`` sets a bucket up: keeping object versions (publishing).
    ensure_storage_versioning()


def make_service(url: str, tmp_path: Path) -> DandiService:
    token, dandiset = user_with_dandiset(url, "dandi-user", "dandi client tests")
    home = tmp_path / "home"
    home.mkdir()
    return DandiService(url, token, dandiset, home)


def api_key_env(service: DandiService) -> dict[str, str]:
    """The newest dandi names a URL instance by its API host:port and reads {NAME}_API_KEY."""
    netloc = urlsplit(service.url).netloc
    return {f"{netloc.upper()}_API_KEY": service.token, "DANDI_API_KEY": service.token}


def download_dandiset(service: DandiService, into: Path, *args: str) -> Path:
    """``dandi download`` of the draft (plus ``args``) into ``into``; the dandiset's directory."""
    url = f"{service.url}/api/dandisets/{service.dandiset}/versions/draft/"
    service.dandi(DANDI_NEWEST, ["download", *args, url, "-o", str(into)], cwd=into.parent)
    return into / service.dandiset


def upload_dandiset(service: DandiService, dandiset_dir: Path, *args: str) -> None:
    service.dandi(
        DANDI_NEWEST,
        ["upload", "-i", service.url, *args],
        cwd=dandiset_dir,
        **api_key_env(service),
    )
