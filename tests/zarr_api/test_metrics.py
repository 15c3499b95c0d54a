"""/metrics (Prometheus): requests by view and status (django-prometheus) and the service's own
counters, for allowed networks or a bearer token; 404 to anyone else."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from tests.support.api import Actor, md5, upload


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
