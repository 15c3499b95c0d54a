"""The production shape as processes on this machine, for tests that break it on purpose.

A dedicated PostgreSQL database (a copy of a migrated template: ``migrated_database``), a Redis
server of its own on its own port (``--save "" --appendonly no``: a restart comes back empty),
gunicorn with several workers, Celery workers (``--pool=solo``: SIGKILL kills the whole worker)
and Celery beat, all on one SeaweedFS (``tests.support.seaweedfs``). Everything listens on
127.0.0.1 only, and starts at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import requests
from psycopg import sql

from tests.support.migrated_database import create_migrated_database
from tests.support.processes import CELERY_TEST_ENV, celery_worker_command, free_port
from tests.support.seaweedfs import ACCESS_KEY, REGION, SECRET_KEY, SeaweedS3
from tests.support.service_processes import Process, RedisServer, child_pids, stop_all

ROOT = Path(__file__).resolve().parents[2]


def tools_missing() -> list[str]:
    """Programs these tests need that this machine lacks."""
    return [name for name in ("redis-server",) if shutil.which(name) is None]


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
    # Management commands run once the bucket exists, before the service answers (each a
    # call_command's arguments): in the one Django process that makes the admin token.
    commands: list[list[str]] = field(default_factory=list)
    # More gunicorn processes, of one worker each, on ports of their own (the same database,
    # broker and storage; ``more_web_urls``): a test sends requests to each web process by its
    # URL.
    other_web_servers: int = 0
    # How long gunicorn may take to answer at the start (a benchmark on a busy machine waits
    # longer than a test).
    start_timeout: float = 60
    # The reads' own gunicorn pool (docker-compose.yml's ``reads``; the caching proxy sends it
    # /zarr/, manifests and listings) of this many workers at ``reads_url``; 0: none.
    read_web_workers: int = 0
    # Every gunicorn logs each request to its log (``--access-logfile -``).
    access_log: bool = False

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.database_name = f"dandizarr_faults_{os.getpid()}_{time.monotonic_ns() % 10**6}"
        self.redis = RedisServer(self.directory / "redis")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        self.web: Process | None = None
        # other_web_servers: gunicorn processes of one worker, each on a port of its own.
        self.more_web: list[Process] = []
        self.more_web_urls: list[str] = []
        self.reads: Process | None = None
        self.reads_url = ""
        self.workers: list[Process] = []
        self.beat: Process | None = None
        self.started_s3 = False
        self.waiting: list[subprocess.Popen[str]] = []  # manage_later()

    @property
    def env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DANDIZARR_", "CELERY_"))},
            "DJANGO_SETTINGS_MODULE": "dandizarr_server.settings",
            "CELERY_BROKER_URL": self.redis.url,
            **CELERY_TEST_ENV,
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

    def manage_later(self, *args: str, timeout: float = 600) -> Callable[[], str]:
        """``manage.py args`` in a Django process started now that runs the command once the
        function returned is called (which returns its standard output): the process's start,
        seconds of CPU importing Django, overlaps what the caller does meanwhile. Killed at
        ``stop`` if never called."""
        script = (
            "import sys, django; django.setup(); from django.core.management import call_command\n"
            "sys.stdin.readline()\n"
            f"call_command({', '.join(map(repr, args))})\n"
        )
        process = subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.waiting.append(process)

        def run() -> str:
            out, err = process.communicate("run\n", timeout=timeout)
            if process.returncode != 0:
                raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{out}{err}")
            return out

        return run

    def _log(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def _prepare(self) -> None:
        """The admin token (``bootstrap_admin``), then ``commands``, in one Django process."""
        script = "import django; django.setup(); from django.core.management import call_command\n"
        script += "".join(
            f"call_command({', '.join(map(repr, args))})\n"
            for args in [["bootstrap_admin"], *self.commands]
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
            raise RuntimeError(f"preparing failed:\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        """Every process is started at once and waited for after (each spends seconds of CPU
        importing Django: one after another, the start took their sum). The database is a
        copy of a migrated template (``tests.support.migrated_database``)."""
        self.started_s3 = self.s3.process is None or self.s3.process.poll() is not None
        if self.started_s3:
            self.s3.launch()
        self.redis.start()
        create_migrated_database(self.server_database_url, self.database_name, self.env)
        self.web = self._gunicorn("gunicorn", self.port, self.web_workers)
        self.web.start()
        if self.read_web_workers:
            port = free_port()
            self.reads = self._gunicorn("gunicorn-reads", port, self.read_web_workers)
            self.reads_url = f"http://127.0.0.1:{port}"
            self.reads.start()
        for number in range(self.other_web_servers):
            port = free_port()
            self.more_web.append(self._gunicorn(f"gunicorn{number + 2}", port, 1))
            self.more_web_urls.append(f"http://127.0.0.1:{port}")
            self.more_web[-1].start()
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
        if self.started_s3:
            self.s3.wait_ready()
        self.s3.create_bucket(self.bucket)
        self._prepare()
        self.token = (self.directory / "data" / "admin-token").read_text().strip()
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
            *(["--access-logfile", "-"] if self.access_log else []),
        ]
        return Process(name, argv, self.env, self._log(name))

    def wait_for_web(self, timeout: float = 60) -> None:
        """Until gunicorn answers with all its workers up, and every other web server answers."""
        deadline = time.monotonic() + timeout
        assert self.web is not None
        waiting = [
            (self.web, self.url, self.web_workers),
            *((web, url, 1) for web, url in zip(self.more_web, self.more_web_urls, strict=True)),
            *([(self.reads, self.reads_url, self.read_web_workers)] if self.reads else []),
        ]
        for web, url, workers in waiting:
            while True:
                if not web.running():
                    raise RuntimeError(f"gunicorn exited; see {web.log}")
                with suppress(requests.RequestException):
                    answer = requests.get(url + "/api/info/", timeout=5)
                    if answer.status_code == 200 and len(child_pids(web.pid)) == workers:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gunicorn at {url} did not answer within {timeout:.0f} s")
                time.sleep(0.1)

    def web_worker_pids(self) -> list[int]:
        assert self.web is not None
        return child_pids(self.web.pid)

    def stop(self) -> None:
        """Every process stopped at once, the database dropped meanwhile, and SeaweedFS stopped
        too if ``start`` started it (a caller's ``s3.stop()`` after is then a no-op)."""
        processes = [self.beat, *self.workers, self.web, self.reads, *self.more_web, self.redis]
        for waiting in self.waiting:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait()

        def drop() -> None:
            try:
                drop_database(self.server_database_url, self.database_name)
            except psycopg.Error:
                # A process still stopping connected again meanwhile: once they have all gone.
                for process in processes:
                    if process is not None and process.popen is not None:
                        with suppress(subprocess.TimeoutExpired):
                            process.popen.wait(15)
                with suppress(psycopg.Error):
                    drop_database(self.server_database_url, self.database_name)

        meanwhile = [threading.Thread(target=drop)]
        if self.started_s3:
            meanwhile.append(threading.Thread(target=self.s3.stop))
        stop_all(processes, timeout=5, meanwhile=meanwhile)

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
    commands: list[list[str]] | None = None,
    other_web_servers: int = 0,
    read_web_workers: int = 0,
    access_log: bool = False,
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
        commands=commands or [],
        other_web_servers=other_web_servers,
        start_timeout=start_timeout,
        read_web_workers=read_web_workers,
        access_log=access_log,
    )
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()
