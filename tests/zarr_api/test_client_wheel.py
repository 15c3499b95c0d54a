"""``GET /client/<wheel>``: the wheel of the server's own client files, with the installed
distribution's metadata (issue #38); any other name is a 404 that names the right one. The
client alone (issue #47: it had shipped the server's source), built once however many ask at
once, in threads or processes (it had been built once per concurrent request), and limited per
address (429)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import threading
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

import dandizarr
from dandizarr_server import client_wheel
from dandizarr_server.client_wheel import wheel_name
from dandizarr_server.zarr_api.pages.client import CACHE_DIRECTORY
from tests.support.processes import Processes
from tests.support.single_flight import Gate, flock_waiters, wait_until


def test_the_served_wheel_is_a_valid_wheel(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    answer = Client().get(f"/client/{wheel_name()}")
    assert answer.status_code == 200
    assert wheel_name() in answer["Content-Disposition"]
    body = b"".join(answer.streaming_content)
    with zipfile.ZipFile(BytesIO(body)) as wheel:
        dist_info = f"dandizarr-{dandizarr.__version__}.dist-info"
        metadata = wheel.read(f"{dist_info}/METADATA").decode()
        assert "Name: dandizarr" in metadata
        assert f"Version: {dandizarr.__version__}" in metadata
        assert (
            "dandizarr = dandizarr.cli:main" in wheel.read(f"{dist_info}/entry_points.txt").decode()
        )
        record = wheel.read(f"{dist_info}/RECORD").decode().splitlines()
        names = set(wheel.namelist())
        # RECORD lists every file with its hash, as pip checks it.
        listed = {}
        for line in record:
            name, digest, _size = line.rsplit(",", 2)
            listed[name] = digest
        assert set(listed) == names
        for name, digest in listed.items():
            if digest:
                data = wheel.read(name)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                assert digest == f"sha256={expected.decode()}", name
    assert "dandizarr/cli.py" in names
    assert list(tmp_path.glob(f"client/*/{wheel_name()}"))


def test_the_wheel_holds_the_client_alone(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    answer = Client().get(f"/client/{wheel_name()}")
    assert answer.status_code == 200
    with zipfile.ZipFile(BytesIO(b"".join(answer.streaming_content))) as wheel:
        names = wheel.namelist()
        dist_info = f"dandizarr-{dandizarr.__version__}.dist-info"
        metadata = wheel.read(f"{dist_info}/METADATA").decode()
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
        top_level = wheel.read(f"{dist_info}/top_level.txt").decode()
    assert [name for name in names if name.startswith("dandizarr_server/")] == []
    assert {name.split("/")[0] for name in names} == {"dandizarr", dist_info}
    assert top_level.split() == ["dandizarr"]
    # Nothing that needs the server: its extra (and the test extra that pulls it), its command.
    headers = metadata.partition("\n\n")[0]
    assert "Provides-Extra: server" not in headers and 'extra == "server"' not in headers
    assert "Provides-Extra: test" not in headers
    assert "Provides-Extra: zarr" in headers and "Requires-Dist: requests" in headers
    assert "dandizarr_server" not in entry_points
    assert "dandizarr = dandizarr.cli:main" in entry_points


def test_downloads_are_limited_per_address(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {
            **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"],
            "client_downloads": "3/min",
        },
    }
    url = f"/client/{wheel_name()}"
    burst = Client(REMOTE_ADDR="192.0.2.60")
    assert [burst.get(url).status_code for _ in range(3)] == [200, 200, 200]
    limited = burst.get(url)
    assert limited.status_code == 429
    assert int(limited["Retry-After"]) >= 1
    assert set(limited.json()) == {"detail", "code"} and limited.json()["code"] == "throttled"
    assert "client" in limited.json()["detail"]
    assert Client(REMOTE_ADDR="192.0.2.61").get(url).status_code == 200  # another address


CALLERS = 8


def test_concurrent_first_requests_build_once(
    db: None, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request is held where it either builds or waits; the build goes on only once all
    CALLERS are accounted for: without single flight, CALLERS builds every run."""
    settings.DATA_DIR = tmp_path / "data"
    cache = settings.DATA_DIR / CACHE_DIRECTORY
    gate = Gate(tmp_path / "gate")
    monkeypatch.setattr(client_wheel, "_write_wheel", gate.hold(client_wheel._write_wheel))
    bodies: list[bytes] = []

    def download() -> None:
        answer = Client().get(f"/client/{wheel_name()}")
        assert answer.status_code == 200
        bodies.append(b"".join(answer.streaming_content))

    threads = [threading.Thread(target=download) for _ in range(CALLERS)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: gate.entered() + flock_waiters(cache), CALLERS)
    finally:
        gate.release()
        for thread in threads:
            thread.join(60)
    assert gate.entered() == 1, f"{gate.entered()} builds for {CALLERS} concurrent requests"
    assert len(bodies) == CALLERS and len(set(bodies)) == 1
    assert [p.name for p in cache.glob("*/*") if p.suffix == ".whl"] == [wheel_name()]


def test_concurrent_processes_build_once(tmp_path: Path, processes: Processes) -> None:
    """As above across processes (gunicorn's workers share the data directory)."""
    cache = tmp_path / "client"
    gate = Gate(tmp_path / "gate")
    program = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dandizarr_server import client_wheel\n"
        "from tests.support.single_flight import held\n"
        "counter, release, cache = map(Path, sys.argv[1:])\n"
        "client_wheel._write_wheel = held(client_wheel._write_wheel, counter, release)\n"
        "print(client_wheel.client_wheel(cache))\n"
    )
    arguments = [str(gate.counter), str(gate.release_file), str(cache)]
    workers = [
        processes.start(
            [sys.executable, "-c", program, *arguments],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parents[2],
        )
        for _ in range(3)
    ]
    try:
        wait_until(lambda: gate.entered() + flock_waiters(cache), len(workers))
    finally:
        gate.release()
        outputs = [worker.communicate(timeout=60)[0].strip() for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * len(workers)
    assert gate.entered() == 1, f"{gate.entered()} builds for {len(workers)} processes"
    assert len(set(outputs)) == 1 and zipfile.ZipFile(outputs[0]).testzip() is None


def test_another_name_is_a_404_naming_the_wheel(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    answer = Client().get("/client/dandizarr-0.0.1-py3-none-any.whl")
    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"
    assert wheel_name() in answer.json()["detail"]
    assert not (tmp_path / "client").exists()


def test_the_home_page_gives_the_install_command(db: None) -> None:
    page = Client().get("/").content.decode()
    assert f"pip install http://testserver/client/{wheel_name()}" in page
