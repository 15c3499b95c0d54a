"""Structured logs (structlog, with django-structlog's request and task events): one event per
request and per task, as JSON lines or readable console lines. Plain logging calls (ours,
Django's, Celery's) get the same fields."""

from __future__ import annotations

import logging
import traceback
from typing import Any, TextIO

import structlog
from structlog.typing import ExcInfo

from dandizarr_server.zarr_api.domain.read_links import redact

# A traceback in any log format: plain text (never rich's rendering, whose cost grows with the
# stack and its locals: a 300-deep RecursionError held `dandizarr serve` for minutes), its last
# TRACEBACK_FRAMES frames of each exception, at most TRACEBACK_CHARS characters in all. A 500
# then costs its log what a 200 does, give or take a few kilobytes.
TRACEBACK_FRAMES = 20
TRACEBACK_CHARS = 8192


def bounded_traceback(exc_info: ExcInfo) -> str:
    """``exc_info`` as plain traceback text, bounded (``TRACEBACK_FRAMES``, ``TRACEBACK_CHARS``)."""
    exc_type, exc, tb = exc_info
    formatted = traceback.TracebackException(
        exc_type, exc, tb, limit=-TRACEBACK_FRAMES, compact=True, max_group_depth=4
    )
    text = ""
    for piece in formatted.format():
        # The exception's message comes last and may be the long part (a refused value):
        # each piece is cut so that the frames before it still fit.
        text += piece[:TRACEBACK_CHARS]
        if len(text) >= TRACEBACK_CHARS:
            return text[:TRACEBACK_CHARS] + "\n[traceback cut]"
    return text.rstrip("\n")


class BoundedTracebackFormatter(logging.Formatter):
    """A plain ``logging`` formatter whose tracebacks are ``bounded_traceback``'s: for the logs
    that do not go through structlog (gunicorn's own, ``dandizarr_server.gunicorn_logging``),
    and whose lines never hold a read link's secret (docs/embargo.md)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))

    def formatException(self, ei: Any) -> str:
        return bounded_traceback(ei)

    def formatStack(self, stack_info: str) -> str:
        return stack_info[-TRACEBACK_CHARS:]


class SecurityEventsPlain(logging.Filter):
    """Django's security events (``django.security.*``: a request it refused as suspicious, a
    body past DATA_UPLOAD_MAX_MEMORY_SIZE, too many form fields) are a client's doing, answered
    400: one line each, never a traceback, however many a client sends."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("django.security"):
            record.exc_info = None
            record.exc_text = None
        return True


class RedactingProcessorFormatter(structlog.stdlib.ProcessorFormatter):
    """structlog's formatter, its every line (message, request path, traceback, locals) with
    read links' secrets replaced: the one place every log line of the service passes."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _console_traceback(sio: TextIO, exc_info: ExcInfo) -> None:
    sio.write("\n" + bounded_traceback(exc_info))


# exc_info of any event (ours, or a plain logging call's, as Django's request logger makes)
# becomes the bounded text under "exception" before a renderer sees it.
_EXCEPTIONS = structlog.processors.ExceptionRenderer(bounded_traceback)

_STRUCTLOG_CHAIN: list[structlog.typing.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso"),
]


def structured_logging(log_format: str, level: str) -> dict[str, Any]:
    """Configures structlog and returns Django's ``LOGGING`` for ``log_format`` ("json" or
    "console") at ``level``."""
    processors: list[structlog.typing.Processor] = [
        structlog.stdlib.filter_by_level,
        *_STRUCTLOG_CHAIN,
        structlog.stdlib.PositionalArgumentsFormatter(),
        structlog.processors.StackInfoRenderer(),
        _EXCEPTIONS,
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ]
    if structlog.is_configured():
        # Configured again (the settings module imported twice): a logger cached on first use
        # (django-structlog's middleware's) holds the list it was built with, so the new chain
        # goes into that same list; a new list would leave those loggers on the old one, out of
        # reach of structlog.testing.capture_logs, which swaps the configured list's contents.
        configured = structlog.get_config()["processors"]
        configured[:] = processors
        processors = configured
    structlog.configure(
        processors=processors,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "structured": {
                "()": RedactingProcessorFormatter,
                "processor": (
                    structlog.processors.JSONRenderer()
                    if log_format == "json"
                    else structlog.dev.ConsoleRenderer(
                        colors=False, exception_formatter=_console_traceback
                    )
                ),
                # Plain logging calls (ours, Django's, Celery's) get the same fields, and
                # their tracebacks the same bound.
                "foreign_pre_chain": [*_STRUCTLOG_CHAIN, _EXCEPTIONS],
            }
        },
        "filters": {"security_events_plain": {"()": SecurityEventsPlain}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "structured",
                "filters": ["security_events_plain"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {"django.db.backends": {"level": "INFO"}, "botocore": {"level": "WARNING"}},
    }
