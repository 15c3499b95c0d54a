"""The probes: /healthz answers while the process does; /readyz says which dependency does not
answer (503, naming it), and ready when all do."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.http import HttpResponse
from django.test import Client

from dandizarr_server.zarr_api.selectors.readiness import READY_TIMEOUT_SECONDS
from tests.support.seaweedfs import SeaweedS3


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


def test_request_events_are_captured_after_the_settings_load_again(db: None) -> None:
    """Loading the settings again (a test reloading them) configures structlog again; the
    loggers cached on first use (django-structlog's middleware's) keep logging through the
    configured chain. They once kept the old one, and capture_logs saw no request event after
    tests/zarr_api/test_user_bytes.py's reload: an order-dependent failure (seed 2342319187)."""
    import structlog

    from dandizarr_server.logging_config import structured_logging

    Client().get("/healthz")  # the middleware's logger is cached by now
    structured_logging("json", "INFO")
    with structlog.testing.capture_logs() as events:
        Client().get("/healthz")
    assert [e["event"] for e in events if e["event"].startswith("request_")] == [
        "request_started",
        "request_finished",
    ]


def test_readyz_answers_on_the_local_backend(db: None, settings: Any, tmp_path: Path) -> None:
    """`make serve`'s storage (the local backend) answers the probe: its key is one every
    backend accepts, not a name the local backend reserves."""
    settings.DANDIZARR_STORAGE = "local"
    settings.DANDIZARR_LOCAL_STORAGE_DIR = tmp_path / "storage"
    settings.CELERY_BROKER_URL = None  # make serve: tasks run in the process
    ready = Client().get("/readyz")
    assert ready.status_code == 200, ready.content


def test_readyz_names_what_is_down_never_where(
    db: None, settings: Any, s3_storage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An anonymous probe learns which dependency is down, not its host or port; the full error
    is in the service's log."""
    settings.DANDIZARR_S3_ENDPOINT_URL = "http://127.0.0.1:9"
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    database = connections.settings["default"]
    saved = {key: database.get(key) for key in ("HOST", "PORT")}
    database.update(HOST="127.0.0.1", PORT="9")  # new connections (the check's thread) fail
    try:
        with caplog.at_level(logging.WARNING):
            down = Client().get("/readyz")
    finally:
        database.update(saved)
    assert down.status_code == 503
    detail = down.json()["detail"]
    assert "database:" in detail and "broker:" in detail and "storage:" in detail, detail
    assert "127.0.0.1" not in detail and ":9" not in detail and "port 9" not in detail, detail
    assert "127.0.0.1" in caplog.text, caplog.text


def _probe_within(seconds: float) -> HttpResponse | None:
    """``GET /readyz``'s answer if it comes within ``seconds``, else None (the request's thread
    is left to finish by itself)."""
    answers: list[HttpResponse] = []
    prober = threading.Thread(target=lambda: answers.append(Client().get("/readyz")), daemon=True)
    prober.start()
    prober.join(seconds)
    return answers[0] if answers else None


def _checks_in_flight() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("readiness-")]


def test_readyz_answers_within_its_limit_when_storage_hangs(
    db: None, settings: Any, seaweedfs: SeaweedS3, seaweedfs_storage: str
) -> None:
    """Storage stopped (not refusing: hung): every probe answers 503 within its limit, probes in
    a row or at once share one storage check instead of each leaving one stuck, and once storage
    answers again the service is ready again."""
    assert Client().get("/readyz").status_code == 200
    bound = READY_TIMEOUT_SECONDS + 3  # the limit, and slack for a loaded machine
    with seaweedfs.paused():
        for _ in range(3):
            answer = _probe_within(bound)
            assert answer is not None, "/readyz waited for a stuck storage check"
            assert answer.status_code == 503
            detail = answer.json()["detail"]
            assert "storage:" in detail and "database:" not in detail, detail
        with concurrent.futures.ThreadPoolExecutor(4) as probes:
            answers = list(probes.map(lambda _: _probe_within(bound), range(4)))
        assert all(a is not None and a.status_code == 503 for a in answers), answers
        stuck = [t for t in _checks_in_flight() if t.name == "readiness-storage"]
        assert len(stuck) <= 1, stuck
        # The stuck check gives up by itself soon after the limit (its requests' own timeout),
        # so the next probe asks storage again instead of reporting the old check for minutes.
        for thread in stuck:
            thread.join(READY_TIMEOUT_SECONDS + 10)
            assert not thread.is_alive(), "the storage check is stuck beyond its timeout"
        answer = _probe_within(bound)
        assert answer is not None and answer.status_code == 503
    deadline = time.monotonic() + 30  # the stuck check ends once storage answers
    while (ready := Client().get("/readyz")).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ready.status_code == 200, ready.content
