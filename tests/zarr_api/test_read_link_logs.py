"""A read link's secret never reaches a log line through the formatters the service's logs
pass: structlog's (every event, traceback included) and gunicorn's (its access log, whose
Referer may be a link, and its error log)."""

from __future__ import annotations

import logging
import sys

from django.conf import settings

from dandizarr_server.logging_config import BoundedTracebackFormatter
from dandizarr_server.zarr_api.domain.read_links import new_secret

SECRET = new_secret()


def _record(message: str) -> logging.LogRecord:
    try:
        raise ValueError(f"failed reading /links/{SECRET}/img/0.0")
    except ValueError:
        exc_info = sys.exc_info()
    return logging.LogRecord("x", logging.ERROR, __file__, 1, message, None, exc_info)


def test_gunicorn_lines_hold_no_secret() -> None:
    access = f'1.2.3.4 - - "GET /links/{SECRET}/img/0.0 HTTP/1.1" 200 "http://h/links/{SECRET}/"'
    line = BoundedTracebackFormatter("%(message)s").format(_record(access))
    assert SECRET not in line and line.count("/links/[redacted]") == 3


def test_structlog_lines_hold_no_secret() -> None:
    spec = dict(settings.LOGGING["formatters"]["structured"])
    formatter = spec.pop("()")(**spec)
    line = formatter.format(_record(f"Not Found: /links/{SECRET}/img/0.0"))
    assert SECRET not in line and "/links/[redacted]" in line
