"""Issue #47, "errors are cheap": what a failure writes to the log is plain and bounded in every
log format and from every logger that writes one: a 500 (Django's request logger and
django-structlog's event, through the handler the settings configure), a request Django refuses
as suspicious (one line, no traceback), and gunicorn's own error log (``dandizarr serve``'s and
production's). The failure is forced at a crash point (``DANDIZARR_CRASH_AT=raise:<step>``): a
megabyte of message over a ``RecursionError`` as deep as the stack goes. (The same against a
live ``dandizarr serve``: tests/production/test_cheap_errors_live.py.)"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from django.conf import settings as django_settings
from django.test import Client
from gunicorn.config import Config

from dandizarr_server import gunicorn_config
from dandizarr_server.httpserver import gunicorn_options
from dandizarr_server.logging_config import TRACEBACK_CHARS, structured_logging
from dandizarr_server.zarr_api.runtime.crash import RAISE, raise_costly_exception
from tests.support.api import Actor, upload
from tests.support.cost_bounds import cpu_scale

# Box-drawing characters of rich's traceback, and what only its rendering shows.
RICH_MARKS = ("╭", "│", "╰", "locals")
# What one failed request may write: its tracebacks (Django's request logger's and
# django-structlog's event, each bounded) and a few lines.
FAILED_REQUEST_LOG = 2 * TRACEBACK_CHARS + 4096


@contextmanager
def console_handler_output(log_format: str) -> Iterator[io.StringIO]:
    """What the handler the settings configure (``LOGGING``'s ``console``) writes, in
    ``log_format``, while the block runs."""
    handler = next(h for h in logging.getLogger().handlers if h.get_name() == "console")
    assert isinstance(handler, logging.StreamHandler)
    spec = structured_logging(log_format, "INFO")["formatters"]["structured"]
    formatter = structlog.stdlib.ProcessorFormatter(
        processor=spec["processor"], foreign_pre_chain=spec["foreign_pre_chain"]
    )
    output = io.StringIO()
    previous_formatter = handler.formatter
    previous_stream = handler.setStream(output)
    handler.setFormatter(formatter)
    try:
        yield output
    finally:
        handler.setStream(previous_stream)
        handler.setFormatter(previous_formatter)


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_a_500_is_logged_with_plain_bounded_tracebacks(
    owner: Actor, zarr_id: str, settings: Any, log_format: str
) -> None:
    assert upload(owner.client, zarr_id, {"a": b"a"}).status_code == 200
    settings.DANDIZARR_CRASH_AT = RAISE + "delete:intent-committed"
    owner.client.raise_request_exception = False
    with console_handler_output(log_format) as output:
        started = time.process_time()
        response = owner.client.delete(
            f"/api/zarr/{zarr_id}/files/", [{"path": "a"}], format="json"
        )
        cpu = time.process_time() - started
    assert response.status_code == 500
    assert response.json() == {"detail": "internal server error", "code": "server_error"}
    text = output.getvalue()
    assert "RecursionError" in text and "RuntimeError: refused xxx" in text
    assert len(text) < FAILED_REQUEST_LOG, len(text)
    assert not any(mark in text for mark in RICH_MARKS)
    assert cpu < 0.5 * cpu_scale(), cpu


def test_a_request_django_refuses_as_suspicious_is_one_line(db: None) -> None:
    """Django logs a request it refuses as suspicious (``django.security.*``: here too many
    form fields) with its traceback; a client's doing, answered 400, it is one line."""
    fields = {f"f{i}": "x" for i in range(django_settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)}
    with console_handler_output("console") as output:
        response = Client().post("/admin/login/", fields)
    assert response.status_code == 400
    text = output.getvalue()
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in text
    assert "Traceback" not in text and len(text) < 2048, text


@pytest.mark.parametrize("server", ["dandizarr serve", "production"])
def test_gunicorn_logs_a_traceback_plain_and_bounded(tmp_path: Path, server: str) -> None:
    """gunicorn's own error log (a response that fails while it is sent, which Django never
    sees) formats tracebacks with ``logging.Formatter``: whole, with the whole message."""
    logger_class = (
        gunicorn_options("127.0.0.1", 0)["logger_class"]
        if server == "dandizarr serve"
        else gunicorn_config.logger_class
    )
    config = Config()
    config.set("errorlog", str(tmp_path / "error.log"))
    config.set("logger_class", logger_class)
    log = config.logger_class(config)
    try:
        try:
            raise_costly_exception()
        except RuntimeError:
            log.exception("Error handling request /api/info/")
    finally:
        for handler in list(log.error_log.handlers):
            log.error_log.removeHandler(handler)
            handler.close()
    text = (tmp_path / "error.log").read_text()
    assert "Error handling request" in text and "Traceback" in text
    assert "RecursionError" in text and "RuntimeError: refused xxx" in text
    assert len(text) < TRACEBACK_CHARS + 1024, len(text)
