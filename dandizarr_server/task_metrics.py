"""Celery tasks in the metrics: how many ran, by task and outcome (succeeded, failed, retried),
and how long, counted by Celery's signals in whichever process runs them. A worker serves its
own metrics on ``DANDIZARR_WORKER_METRICS_PORT``, at ``DANDIZARR_WORKER_METRICS_ADDRESS``
(loopback unless widened; Prometheus scrapes each worker; with
``--scale worker=N`` each container has its own), since workers share no process with the web
service's ``/metrics``."""

from __future__ import annotations

import time
from typing import Any
from wsgiref.simple_server import WSGIServer

from celery import signals
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess, start_http_server

from dandizarr_server.zarr_api.runtime.metrics import TASK_SECONDS, TASKS

_started: dict[str, float] = {}


@signals.task_prerun.connect
def _task_started(task_id: str | None = None, **_: Any) -> None:
    if task_id:
        _started[task_id] = time.perf_counter()


@signals.task_postrun.connect
def _task_ended(task_id: str | None = None, task: Any = None, state: str | None = None,
                **_: Any) -> None:  # fmt: skip
    name = getattr(task, "name", "unknown")
    started = _started.pop(task_id or "", None)
    if started is not None:
        TASK_SECONDS.labels(name).observe(time.perf_counter() - started)
    outcome = {"SUCCESS": "succeeded", "FAILURE": "failed", "RETRY": "retried"}.get(
        state or "", (state or "unknown").lower()
    )
    TASKS.labels(name, outcome).inc()


@signals.worker_init.connect
def _serve_worker_metrics(**_: Any) -> None:
    serve_worker_metrics()


def serve_worker_metrics() -> WSGIServer | None:
    """Start serving this worker's metrics (on a thread of its own) as the settings say; the
    server, or None when they say not to."""
    from django.conf import settings  # the worker has set Django up by now

    if not settings.DANDIZARR_WORKER_METRICS_PORT:
        return None
    registry = REGISTRY
    if settings.PROMETHEUS_MULTIPROC_DIR:  # tasks run in the pool's processes: gather them
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    # Only where the settings say: the endpoint asks no one who they are (unlike /metrics).
    server, _thread = start_http_server(
        settings.DANDIZARR_WORKER_METRICS_PORT,
        addr=settings.DANDIZARR_WORKER_METRICS_ADDRESS,
        registry=registry,
    )
    return server
