"""gunicorn's settings for the production web service, whatever starts it (docker-compose.yml,
the Dockerfile, the tests' production shape):
``gunicorn -c python:dandizarr_server.gunicorn_config dandizarr_server.wsgi --bind ... --workers
N``.

The worker is ``dandizarr serve``'s (``dandizarr_server.gunicorn_worker``), which reads request
heads in its loop and bounds slow bodies: gunicorn's default sync worker reads each request in
its one thread with no deadline, so as many slow clients as there are workers stall the service
(gunicorn asks for a buffering proxy in front of the sync worker; docker-compose.yml has none).
"""

import os
from typing import Any

from prometheus_client import multiprocess

from dandizarr_server.allocator import after_request, configure_malloc
from dandizarr_server.gunicorn_logging import BoundedTracebackLogger
from dandizarr_server.gunicorn_worker import HeadFirstThreadWorker

worker_class = HeadFirstThreadWorker
# gunicorn's own tracebacks plain and bounded, as every other log's.
logger_class = BoundedTracebackLogger
# Requests served at once per worker process. Each thread keeps a database connection: 4 workers
# hold 32 of PostgreSQL's default 100.
threads = 8
# malloc set up in the master, which the workers inherit by fork; memory freed after a request
# with a big body (dandizarr_server.allocator).
configure_malloc()
post_request = after_request


def child_exit(server: Any, worker: Any) -> None:
    """A web worker gone: its metrics stop counting as live ones (prometheus-client's
    multiprocess mode, PROMETHEUS_MULTIPROC_DIR)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)
