"""The production shape as processes on this machine, for tests that break it on purpose.

A dedicated PostgreSQL database (created and migrated here), a Redis server of its own on its
own port (``--save "" --appendonly no``: a restart comes back empty), gunicorn with several
workers, Celery workers (``--pool=solo``: SIGKILL kills the whole worker) and Celery beat, all
on one SeaweedFS (``tests.support.seaweedfs``). Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
import requests
from psycopg import sql

from tests.support.processes import celery_worker_command, free_port
from tests.support.seaweedfs import ACCESS_KEY, REGION, SECRET_KEY, SeaweedS3

ROOT = Path(__file__).resolve().parents[2]


def tools_missing() -> list[str]:
    """Programs these tests need that this machine lacks."""
    return [name for name in ("redis-server",) if shutil.which(name) is None]


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


def production_settings(
    *, url: str, database_url: str, data_dir: str, s3: SeaweedS3, bucket: str
) -> dict[str, str]:
    """What docker-compose.yml's web service is given (DEBUG off, PostgreSQL, S3 on SeaweedFS)
    for a service at ``url`` on this machine: the image's, the installed wheel's and
    ``Production``'s."""
    return {
        "DANDIZARR_SECRET_KEY": "production-test-" + "k" * 40,
        "DANDIZARR_DEBUG": "false",
        "DANDIZARR_ALLOWED_HOSTS": "127.0.0.1",
        "DANDIZARR_PUBLIC_URL": url,
        "DANDIZARR_DATA_DIR": data_dir,
        "DANDIZARR_LOG_LEVEL": "WARNING",
        "DATABASE_URL": database_url,
        "DANDIZARR_STORAGE": "s3",
        "DANDIZARR_S3_ENDPOINT_URL": s3.endpoint_url,
        "DANDIZARR_S3_BUCKET": bucket,
        "DANDIZARR_S3_REGION": REGION,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }


def database_url_named(database_url: str, name: str) -> str:
    """``database_url`` with its database name replaced by ``name``."""
    base, _, _ = database_url.rpartition("/")
    return f"{base}/{name}"


def create_database(server_url: str, name: str) -> str:
    """A new empty database on the server ``server_url`` points at; returns its URL."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_url_named(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def terminate_connections(server_url: str, name: str) -> int:
    """Cut every connection to database ``name`` (the service's); returns how many."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return len(rows)


def child_pids(pid: int) -> list[int]:
    """The direct children of process ``pid`` (Linux)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split()]


@dataclass
class Production:
    """gunicorn (``web_workers``), ``celery_workers`` Celery workers and beat, on a database,
    Redis and SeaweedFS bucket of their own. ``env`` adds settings."""

    directory: Path
    server_database_url: str
    s3: SeaweedS3
    bucket: str
    web_workers: int = 3
    celery_workers: int = 2
    extra_env: dict[str, str] = field(default_factory=dict)
    # How long gunicorn may take to answer at the start (a benchmark on a busy machine waits
    # longer than a test).
    start_timeout: float = 60

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.database_name = f"dandizarr_faults_{os.getpid()}_{time.monotonic_ns() % 10**6}"
        self.redis = RedisServer(self.directory / "redis")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        self.web: Process | None = None
        self.more_web: list[Process] = []  # another_web_server()
        self.workers: list[Process] = []
        self.beat: Process | None = None

    @property
    def env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DANDIZARR_", "CELERY_"))},
            "DJANGO_SETTINGS_MODULE": "dandizarr_server.settings",
            "CELERY_BROKER_URL": self.redis.url,
            **production_settings(
                url=self.url,
                database_url=database_url_named(self.server_database_url, self.database_name),
                data_dir=str(self.directory / "data"),
                s3=self.s3,
                bucket=self.bucket,
            ),
            **self.extra_env,
        }

    def manage(self, *args: str, timeout: float = 120) -> str:
        """``manage.py args`` against this deployment; its standard output."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def _log(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def _prepare_database(self) -> None:
        """Create and migrate the database and make the admin token, in one Django process."""
        create_database(self.server_database_url, self.database_name)
        script = (
            "import django; django.setup(); from django.core.management import call_command; "
            "call_command('migrate', interactive=False, verbosity=0); "
            "call_command('bootstrap_admin')"
        )
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"migrate failed:\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        # The database is migrated while the S3 server and Redis start.
        failures: list[BaseException] = []

        def prepare() -> None:
            try:
                self._prepare_database()
            except BaseException as error:
                failures.append(error)

        database = threading.Thread(target=prepare)
        database.start()
        try:
            if self.s3.process is None or self.s3.process.poll() is not None:
                self.s3.start()
            self.s3.create_bucket(self.bucket)
            self.redis.start()
        finally:
            database.join()
        if failures:
            raise failures[0]
        self.token = (self.directory / "data" / "admin-token").read_text().strip()
        self.web = self._gunicorn("gunicorn", self.port, self.web_workers)
        self.web.start()
        for number in range(self.celery_workers):
            worker = Process(
                f"worker{number}",
                celery_worker_command("-n", f"faults{number}@%h", loglevel="WARNING"),
                self.env,
                self._log(f"worker{number}"),
            )
            worker.start()
            self.workers.append(worker)
        self.beat = Process(
            "beat",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "dandizarr_server.celery",
                "beat",
                "--loglevel=WARNING",
                "--schedule",
                str(self.directory / "beat-schedule"),
            ],
            self.env,
            self._log("beat"),
        )
        self.beat.start()
        self.wait_for_web(self.start_timeout)

    def _gunicorn(self, name: str, port: int, workers: int) -> Process:
        argv = [
            sys.executable,
            "-m",
            "gunicorn",
            "dandizarr_server.wsgi",
            "-c",
            "python:dandizarr_server.gunicorn_config",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--timeout",
            "60",
            "--graceful-timeout",
            "5",
        ]
        return Process(name, argv, self.env, self._log(name))

    def another_web_server(self) -> str:
        """One more gunicorn, of one worker, on a port of its own (the same database, broker
        and storage): its URL. A test sends requests to each web process by its URL."""
        port = free_port()
        web = self._gunicorn(f"gunicorn{len(self.more_web) + 2}", port, 1)
        web.start()
        self.more_web.append(web)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if not web.running():
                raise RuntimeError(f"gunicorn exited; see {web.log}")
            with suppress(requests.RequestException):
                if requests.get(url + "/api/info/", timeout=5).status_code == 200:
                    return url
            if time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn at {url} did not answer within 60 s")
            time.sleep(0.1)

    def wait_for_web(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        assert self.web is not None
        while True:
            if not self.web.running():
                raise RuntimeError(f"gunicorn exited; see {self._log('gunicorn')}")
            with suppress(requests.RequestException):
                answer = requests.get(self.url + "/api/info/", timeout=5)
                if answer.status_code == 200 and len(self.web_worker_pids()) == self.web_workers:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not answer within {timeout:.0f} s")
            time.sleep(0.1)

    def web_worker_pids(self) -> list[int]:
        assert self.web is not None
        return child_pids(self.web.pid)

    def stop(self) -> None:
        for process in [self.beat, *self.workers, self.web, *self.more_web]:
            if process is not None:
                process.stop(timeout=3)
        self.redis.stop()
        with suppress(psycopg.Error):
            drop_database(self.server_database_url, self.database_name)

    def logs_tail(self, lines: int = 40) -> str:
        """The last lines of every process's log, for a failure message."""
        parts = []
        for log in sorted(self.directory.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)


@contextmanager
def production(
    directory: Path,
    server_database_url: str,
    s3: SeaweedS3,
    bucket: str,
    *,
    web_workers: int = 3,
    celery_workers: int = 2,
    start_timeout: float = 60,
    **env: str,
) -> Iterator[Production]:
    deployment = Production(
        directory,
        server_database_url,
        s3,
        bucket,
        web_workers=web_workers,
        celery_workers=celery_workers,
        extra_env=env,
        start_timeout=start_timeout,
    )
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()
