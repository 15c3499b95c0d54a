"""The processes the client benchmarks run against: moto's S3 server and ``dandizarr serve``
(SQLite, tasks inline, S3 on that moto), each a separate process, stopped on the way out."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, process: subprocess.Popen[bytes], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}")
        try:
            requests.get(url, timeout=2)
            return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer at {url} within {timeout:.0f} s")


@dataclass
class Service:
    url: str
    token: str
    moto: str
    bucket: str


@contextmanager
def serve_process(data_dir: Path, **env: str) -> Iterator[tuple[str, str]]:
    """``dandizarr serve`` as a process on a free port, with its own data directory and no
    database or broker of the caller's; yields its URL and admin token, stopped on the way out.
    ``env`` adds settings (``DANDIZARR_STORAGE``, ``DANDIZARR_BATCH_LIMIT``, ...)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "dandizarr.cli", "serve"],
        env={
            **{
                key: value
                for key, value in os.environ.items()
                if key not in {"DATABASE_URL", "CELERY_BROKER_URL"}
            },
            "DANDIZARR_DATA_DIR": str(data_dir),
            "DANDIZARR_PORT": str(port),
            "DANDIZARR_LOG_LEVEL": "WARNING",
            **env,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(url + "/api/info/", process, "dandizarr serve")
        yield url, (data_dir / "admin-token").read_text().strip()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@contextmanager
def running_service(tmp_path: Path, bucket: str) -> Iterator[Service]:
    """moto's server and ``dandizarr serve`` (S3 on that moto, tasks inline) as processes."""
    import boto3

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    moto_port = free_port()
    moto = f"http://127.0.0.1:{moto_port}"
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(moto_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(moto, process, "moto_server")
        boto3.client("s3", endpoint_url=moto, region_name="us-east-1").create_bucket(Bucket=bucket)
        with serve_process(
            tmp_path / "service",
            DANDIZARR_STORAGE="s3",
            DANDIZARR_S3_ENDPOINT_URL=moto,
            DANDIZARR_S3_BUCKET=bucket,
        ) as (url, token):
            yield Service(url, token, moto, bucket)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
