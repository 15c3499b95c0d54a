"""The Celery application. Tasks are declared with ``@app.task`` in ``zarr_api.tasks``."""

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dandizarr.settings")

app = Celery("dandizarr")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["zarr_api"])
app.set_default()


# --- Tasks without a broker ----------------------------------------------------------------------
# Without CELERY_BROKER_URL tasks run in this process. DANDIZARR_INLINE_TASKS says where:
# "request" runs them inside the request that started them (tests: results are there when the
# request returns); "background" (what ``dandizarr serve`` uses) runs them one at a time on a
# thread of the web process, so that, as with a worker, completing a batch does not wait for
# its tree update.

_background_lock = threading.Lock()
_background: ThreadPoolExecutor | None = None
_logger = logging.getLogger(__name__)


def enqueue(task: Any, *args: Any) -> None:
    """Start ``task(*args)``: on the broker, in this request, or on the background thread."""
    global _background
    from django.conf import settings

    if not (app.conf.task_always_eager and settings.DANDIZARR_INLINE_TASKS == "background"):
        task.delay(*args)
        return
    with _background_lock:
        if _background is None:
            # One thread: tasks of one archive never overlap even on SQLite, which has no row
            # locks to serialize them.
            _background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tasks")
    _background.submit(_run_in_background, task, args)


def _run_in_background(task: Any, args: tuple[Any, ...]) -> None:
    from django.db import close_old_connections, connection

    close_old_connections()
    try:
        result = task.apply(args=args)
        if result.failed():
            _logger.error("task %s%r failed: %s", task.name, args, result.result)
    except Exception:
        _logger.exception("task %s%r failed", task.name, args)
    finally:
        connection.close()


def wait_for_background_tasks(timeout: float = 60) -> None:
    """Block until every background task started so far has finished (tests, shutdown)."""
    with _background_lock:
        executor = _background
    if executor is not None:
        executor.submit(lambda: None).result(timeout=timeout)
