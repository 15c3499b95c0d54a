"""No code path signs with a constant (issue #16, finding 1).

``dandizarr serve`` creates a random key on first start and keeps it (0600) in its data
directory; gunicorn (``dandizarr_server.wsgi``) and Celery refuse to start without
``DANDIZARR_SECRET_KEY``; anything else gets a key of its own process. Before this, every
``make serve`` signed its storage URLs with one public default key: anyone who could reach the
port could forge a PUT URL and overwrite any file.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from dandizarr.objectstore.local import LocalObjectStore
from tests.support.api import put
from tests.support.processes import Processes

REPO = Path(__file__).resolve().parents[2]
# The key every `make serve` used to sign with (the settings' old default).
PUBLIC_DEFAULT_KEY = "insecure-dev-key-set-DANDIZARR_SECRET_KEY-in-production"


def forged_put_url(url: str, key: str, body: bytes, secret: str) -> str:
    forger = LocalObjectStore("/nonexistent", public_url=url, secret_key=secret)
    return forger.presigned_put_url(key, hashlib.md5(body).hexdigest(), expires_in=600)


def test_serve_keeps_a_random_key_of_its_own(processes: Processes, tmp_path: Path) -> None:
    data = tmp_path / "var"
    with processes.serve(data) as (url, _token):
        key_file = data / "secret-key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        assert len(key) >= 50 and key != PUBLIC_DEFAULT_KEY
        # Nobody can sign for it with the key everybody knew.
        forged = forged_put_url(url, "zarr/x/.zattrs", b"forged", PUBLIC_DEFAULT_KEY)
        response = put(forged, b"forged")
        assert response.status_code == 403, response.text
        assert "SignatureDoesNotMatch" in response.text
        # Only the hosts it serves are accepted (not "*").
        other_host = requests.get(url + "/api/info/", headers={"Host": "evil.example"}, timeout=10)
        assert other_host.status_code == 400
        assert requests.get(url + "/api/info/", timeout=10).status_code == 200
    with processes.serve(data) as (url, _token):
        assert (data / "secret-key").read_text().strip() == key  # kept across restarts
        # A URL signed with its key passes the signature check (the key is what signs); the
        # endpoint then refuses it only because no open batch expects that key.
        response = put(forged_put_url(url, "zarr/x/.zattrs", b"ok", key), b"ok")
        assert response.status_code == 403, response.text
        assert "SignatureDoesNotMatch" not in response.text
        assert "no open upload batch expects" in response.text


def _run(processes: Processes, code: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "DANDIZARR_SECRET_KEY"}
    environment.pop("CELERY_BROKER_URL", None)
    return processes.run(
        code,
        env={**environment, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-c", "import dandizarr_server.wsgi"],
        [sys.executable, "-m", "celery", "-A", "dandizarr_server.celery", "worker", "--pool=solo"],
        # Beat's schedule file goes in the test's directory: given /dev/null, beat's shelve
        # replaced the device with a file of its own.
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "dandizarr_server.celery",
            "beat",
            "-s",
            "{tmp}/beat",
        ],
    ],
    ids=["gunicorn-wsgi", "celery-worker", "celery-beat"],
)
def test_production_processes_refuse_to_start_without_a_key(
    processes: Processes, command: list[str], tmp_path: Path
) -> None:
    result = _run(processes, [part.format(tmp=tmp_path) for part in command])
    assert Path("/dev/null").is_char_device()
    assert result.returncode != 0, result.stdout + result.stderr
    assert "refuses to start: DANDIZARR_SECRET_KEY is not set" in result.stderr, result.stderr


def test_the_web_service_starts_with_a_key(processes: Processes) -> None:
    result = _run(
        processes,
        [sys.executable, "-c", "import dandizarr_server.wsgi"],
        DANDIZARR_SECRET_KEY="k" * 50,
    )
    assert result.returncode == 0, result.stderr


def test_any_other_process_signs_with_a_key_of_its_own(processes: Processes) -> None:
    script = "import dandizarr_server.settings as s; print(s.SECRET_KEY, s.SECRET_KEY_SOURCE)"
    first, second = (_run(processes, [sys.executable, "-c", script]) for _ in range(2))
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout != second.stdout
    assert PUBLIC_DEFAULT_KEY not in first.stdout
    assert first.stdout.split()[1:] == ["this", "process"]
