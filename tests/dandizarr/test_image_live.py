"""The service's image, built from the Dockerfile, run for real (issue #38): its web command
(migrate, bootstrap_admin, ensure_bucket, gunicorn) and a Celery worker, as docker-compose.yml
runs them, against a PostgreSQL database, a Redis and a SeaweedFS bucket of this test's; then
/readyz, the pages with their static files, and an upload whose checksum the worker applies.

``make image-test`` builds the image (deploy/image-test.sh) and runs this test with
DANDIZARR_TEST_IMAGE naming it; without it the test skips."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from dandizarr.client import DandizarrClient
from tests.support.live_client import local_checksum, make_tree
from tests.support.page_walk import walk_pages
from tests.support.processes import Processes, free_port
from tests.support.production import RedisServer, production_settings
from tests.support.seaweedfs import SeaweedS3

IMAGE = os.environ.get("DANDIZARR_TEST_IMAGE", "")
pytestmark = pytest.mark.skipif(
    not IMAGE, reason="make image-test builds the image and names it in DANDIZARR_TEST_IMAGE"
)


@pytest.fixture
def redis_server(tmp_path: Path, processes: Processes) -> Iterator[str]:
    """A Redis of this test's: the image's Celery worker takes no other test's tasks."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server.url
    server.stop()


def docker(processes: Processes, *args: str) -> str:
    done = processes.run(["docker", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"docker {' '.join(args[:3])}: {done.stderr}"
    return done.stdout


@pytest.mark.timeout(600)
def test_the_image_serves_pages_and_uploads(
    tmp_path: Path,
    processes: Processes,
    service_database: str,
    redis_server: str,
    seaweedfs: SeaweedS3,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o777)  # the image's unprivileged user writes the admin's token here
    settings = {
        **production_settings(
            url=url,
            database_url=service_database,
            data_dir="/data",
            s3=seaweedfs,
            bucket=f"image-{uuid.uuid4().hex[:12]}",
        ),
        "CELERY_BROKER_URL": redis_server,
    }
    environment = [arg for key, value in settings.items() for arg in ("-e", f"{key}={value}")]
    names = [f"dandizarr-image-test-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("web", "worker")]
    # docker-compose.yml's web and worker commands (the host's network: the services here
    # listen on loopback).
    web = (
        "python manage.py migrate --noinput && python manage.py bootstrap_admin"
        " && python manage.py ensure_bucket --wait 60"
        " && exec gunicorn dandizarr_server.wsgi -c python:dandizarr_server.gunicorn_config"
        f" --bind 127.0.0.1:{port} --workers 2 --timeout 60"
    )
    worker = "exec celery -A dandizarr_server.celery worker --loglevel WARNING --concurrency 1"
    try:
        docker(
            processes,
            "run",
            "-d",
            "--name",
            names[0],
            "--network",
            "host",
            "-v",
            f"{data}:/data",
            *environment,
            IMAGE,
            "/bin/sh",
            "-c",
            web,
        )
        ready = wait_ready(url, processes, names[0])
        docker(
            processes,
            "run",
            "-d",
            "--name",
            names[1],
            "--network",
            "host",
            *environment,
            IMAGE,
            "/bin/sh",
            "-c",
            worker,
        )
        assert ready.status_code == 200, ready.text
        token = (data / "admin-token").read_text().strip()
        root = tmp_path / "image.zarr"
        make_tree(root, 30)
        with DandizarrClient(url, token, jobs=8) as client:
            dandiset = client.create_dandiset("image")["identifier"]
            result = client.upload(root, dandiset=dandiset)
        assert result.ok, result.to_json()
        assert result.server_checksum == local_checksum(root)
        walk_pages(url, result.zarr_id, "image.zarr")
    finally:
        for name in names:
            logs = processes.run(["docker", "logs", name], capture_output=True, text=True)
            print(f"--- {name}\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}")
            processes.run(["docker", "rm", "-f", name], capture_output=True)


def wait_ready(
    url: str, processes: Processes, name: str, timeout: float = 240
) -> requests.Response:
    """/readyz once it answers (migrations first); fails at once if the container stopped."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = requests.get(url + "/readyz", timeout=5)
            if answer.status_code == 200:
                return answer
        except requests.RequestException:
            pass
        state = docker(processes, "inspect", "-f", "{{.State.Running}}", name).strip()
        assert state == "true", f"container {name} stopped"
        assert time.monotonic() < deadline, f"{url}/readyz did not answer in {timeout:.0f} s"
        time.sleep(1)
