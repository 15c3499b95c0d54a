"""Processes the tests and benchmarks start: ``dandizarr serve`` on a free port, waiting for a
server to answer, and ``Processes``, what the ``processes`` fixture hands a test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

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
        # Not up yet, or up and still busy with its first request (a loaded machine answers
        # a new process's first request late): ask again until the deadline.
        except (requests.ConnectionError, requests.Timeout):
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer at {url} within {timeout:.0f} s")


@contextmanager
def serve_process(data_dir: Path, **env: str) -> Iterator[tuple[str, str]]:
    """``dandizarr serve`` as a process on a free port, with its own data directory and no
    database or broker of the caller's; yields its URL and admin token, stopped on the way out.
    ``env`` adds settings (``DANDIZARR_STORAGE``, ``DANDIZARR_BATCH_LIMIT``, ...)."""
    with _serve(data_dir, None, {"DANDIZARR_LOG_LEVEL": "WARNING", **env}) as (url, _):
        yield url, (data_dir / "admin-token").read_text().strip()


@contextmanager
def serve_logged(data_dir: Path, log: Path, **env: str) -> Iterator[tuple[str, int]]:
    """``dandizarr serve`` as ``make serve`` starts it (console logs at INFO, unless ``env``
    says otherwise), its output appended to ``log``; yields its URL and pid. Its admin token is
    in ``data_dir / "admin-token"``."""
    with _serve(data_dir, log, env) as served:
        yield served


@contextmanager
def _serve(data_dir: Path, log: Path | None, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    inherited = {
        key: value
        for key, value in os.environ.items()
        # serve keeps its own secret key in its data directory, and logs as `make serve` does
        if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "DANDIZARR_SECRET_KEY"}
        and not key.startswith("DANDIZARR_LOG")
    }
    with open(log if log is not None else os.devnull, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dandizarr.cli", "serve"],
            env={
                **inherited,
                "DANDIZARR_DATA_DIR": str(data_dir),
                "DANDIZARR_PORT": str(port),
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(url + "/api/info/", process, "dandizarr serve")
        yield url, process.pid
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Ask a server process to stop (SIGTERM), and kill it if it has not within 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


# The environment of the Celery processes tests start (workers and beat): without Django's
# system checks, which Celery's Django fix-up runs at each start (about 1 CPU-s: every URL module
# imported; a fault test restarts its workers every few seconds). `make lint` runs the checks
# (makemigrations --check), and no code of the service runs in them. Production keeps them.
CELERY_TEST_ENV = {"CELERY_SKIP_CHECKS": "1"}


def celery_worker_command(*extra: str, loglevel: str = "INFO") -> list[str]:
    """A Celery worker of the project, one task at a time (``--pool=solo``), without the
    cluster chatter (heartbeats, gossip, mingle) that only slows a test's start."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "dandizarr_server.celery",
        "worker",
        "--pool=solo",
        f"--loglevel={loglevel}",
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
        *extra,
    ]


def accepted_connections(url: str) -> int:
    """The established TCP connections to ``url``'s port that a process has accepted (``ss``
    names their owner; those still in the listen backlog have none)."""
    port = url.rsplit(":", 1)[1]
    out = subprocess.run(
        ["ss", "-Htnp", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum("pid=" in line for line in out.splitlines())


def listening(port: int) -> str:
    """What ``ss`` lists listening on ``port``, a line each with its process where ``ss`` may
    see it; empty when nothing listens (or ``ss`` is missing)."""
    try:
        listed = subprocess.run(
            ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        return ""
    return listed.stdout.strip()


class Processes:
    """What a test starts (the ``processes`` fixture of tests/conftest.py hands one out, and a
    test that asks for it is ``live``): programs run to their end, programs left running
    (stopped when the test ends), ``dandizarr serve``, Celery workers."""

    def __init__(self) -> None:
        self._running: list[subprocess.Popen[Any]] = []

    def run(self, args: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(args, **kwargs)

    def start(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        process = subprocess.Popen(args, **kwargs)
        self._running.append(process)
        return process

    def serve(self, data_dir: Path, **env: str) -> AbstractContextManager[tuple[str, str]]:
        """``dandizarr serve`` (``serve_process``): its URL and admin token."""
        return serve_process(data_dir, **env)

    def stop_all(self) -> None:
        for process in self._running:
            if process.poll() is None:
                stop_process(process)
