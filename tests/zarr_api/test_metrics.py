"""/metrics (Prometheus): requests by view and status (django-prometheus) and the service's own
counters, for allowed networks or a bearer token; 404 to anyone else."""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Any

import requests
from django.test import Client

from dandizarr_server.task_metrics import serve_worker_metrics
from tests.support.api import Actor, md5, upload
from tests.support.processes import free_port


def _value(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape(labels)} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_metrics_count_batches_files_and_mismatches(
    owner: Actor, zarr_id: str, settings: Any
) -> None:
    before = Client().get("/metrics").content.decode()
    assert upload(owner.client, zarr_id, {"a": b"1", "b": b"22"}).status_code == 200
    started = owner.client.post(
        f"/api/zarr/{zarr_id}/upload/", [{"path": "c", "etag": md5(b"3")}], format="json"
    )
    assert started.status_code == 200
    assert owner.client.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 400  # not PUT
    assert owner.client.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204

    after = Client().get("/metrics").content.decode()
    for name, labels, grew in [
        ("dandizarr_batches_total", '{event="started",kind="upload"}', 2),
        ("dandizarr_batches_total", '{event="completed",kind="upload"}', 1),
        ("dandizarr_batches_total", '{event="cancelled",kind="upload"}', 1),
        ("dandizarr_files_verified_total", "", 2),
        ("dandizarr_bytes_verified_total", "", 3),
        ("dandizarr_etag_mismatches_total", "", 1),
        ("dandizarr_tree_update_lag_seconds_count", "", 1),
    ]:
        assert _value(after, name, labels) - _value(before, name, labels) == grew, name
    assert (
        'django_http_responses_total_by_status_view_method_total{method="POST",status="200"'
        in after
    )


def test_metrics_are_for_allowed_networks_or_a_token(transactional_db: None, settings: Any) -> None:
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    stranger = Client(REMOTE_ADDR="203.0.113.4")
    assert stranger.get("/metrics").status_code == 404
    settings.DANDIZARR_METRICS_TOKEN = "scrape-secret"
    assert stranger.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 404
    allowed = stranger.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert allowed.status_code == 200 and b"dandizarr_batches_total" in allowed.content


def test_the_dashboard_charts_only_metrics_the_service_has() -> None:
    """deploy/grafana-dashboard.json names metrics that exist (ours, django-prometheus's)."""
    import json
    from pathlib import Path

    from prometheus_client import REGISTRY

    dashboard = json.loads(
        (Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json").read_text()
    )
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    used = set(re.findall(r"\b((?:dandizarr|django_http)_[a-z_]+)", exprs))
    families = list(REGISTRY.collect())  # a labelled metric has no sample before its first use
    known = {s.name for m in families for s in m.samples} | {
        m.name + suffix for m in families for suffix in ("", "_total", "_bucket", "_count")
    }
    assert used and used <= known, used - known


def test_behind_a_proxy_metrics_go_by_the_address_the_proxy_saw(db: None, settings: Any) -> None:
    """Behind a TLS proxy every connection comes from the proxy's own (loopback) address: the
    client's is the entry the proxy appended (dandizarr_server.client_address), for /metrics as
    for every per-address limit."""
    settings.DANDIZARR_TLS_PROXY = True
    proxy = Client(REMOTE_ADDR="127.0.0.1")
    assert proxy.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 404
    # A client's own entry before the proxy's is its own words.
    assert proxy.get("/metrics", HTTP_X_FORWARDED_FOR="127.0.0.1, 203.0.113.9").status_code == 404
    assert proxy.get("/metrics").status_code == 200  # scraped directly, past the proxy
    settings.DANDIZARR_METRICS_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    assert proxy.get("/metrics", HTTP_X_FORWARDED_FOR="10.1.2.3").status_code == 200


def _accepts(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=5).close()
    except ConnectionRefusedError:
        return False
    return True


def test_a_workers_metrics_listen_on_loopback_unless_widened(settings: Any) -> None:
    """A Celery worker's own metrics endpoint answers on 127.0.0.1 only, by default (127.0.0.2 is
    this machine too, an address other than the one bound: a wildcard bind would accept it);
    DANDIZARR_WORKER_METRICS_ADDRESS widens it, e.g. for a scraper in another container."""
    for address, widened in (("127.0.0.1", False), ("0.0.0.0", True)):
        settings.DANDIZARR_WORKER_METRICS_ADDRESS = address
        settings.DANDIZARR_WORKER_METRICS_PORT = port = free_port()
        server = serve_worker_metrics()
        assert server is not None
        try:
            served = requests.get(f"http://127.0.0.1:{port}/", timeout=10)
            assert b"dandizarr_tasks_total" in served.content
            assert _accepts("127.0.0.2", port) is widened
        finally:
            server.shutdown()
            server.server_close()
    settings.DANDIZARR_WORKER_METRICS_PORT = 0
    assert serve_worker_metrics() is None
