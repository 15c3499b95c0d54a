"""The probes: /healthz answers while the process does; /readyz says which dependency does not
answer (503, naming it), and ready when all do."""

from __future__ import annotations

from typing import Any

from django.test import Client


def test_healthz_needs_nothing_else(transactional_db: None, settings: Any) -> None:
    settings.DANDIZARR_S3_ENDPOINT_URL = "http://127.0.0.1:9"  # storage down: still alive
    settings.DANDIZARR_STORAGE = "s3"
    response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_names_what_is_down(transactional_db: None, settings: Any, s3_storage: str) -> None:
    ready = Client().get("/readyz")
    assert ready.status_code == 200, ready.content
    assert ready.json()["checked"] == ["database", "broker", "storage"]
    settings.DANDIZARR_S3_ENDPOINT_URL = "http://127.0.0.1:9"  # nothing listens there
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    down = Client().get("/readyz")
    assert down.status_code == 503
    detail = down.json()["detail"]
    assert detail.startswith("not ready: ")
    assert "storage:" in detail and "broker:" in detail and "database:" not in detail


def test_every_answer_names_its_request(transactional_db: None) -> None:
    """X-Request-ID: a proxy's kept when it looks like an id, else a new one, on every answer
    (errors too); the same id is on the request's log events (dandizarr_server.request_ids)."""
    import structlog

    with structlog.testing.capture_logs([structlog.contextvars.merge_contextvars]) as events:
        kept = Client().get("/api/info/", HTTP_X_REQUEST_ID="proxy-42.a:b")
    assert kept["X-Request-ID"] == "proxy-42.a:b"
    assert {e.get("request_id") for e in events if e["event"].startswith("request_")} == {
        "proxy-42.a:b"
    }
    fresh = Client().get("/api/info/", HTTP_X_REQUEST_ID="not an id <script>")
    assert fresh["X-Request-ID"] != "not an id <script>" and len(fresh["X-Request-ID"]) == 36
    missing = Client().get("/api/zarr/not-a-uuid/")
    assert missing.status_code == 404 and missing["X-Request-ID"]
