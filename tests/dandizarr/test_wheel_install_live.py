"""The service installed as production installs it (issue #38): the wheel built from the
sources the Dockerfile copies, installed by pip into a fresh venv that holds only what it
declares for the ``server,storage`` extras (linked from the suite's venv:
``tests.support.linked_venv``), and run from a directory outside the checkout, with ``dandizarr
serve`` and with the production gunicorn command (DEBUG off, PostgreSQL, SeaweedFS). The
installed client uploads a Zarr, and every page, its static files, the API docs, the admin's
login and Neuroglancer answer.

The editable ``.venv`` every other test runs from reads templates and static files from the
checkout; a wheel without them served its pages 500 and their CSS 404."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import requests

import dandizarr
from tests.support.page_walk import walk_pages
from tests.support.processes import Processes, free_port, wait_for
from tests.support.production import production_settings
from tests.support.seaweedfs import SeaweedS3
from tests.support.systemd_units import exec_start, with_option
from tests.support.wheel_install import ROOT, Installed, run

# One test, one install (made once per version of the sources and of the suite's venv, shared
# with the compose test): a module-scoped venv would be made again by each xdist worker.

# A small Zarr v3 array, written by the zarr-python the server extra installs.
MAKE_ZARR = (
    "import sys, numpy, zarr; "
    "a = zarr.create_array(sys.argv[1], shape=(64, 64), chunks=(16, 16), dtype='uint16'); "
    "a[:] = numpy.arange(64 * 64, dtype='uint16').reshape(64, 64)"
)


@pytest.mark.timeout(900)
def test_the_installed_wheel_serves_everything(
    tmp_path: Path,
    processes: Processes,
    server_install: Installed,
    service_database: str,
    seaweedfs: SeaweedS3,
    seaweedfs_bucket: str,
) -> None:
    installed = server_install
    check_installed_packages(installed, outside(tmp_path / "a"))
    serve_and_walk(installed, outside(tmp_path / "b"), processes)
    gunicorn_and_walk(
        installed, outside(tmp_path / "c"), processes, service_database, seaweedfs, seaweedfs_bucket
    )


def outside(directory: Path) -> Path:
    """A working directory outside the checkout."""
    directory.mkdir(parents=True)
    assert not directory.resolve().is_relative_to(ROOT)
    return directory


def check_installed_packages(installed: Installed, outside: Path) -> None:
    """What runs is the wheel's install, not the checkout."""
    code = "import dandizarr as c, dandizarr_server as s; print(c.__file__, s.__file__)"
    paths = run(installed, "python", "-c", code, cwd=outside).stdout.split()
    for path in paths:
        assert Path(path).is_relative_to(installed.venv), path


def serve_and_walk(installed: Installed, outside: Path, processes: Processes) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # No DANDIZARR_DATA_DIR: an installed service keeps its data in ./var, never site-packages.
    process = processes.start(
        [str(installed.bin / "dandizarr"), "serve", "--port", str(port)],
        cwd=outside,
        env=installed.env(DANDIZARR_LOG_LEVEL="WARNING"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(url + "/api/info/", process, "dandizarr serve")
    token = (outside / "var" / "admin-token").read_text().strip()
    upload_and_walk(installed, outside, url, token)
    processes.stop_all()
    assert not list(installed.venv.rglob("db.sqlite3"))


def gunicorn_and_walk(
    installed: Installed,
    outside: Path,
    processes: Processes,
    service_database: str,
    seaweedfs: SeaweedS3,
    seaweedfs_bucket: str,
) -> None:
    """docker-compose.yml's web service and the systemd unit's: migrate, bootstrap_admin,
    gunicorn (DEBUG off)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = {
        "DJANGO_SETTINGS_MODULE": "dandizarr_server.settings",
        **production_settings(
            url=url,
            database_url=service_database,
            data_dir=str(outside / "data"),
            s3=seaweedfs,
            bucket=seaweedfs_bucket,
        ),
    }
    # What docker-compose.yml's web runs, with django-admin for the image's manage.py.
    run(installed, "django-admin", "migrate", "--noinput", cwd=outside, **settings)
    run(installed, "django-admin", "bootstrap_admin", cwd=outside, **settings)
    # The command of the web service's systemd unit (deploy/systemd/), on a port of its own.
    gunicorn = with_option(exec_start("dandizarr-web.service"), "--bind", f"127.0.0.1:{port}")
    gunicorn = with_option(gunicorn, "--workers", "2")
    log = outside / "gunicorn.log"
    with open(log, "wb") as output:
        process = processes.start(
            [str(installed.bin / gunicorn[0]), *gunicorn[1:]],
            cwd=outside,
            env=installed.env(**settings),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    wait_for(url + "/api/info/", process, "gunicorn")
    token = (outside / "data" / "admin-token").read_text().strip()
    upload_and_walk(installed, outside, url, token)
    processes.stop_all()
    assert "Traceback" not in log.read_text(errors="replace"), log.read_text(errors="replace")


def upload_and_walk(installed: Installed, cwd: Path, url: str, token: str) -> None:
    """Upload a Zarr with the installed client, then get every page and what it loads."""
    answer = requests.post(
        url + "/api/dandisets/",
        json={"name": "wheel"},
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    dandiset = answer.json()["identifier"]
    run(installed, "python", "-c", MAKE_ZARR, "image.zarr", cwd=cwd)
    upload = run(
        installed,
        *("dandizarr", "upload", "image.zarr", "--dandiset", dandiset),
        *("--server", url, "--token", token, "--json", "--no-progress"),
        cwd=cwd,
    )
    result = json.loads(upload.stdout)
    assert result["ok"], result
    zarr_id = result["zarr_id"]

    walk_pages(url, zarr_id, "image.zarr")
    # The client it serves (the home page's install command), built from the installed files.
    wheel = requests.get(
        f"{url}/client/dandizarr-{dandizarr.__version__}-py3-none-any.whl", timeout=60
    )
    assert wheel.status_code == 200 and wheel.content.startswith(b"PK"), wheel.status_code
