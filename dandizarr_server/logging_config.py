"""Structured logs (structlog, with django-structlog's request and task events): one event per
request and per task, as JSON lines or readable console lines. Plain logging calls (ours,
Django's, Celery's) get the same fields."""

from __future__ import annotations

from typing import Any

import structlog

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
        structlog.processors.format_exc_info,
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
                "()": structlog.stdlib.ProcessorFormatter,
                "processor": (
                    structlog.processors.JSONRenderer()
                    if log_format == "json"
                    else structlog.dev.ConsoleRenderer(colors=False)
                ),
                # Plain logging calls (ours, Django's, Celery's) get the same fields.
                "foreign_pre_chain": _STRUCTLOG_CHAIN,
            }
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {"django.db.backends": {"level": "INFO"}, "botocore": {"level": "WARNING"}},
    }
