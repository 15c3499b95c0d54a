"""The client's view of a live service in tests: the service handle, the CLI as a user runs it,
local trees to upload and their checksums."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import requests

from dandizarr.checksums import compute_tree
from dandizarr.client import DandizarrClient, RetryPolicy

REPO = Path(__file__).resolve().parents[2]
# The installed entry point (``python -m dandizarr.cli`` would load dandizarr.cli twice).
CLI = [str(Path(sys.executable).parent / "dandizarr")]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Service:
    url: str
    token: str
    dandiset: str
    bucket: str
    moto: str  # the S3 endpoint: moto's, or SeaweedFS's
    state_dir: Path
    access_key: str = "testing"
    secret_key: str = "testing"

    def client(self, *, token: str | None = "", jobs: int = 8) -> DandizarrClient:
        return DandizarrClient(
            self.url,
            self.token if token == "" else token,
            jobs=jobs,
            retry=RetryPolicy(attempts=4, backoff=0.05),
        )

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Token {self.token}"}
        return requests.request(method, self.url + path, headers=headers, timeout=60, **kwargs)

    def archive(self, zarr_id: str) -> dict[str, Any]:
        response = self.api("GET", f"/api/zarr/{zarr_id}/")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def remote_files(self, zarr_id: str) -> dict[str, tuple[int, str]]:
        with self.client() as client:
            return {f.path: (f.size, f.digest) for f in client.iter_files(zarr_id)}

    def bucket_keys(self) -> list[str]:
        s3 = boto3.client(
            "s3",
            endpoint_url=self.moto,
            region_name="us-east-1",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )
        keys: list[str] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            keys += [item["Key"] for item in page.get("Contents", [])]
        return keys

    def cli_env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DANDIZARR_URL=self.url,
            DANDIZARR_TOKEN=self.token,
            DANDIZARR_STATE_DIR=str(self.state_dir),
            PYTHONPATH=os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
            ),
        )
        env.update(extra)
        return env

    def popen(self, *args: str, **extra_env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*CLI, *args],
            env=self.cli_env(**extra_env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            # As from a terminal: when the tests run as a background job, the shell has set
            # SIGINT to "ignore", which children inherit, and Python then never raises
            # KeyboardInterrupt (Ctrl-C would not reach the CLI as a user's would).
            preexec_fn=_default_sigint,
        )

    def cli(self, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args],
            env=self.cli_env(**extra_env),
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=240,
        )

    def cli_json(self, *args: str, **extra_env: str) -> tuple[int, dict[str, Any]]:
        done = self.cli(*args, "--json", **extra_env)
        assert done.stdout, f"no JSON on stdout; stderr:\n{done.stderr}"
        return done.returncode, json.loads(done.stdout)


def make_tree(root: Path, files: int, *, seed: int = 0, size: int = 64) -> dict[str, str]:
    """A zarr-like tree (metadata files plus chunks in nested directories); path -> md5."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    (root / ".zattrs").write_text(f'{{"seed": {seed}}}')
    (root / "zarr.json").write_text('{"zarr_format": 3}')
    for i in range(files - 2):
        path = f"0/c/{i // 10}/{i % 10}" if i % 3 else f"1/c/{i // 10}.{i % 10}"
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(rng.randbytes(rng.randint(0, size)))
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        made[path.relative_to(root).as_posix()] = hashlib.md5(path.read_bytes()).hexdigest()
    assert len(made) == files
    return made


def local_checksum(root: Path) -> str:
    """The tree checksum of a local directory, computed independently of the client."""
    entries = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            entries.append(
                (path.relative_to(root).as_posix(), len(data), hashlib.md5(data).hexdigest())
            )
    return compute_tree(entries).digest
