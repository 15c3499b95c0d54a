"""A real Celery worker process on Redis for tests whose behaviour is asynchronous.

``tasks_to_worker`` points this process's Celery app at a Redis queue of its own (instead of
running tasks inline) and gives the environment a worker needs to serve the same database and
storage; ``Worker`` runs one (``--pool=solo``) as a subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection

from dandizarr_server.celery import app
from tests.support.ci import needs
from tests.support.processes import CELERY_TEST_ENV, celery_worker_command

REDIS_URL = os.environ.get("DANDIZARR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ROOT = Path(__file__).resolve().parents[2]
# One queue per test process (Celery caches its queue set), emptied after each test.
QUEUE = f"dandizarr-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
# How long a message a killed worker held stays invisible before Redis redelivers it.
VISIBILITY_TIMEOUT_SECONDS = 3


def redis_available() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


needs_redis = needs(not redis_available(), "Redis is not running (CI always runs these)")


class Worker:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if connection.in_atomic_block:  # a rollback test's (db): its rows are uncommitted
            pytest.fail(
                "a Celery worker process cannot see this test's uncommitted rows: ask for "
                "transactional_db (or pytest.mark.django_db(transaction=True))",
                pytrace=False,
            )
        self.process = subprocess.Popen(
            celery_worker_command("--concurrency=1"),
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(os.environ.get("DANDIZARR_TEST_WORKER_LOG", os.devnull), "ab"),  # noqa: SIM115
        )

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def tasks_to_worker(settings: Any) -> Iterator[dict[str, str]]:
    """Send tasks to Redis; yields the environment of a worker for this test's database and
    the storage ``settings`` point at (set them before entering)."""
    database = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": "postgresql://{}@{}:{}/{}".format(
            database["USER"] or "postgres",
            database["HOST"] or "127.0.0.1",
            database["PORT"] or 5432,
            database["NAME"],
        ),
        "CELERY_BROKER_URL": REDIS_URL,
        **CELERY_TEST_ENV,
        "DANDIZARR_CELERY_QUEUE": QUEUE,
        "DANDIZARR_CELERY_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT_SECONDS),
        "DANDIZARR_STORAGE": "s3",
        "DANDIZARR_S3_ENDPOINT_URL": settings.DANDIZARR_S3_ENDPOINT_URL,
        "DANDIZARR_S3_BUCKET": settings.DANDIZARR_S3_BUCKET,
        # A worker refuses to start without one; this process's, so both sign alike.
        "DANDIZARR_SECRET_KEY": settings.SECRET_KEY,
    }
    keys = ("broker_url", "task_always_eager", "task_default_queue", "broker_transport_options")
    previous = {k: app.conf[k] for k in keys}
    app.conf.update(
        broker_url=REDIS_URL,
        task_always_eager=False,
        task_default_queue=QUEUE,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_SECONDS},
    )
    _drop_celery_caches()
    try:
        yield env
    finally:
        app.conf.update(previous)
        _drop_celery_caches()
        redis.Redis.from_url(REDIS_URL).delete(QUEUE)


def _drop_celery_caches() -> None:
    """Make the app re-read broker and queue settings: earlier eager calls may have built them."""
    app.__dict__.pop("amqp", None)
    app._pool = None
