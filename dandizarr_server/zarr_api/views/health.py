"""What an operator's tools ask: ``/healthz`` (this process answers; nothing else asked),
``/readyz`` (the database, the broker and storage answer within their limit; a 503 naming what
does not: ``selectors.readiness``), neither needing credentials nor saying more than up or
down; and ``/metrics`` (Prometheus), for the networks in ``DANDIZARR_METRICS_NETWORKS`` (the
address as ``dandizarr_server.client_address`` has it) or a request with
``Authorization: Bearer $DANDIZARR_METRICS_TOKEN``, 404 to anyone else."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from django_prometheus.exports import ExportToDjangoView

from dandizarr_server.client_address import client_address
from dandizarr_server.zarr_api.edge.exceptions import error_response
from dandizarr_server.zarr_api.selectors.readiness import CHECKS, dependencies_down


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    down = dependencies_down()
    if down:
        return error_response(503, "not ready: " + "; ".join(down), code="not_ready")
    return JsonResponse({"status": "ready", "checked": list(CHECKS)})


def _may_read_metrics(request: HttpRequest) -> bool:
    token = settings.DANDIZARR_METRICS_TOKEN
    if token and hmac.compare_digest(
        request.META.get("HTTP_AUTHORIZATION", "").encode(), f"Bearer {token}".encode()
    ):
        return True
    try:
        # Behind a TLS proxy, every connection's address is the proxy's own.
        address = ipaddress.ip_address(client_address(request))
    except ValueError:
        return False
    return any(address in network for network in settings.DANDIZARR_METRICS_NETWORKS)


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """django-prometheus's export (every process's metrics when PROMETHEUS_MULTIPROC_DIR is
    set, as under several gunicorn workers), for those allowed."""
    if not _may_read_metrics(request):
        return error_response(404, "not found", code="not_found")
    response: HttpResponse = ExportToDjangoView(request)
    return response
