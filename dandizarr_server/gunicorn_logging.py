"""gunicorn's own log (its error log: a worker that failed, an exception a response raised while
it was being sent, which Django never sees) with tracebacks bounded as in every other log
(``dandizarr_server.logging_config``). gunicorn formats them with ``logging.Formatter``: in full,
with the whole message, however long; `dandizarr serve` and the production settings
(``gunicorn_config.py``) name this class as gunicorn's ``logger_class``."""

from __future__ import annotations

from typing import Any

from gunicorn.glogging import Logger

from dandizarr_server.logging_config import BoundedTracebackFormatter


class BoundedTracebackLogger(Logger):
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        # The access log too: its request line and Referer may hold a read link's secret.
        for handler in (*self.error_log.handlers, *self.access_log.handlers):
            plain = handler.formatter
            if plain is not None and not isinstance(plain, BoundedTracebackFormatter):
                handler.setFormatter(BoundedTracebackFormatter(plain._fmt, plain.datefmt))
