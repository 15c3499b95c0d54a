"""What an operator's tools ask: ``/healthz`` (this process answers; nothing else asked),
``/readyz`` (the database, the broker and storage answer within ``READY_TIMEOUT_SECONDS``; a
503 naming what does not), neither needing credentials nor saying more than up or down; and
``/metrics`` (Prometheus), for the networks in ``DANDIZARR_METRICS_NETWORKS`` or a request with
``Authorization: Bearer $DANDIZARR_METRICS_TOKEN``, 404 to anyone else."""

from __future__ import annotations

import concurrent.futures
import hmac
import ipaddress
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from django_prometheus.exports import ExportToDjangoView
from kombu import Connection

from dandizarr_server.zarr_api.storage import get_store

READY_TIMEOUT_SECONDS = 3.0


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _broker() -> None:
    if not settings.CELERY_BROKER_URL:
        return  # no broker: tasks run in this process (dandizarr serve)
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=READY_TIMEOUT_SECONDS) as broker:
        broker.ensure_connection(max_retries=1)


def _storage() -> None:
    get_store().head("zarr/.dandizarr-readiness-probe")  # absent is an answer too


CHECKS: dict[str, Callable[[], None]] = {
    "database": _database,
    "broker": _broker,
    "storage": _storage,
}


@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    down: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(len(CHECKS)) as pool:
        futures = {name: pool.submit(_closing(check)) for name, check in CHECKS.items()}
        for name, future in futures.items():
            try:
                future.result(timeout=READY_TIMEOUT_SECONDS)
            except concurrent.futures.TimeoutError:
                down.append(f"{name}: no answer within {READY_TIMEOUT_SECONDS:g} s")
            except Exception as error:
                down.append(f"{name}: {type(error).__name__}: {error}"[:300])
    if down:
        return JsonResponse({"detail": "not ready: " + "; ".join(down)}, status=503)
    return JsonResponse({"status": "ready", "checked": list(CHECKS)})


def _closing(check: Callable[[], None]) -> Callable[[], None]:
    """``check`` in a pool thread, its database connection closed after (threads of a pool
    outlive the request)."""

    def run() -> None:
        try:
            check()
        finally:
            connection.close()

    return run


def _may_read_metrics(request: HttpRequest) -> bool:
    token = settings.DANDIZARR_METRICS_TOKEN
    if token and hmac.compare_digest(
        request.META.get("HTTP_AUTHORIZATION", "").encode(), f"Bearer {token}".encode()
    ):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in settings.DANDIZARR_METRICS_NETWORKS)


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """django-prometheus's export (every process's metrics when PROMETHEUS_MULTIPROC_DIR is
    set, as under several gunicorn workers), for those allowed."""
    if not _may_read_metrics(request):
        return JsonResponse({"detail": "not found"}, status=404)
    response: HttpResponse = ExportToDjangoView(request)
    return response
