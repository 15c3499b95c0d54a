"""The processes the client benchmarks run against: moto's S3 server and ``dandizarr serve``
(SQLite, tasks inline, S3 on that moto), each a separate process, stopped on the way out."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import free_port, serve_process, stop_process, wait_for


@dataclass
class Service:
    url: str
    token: str
    moto: str
    bucket: str


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
        stop_process(process)
