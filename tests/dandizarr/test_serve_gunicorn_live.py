"""``dandizarr serve`` runs under gunicorn: no development-server warning, replies without a
Nagle stall, static files served, and Ctrl-C (SIGINT) stops it cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import requests

from tests.support.processes import Processes, free_port, wait_for


def test_serve_under_gunicorn_answers_quickly_and_stops_on_ctrl_c(
    processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    process = processes.start(
        [sys.executable, "-m", "dandizarr.cli", "serve"],
        env={**env, "DANDIZARR_DATA_DIR": str(tmp_path / "var"), "DANDIZARR_PORT": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(url + "/api/info/", process, "dandizarr serve")
        # Its latency (no 40 ms delayed-ACK stall per reply) is measured by python -m bench pages.
        assert requests.get(url + "/api/info/", timeout=5).status_code == 200
        for path in ["/", "/static/dandizarr/style.css", "/static/admin/css/base.css"]:
            assert requests.get(url + path, timeout=5).status_code == 200, path
        docs = requests.get(url + "/api/docs/", timeout=5).text
        assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in docs
        assert "cdn" not in docs.lower() and "https://" not in docs
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err.decode()
    text = (out + err).decode()
    assert f"dandizarr is starting at {url}/" in text
    assert "Starting gunicorn" in text and "Shutting down" in text
    assert "development server" not in text.lower() and "Traceback" not in text
