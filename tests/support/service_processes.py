"""The processes of the production shape (``tests.support.production``): one subprocess with its
log, a Redis server of its own, stopping many at once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import redis

from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


class Process:
    """One subprocess with its output appended to a log file; stopped or killed by its pid."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log = log
        self.cwd = cwd  # the checkout by default; an installed service's runs outside it
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv, cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind, as when a machine or container dies."""
        if self.running():
            assert self.popen is not None
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def stop(self, timeout: float = 10) -> None:
        if self.running():
            assert self.popen is not None
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def stop_all(
    processes: list[Process | None], timeout: float, meanwhile: list[threading.Thread]
) -> None:
    """SIGTERM to every process at once, ``meanwhile``'s threads started, then SIGKILL to
    those still running ``timeout`` seconds later (one after another, their shutdowns took the
    sum of theirs); returns once the threads are done too."""
    running = [p for p in processes if p is not None and p.running()]
    for process in running:
        assert process.popen is not None
        process.popen.terminate()
    for thread in meanwhile:
        thread.start()
    deadline = time.monotonic() + timeout
    try:
        for process in running:
            assert process.popen is not None
            try:
                process.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
    finally:
        for thread in meanwhile:
            thread.join()


class RedisServer(Process):
    """A Redis of its own on a fixed port: a restart after ``kill`` comes back empty."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        argv = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ]
        super().__init__("redis", argv, dict(os.environ), directory / "redis.log")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        super().start()
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=1).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline or not self.running():
                    raise
                time.sleep(0.05)


def child_pids(pid: int) -> list[int]:
    """The direct children of process ``pid`` (Linux)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split()]
