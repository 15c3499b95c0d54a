"""The HTTP server of ``dandizarr serve``: gunicorn (one process, threads), replies sent at once,
slow clients cut off (``dandizarr_server.gunicorn_worker``).

A reply's headers and body are written in separate ``send`` calls (gunicorn, like Django's
development server and ``wsgiref``). With Nagle's algorithm on, the body would wait for the
client to acknowledge the headers, which clients delay (delayed ACKs): every API call would
wait for that. gunicorn sets TCP_NODELAY on its listening socket, and Linux hands it
on to every accepted connection; ``NoDelayMixin`` does the same for Django's servers (the tests'
live service).
"""

from __future__ import annotations

import socket
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.servers.basehttp import ThreadedWSGIServer
from django.urls import get_resolver
from gunicorn.app.base import BaseApplication

from dandizarr_server.allocator import after_request, configure_malloc, freeze_startup_objects
from dandizarr_server.gunicorn_logging import BoundedTracebackLogger
from dandizarr_server.gunicorn_worker import HeadFirstThreadWorker
from dandizarr_server.zarr_api.runtime.background import WORKER, start_periodic_tasks
from dandizarr_server.zarr_api.runtime.storage import get_store

# Requests served at once: uploads run many PUTs in parallel, and a batch's completion applies
# it in the request (tasks run inline).
THREADS = 32
GRACEFUL_SECONDS = 5
# gunicorn's default line, then the request's time in microseconds.
ACCESS_LOG_FORMAT = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(D)s'


class NoDelayMixin:
    """Sets TCP_NODELAY on every connection the server accepts."""

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()  # type: ignore[misc]
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address


class NoDelayThreadedWSGIServer(NoDelayMixin, ThreadedWSGIServer):
    """For Django's LiveServerThread (the tests' live service)."""


class EmbeddedServer(BaseApplication):
    """gunicorn running one WSGI application object with the given settings."""

    def __init__(self, application: Any, options: dict[str, Any]) -> None:
        self.application = application
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for name, value in self.options.items():
            self.cfg.set(name, value)

    def load(self) -> Any:
        return self.application


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run(host: str, port: int) -> None:
    """Serve the project at ``host:port`` until SIGINT (Ctrl-C) or SIGTERM.

    One worker process with threads: SQLite's write lock, the inline tasks and the listing
    cache all live in one process, as under the development server. Static files come from
    WhiteNoise's middleware, as under gunicorn in production.
    """
    from django.core.wsgi import get_wsgi_application
    from django.db import connections

    configure_malloc()
    application = get_wsgi_application()
    connections.close_all()  # the worker is forked: it opens its own
    EmbeddedServer(application, gunicorn_options(host, port)).run()


def gunicorn_options(host: str, port: int) -> dict[str, Any]:
    """The settings of ``dandizarr serve``'s gunicorn."""
    return {
        "bind": [bind_address(host, port)],
        "workers": 1,
        # gthread, with request heads read in its loop: slow clients hold no thread.
        "worker_class": HeadFirstThreadWorker,
        # gunicorn's own tracebacks plain and bounded, as every other log's.
        "logger_class": BoundedTracebackLogger,
        "threads": THREADS,
        "graceful_timeout": GRACEFUL_SECONDS,
        "accesslog": settings.ACCESS_LOG,
        "access_log_format": ACCESS_LOG_FORMAT,
        "proc_name": "dandizarr",
        "post_worker_init": _start_background_work,
        "worker_exit": _finish_background_work,
        "post_request": after_request,
    }


def _start_background_work(worker: Any) -> None:
    """In the worker process (after the fork), before it serves: the Celery app's tasks
    bound and the periodic sweeps Celery beat would send started, then the worker made
    ready as gunicorn's are."""
    if settings.DANDIZARR_TASKS_IN_BACKGROUND:
        current_app.finalize()  # binds every task: what the first tree update would wait for
        start_periodic_tasks(settings.CELERY_BEAT_SCHEDULE)
    prepare_web_worker()


def prepare_web_worker() -> None:
    """What a web worker's first requests would otherwise wait for, done before it serves
    (``dandizarr serve``'s worker and each of gunicorn's, ``dandizarr_server.wsgi``):
    - the store built and its threads started (an S3 client loads boto3's service model and
      endpoint rules);
    - the URLconf imported, and every view with it (the first request of each gunicorn
      worker paid it);
    - then what exists frozen: the objects made at startup (modules, Django's and boto3's
      models: most of the heap) left out of the garbage collector's full passes, which walked
      all of them each time a request or a tree update made many objects."""
    get_store().warm_up()
    get_resolver().url_patterns  # noqa: B018 (the property imports the URLconf)
    freeze_startup_objects()


def _finish_background_work(server: Any, worker: Any) -> None:
    """Let a running tree update finish before the process exits (it would be redone at the
    next start, but need not be)."""
    WORKER.wait_idle(timeout=GRACEFUL_SECONDS)
