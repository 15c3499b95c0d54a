"""Whether the service's dependencies answer (``/readyz``): the database, the broker and
storage, each asked by a check on a thread of its own and waited for at most
``READY_TIMEOUT_SECONDS`` from that check's start.

A probe answers within that limit whatever hangs: it never waits for a check's thread to end.
Stuck checks do not pile up: at most one check of each kind is in flight per process; a probe
that finds one running joins it instead of starting another (concurrent probes share it), and
one that has already run past its limit (an earlier probe's) is "no answer" at once. Checks run
on daemon threads, which never hold up the process's exit. Storage is asked through a store
whose requests give up after the limit (``storage.get_probe_store``), so a stuck storage check
ends soon and the service is ready again a probe or two after storage answers.

What is down is named, never where it is: the probe is anonymous, and an error's text carries
hosts, ports and bucket names. The full error goes to the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection
from kombu import Connection

from dandizarr_server.zarr_api.domain.keys import READINESS_PROBE_KEY
from dandizarr_server.zarr_api.runtime.storage import get_probe_store

logger = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 3.0


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _broker() -> None:
    if not settings.CELERY_BROKER_URL:
        return  # no broker: tasks run in this process (dandizarr serve)
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=READY_TIMEOUT_SECONDS) as broker:
        broker.ensure_connection(max_retries=1)


def _storage() -> None:
    get_probe_store(READY_TIMEOUT_SECONDS).head(READINESS_PROBE_KEY)  # absent is an answer too


CHECKS: dict[str, Callable[[], None]] = {
    "database": _database,
    "broker": _broker,
    "storage": _storage,
}


@dataclass
class _Run:
    """One run of a check, shared by every probe that asks while it is in flight."""

    started: float = field(default_factory=time.monotonic)
    ended: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None


_in_flight: dict[str, _Run] = {}
_in_flight_lock = threading.Lock()


def dependencies_down() -> list[str]:
    """What does not answer, each as ``"<name>: <how>"`` ("no answer within 3 s", or the
    error's kind); empty when everything answers. Returns within ``READY_TIMEOUT_SECONDS``."""
    runs = {name: _run_of(name, check) for name, check in CHECKS.items()}
    down: list[str] = []
    for name, run in runs.items():
        if not run.ended.wait(max(0.0, run.started + READY_TIMEOUT_SECONDS - time.monotonic())):
            down.append(f"{name}: no answer within {READY_TIMEOUT_SECONDS:g} s")
        elif run.error is not None:
            down.append(f"{name}: {type(run.error).__name__}")
    return down


def _run_of(name: str, check: Callable[[], None]) -> _Run:
    """The check's run in flight, or a new one started."""
    with _in_flight_lock:
        run = _in_flight.get(name)
        if run is None:
            run = _in_flight[name] = _Run()
            threading.Thread(
                target=_execute, args=(name, check, run), name=f"readiness-{name}", daemon=True
            ).start()
    return run


def _execute(name: str, check: Callable[[], None], run: _Run) -> None:
    try:
        check()
    except Exception as error:
        run.error = error
        logger.warning("readiness: %s is down: %s: %s", name, type(error).__name__, error)
    finally:
        connection.close()  # this thread's own, if the check opened one
        with _in_flight_lock:
            if _in_flight.get(name) is run:
                del _in_flight[name]
        run.ended.set()
