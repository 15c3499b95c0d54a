"""The Celery application. Tasks are declared with ``@shared_task`` in
``dandizarr_server.zarr_api.tasks``."""

import os
from typing import Any

from celery import Celery, signals
from django_structlog.celery.steps import DjangoStructLogInitStep

from dandizarr_server import task_metrics  # noqa: F401 (connects its signals)
from dandizarr_server.allocator import (
    configure_malloc,
    freeze_startup_objects,
    release_freed_memory,
)
from dandizarr_server.embedded import MissingSecretKey, require_shared_secret_key
from dandizarr_server.zarr_api.runtime.storage import get_store

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dandizarr_server.settings")

app = Celery("dandizarr")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["dandizarr_server.zarr_api"])
# Each task's log events carry the id of the request that scheduled it (django-structlog).
app.steps["worker"].add(DjangoStructLogInitStep)
app.set_default()


@signals.worker_init.connect
@signals.beat_init.connect
def _refuse_without_a_shared_secret_key(sender: Any = None, **kwargs: Any) -> None:
    """A worker or beat started without DANDIZARR_SECRET_KEY exits with the reason (importing
    this module, as the tests and the web service do, is not starting one)."""
    from django.conf import settings

    try:
        require_shared_secret_key(settings.SECRET_KEY_SOURCE, "a Celery worker or beat")
    except MissingSecretKey as error:
        # SystemExit: Celery logs and ignores a signal handler's ordinary exceptions.
        raise SystemExit(str(error)) from None


@signals.worker_init.connect
def _configure_malloc(sender: Any = None, **kwargs: Any) -> None:
    """A worker's malloc set up before its first task (its pool's processes inherit it)."""
    configure_malloc()


@signals.task_postrun.connect
def _release_freed_memory(**kwargs: Any) -> None:
    """What a task freed (a tree update's 100,000 paths) handed back to the system, here and in
    ``dandizarr serve``'s background thread, which runs tasks through Celery too."""
    release_freed_memory()


@signals.worker_init.connect
def _build_the_store(sender: Any = None, **kwargs: Any) -> None:
    """A worker builds its store (an S3 client: about a second of CPU) before its first task,
    not while the first tree update waits (prefork children inherit it unused: no connection
    is opened before a request)."""
    get_store()


@signals.worker_ready.connect
@signals.worker_process_init.connect
def _freeze_startup_objects(sender: Any = None, **kwargs: Any) -> None:
    """What a worker made before its first task (Django, boto3's models, the store) left out of
    the garbage collector's full passes, as a web worker's is: each full pass walked that heap,
    a large share of a Celery worker's CPU in a packed upload (docs/performance.md).
    ``worker_ready``: the solo pool, whose tasks run in this process; ``worker_process_init``:
    each child of the prefork pool."""
    freeze_startup_objects()
