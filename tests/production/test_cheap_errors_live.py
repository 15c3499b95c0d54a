"""Issue #47, findings 4 and 7 and "errors are cheap", against a live ``dandizarr serve`` (what
``make serve`` runs: gunicorn, SQLite, console logs at INFO; and with JSON logs): each request
measured from outside (the server's CPU from /proc, its answer, the log it wrote). A pack start
nested 990 deep and a request for an unknown host are plain 400s with a line or two of log; a
500 forced at a crash point (a megabyte of message over a ``RecursionError`` as deep as the
stack goes) is logged with plain, bounded tracebacks and costs what an ordinary request does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from dandizarr_server.logging_config import TRACEBACK_CHARS
from dandizarr_server.zarr_api.runtime.crash import RAISE
from tests.support.hostile_findings import (
    Measured,
    Probe,
    Target,
    archive_create,
    archive_upload,
    measure,
    nested_path_pack_start,
    unknown_host,
)
from tests.support.processes import Processes, serve_logged

REQUEST_CPU_SECONDS = 0.5
# The log of a refusal: the access line and a warning or two, never a traceback.
REFUSAL_LOG_BYTES = 2048
# The log of a 500: Django's request logger's traceback and django-structlog's event's, each
# bounded, and a few lines.
FAILED_REQUEST_LOG_BYTES = 2 * TRACEBACK_CHARS + 4096
RICH_MARKS = ("╭", "│", "╰")
CRASH_STEP = "delete:intent-committed"


@pytest.fixture(params=["console", "json"])
def target(
    request: pytest.FixtureRequest, processes: Processes, tmp_path: Path
) -> Iterator[tuple[Target, int, Path]]:
    """``dandizarr serve`` in each log format, failing at ``CRASH_STEP``; the admin's target
    there (a dandiset, a loose archive holding one file, a sharded archive), its pid and log."""
    data, log = tmp_path / "var", tmp_path / "serve.log"
    with serve_logged(
        data, log, DANDIZARR_LOG_FORMAT=request.param, DANDIZARR_CRASH_AT=RAISE + CRASH_STEP
    ) as (url, pid):
        token = (data / "admin-token").read_text().strip()
        created = requests.post(
            f"{url}/api/dandisets/",
            json={"name": "errors"},
            headers={"Authorization": f"Token {token}"},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        target = Target(url=url, token=token, dandiset=str(created.json()["identifier"]))
        target.loose = archive_create(target, "loose.zarr", "loose")
        archive_upload(target, target.loose, {"a": b"a"})
        target.sharded = archive_create(target, "sharded.zarr", "sharded")
        requests.get(f"{url}/healthz", timeout=30)
        yield target, pid, log


Send = Callable[[Target], requests.Response]


def _measured(target: tuple[Target, int, Path], name: str, send: Send) -> Measured:
    service, pid, log = target
    row = measure(service, Probe("", name, send), pid, [log])
    assert row.cpu_seconds < REQUEST_CPU_SECONDS, (name, row.cpu_seconds)
    assert row.healthz_seconds < 2.0, (name, row.healthz_seconds)
    assert not any(mark in row.log_text for mark in RICH_MARKS), row.log_text[-2000:]
    return row


def test_refusals_are_plain_400s_with_a_line_of_log(target: tuple[Target, int, Path]) -> None:
    """Finding 4 (a pack start whose member path nests 990 deep: a 500, and `dandizarr serve`
    held for 30 s) and finding 7 (an unknown Host: 77 ms of CPU, 8.5 KB of rich traceback)."""
    refusals: dict[str, Send] = {
        "unknown_host": unknown_host,
        "body_too_deep": nested_path_pack_start,
    }
    for code, send in refusals.items():
        row = _measured(target, code, send)
        assert row.status == 400, (code, row.status)
        assert row.answer_bytes < 256, (code, row.answer_bytes)
        assert "Traceback" not in row.log_text, row.log_text
        assert 0 < row.log_bytes < REFUSAL_LOG_BYTES, (code, row.log_bytes, row.log_text)
        assert send(target[0]).json()["code"] == code


def test_a_500_costs_what_a_request_costs(target: tuple[Target, int, Path]) -> None:
    row = _measured(
        target,
        "a failure at a crash point",
        lambda t: t.api("DELETE", f"/api/zarr/{t.loose}/files/", json=[{"path": "a"}]),
    )
    assert row.status == 500 and row.answer_bytes < 256
    assert "RecursionError" in row.log_text and "refused xxx" in row.log_text
    assert row.log_bytes < FAILED_REQUEST_LOG_BYTES, row.log_bytes
