"""Celery's work without Celery, for ``dandizarr serve`` (no broker): tasks run in one
background thread of the server process, in the order they were scheduled, and the beat
schedule's periodic tasks are sent to that thread on time.

Running tasks inline (Celery's eager mode) put each batch's tree update on the path of the
request that completed it, while the client's PUTs waited; in a thread, the update of batch N
runs while batch N+1 uploads. Tree updates are idempotent and serialized by the archive's
TreeLock, and a scheduled update still queued for an archive takes in every batch pending by
the time it runs, so a second one is not queued beside it. A task that fails is logged and
left to the periodic sweeps (resume-stalled-tree-updates, finish-batch-ends), as a lost
Celery message is.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

from celery import current_app
from django.db import connections

logger = logging.getLogger(__name__)

TaskCall = tuple[str, tuple[int, ...]]


class BackgroundWorker:
    """One thread running scheduled tasks one at a time; queued duplicates are coalesced."""

    def __init__(self) -> None:
        self._queue: queue.Queue[TaskCall] = queue.Queue()
        self._queued: set[TaskCall] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition(self._lock)
        self._running = 0

    def submit(self, task_name: str, args: tuple[int, ...], countdown: float | None = None) -> None:
        if countdown:
            timer = threading.Timer(countdown, self.submit, (task_name, args))
            timer.daemon = True
            timer.start()
            return
        call = (task_name, args)
        with self._lock:
            if call in self._queued:
                return  # the queued run will see whatever this one would have
            self._queued.add(call)
            self._queue.put(call)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="dandizarr-tasks", daemon=True
                )
                self._thread.start()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or running (for a clean stop); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._queued and not self._running, timeout)

    def _run(self) -> None:
        while True:
            call = self._queue.get()
            with self._lock:
                # Taken off before it runs: a batch completed meanwhile queues another run.
                self._queued.discard(call)
                self._running += 1
            task_name, args = call
            try:
                current_app.signature(task_name, args=args).apply(throw=True)
            except Exception:
                logger.exception("background task %s%r failed; the sweeps retry it", *call)
            finally:
                connections.close_all()  # this thread's own connections
                with self._idle:
                    self._running -= 1
                    self._idle.notify_all()


WORKER = BackgroundWorker()


def start_periodic_tasks(schedule: Mapping[str, Mapping[str, Any]]) -> threading.Event:
    """Send each entry of a Celery beat schedule (``{"task": name, "schedule": seconds}``) to
    the background worker every ``schedule`` seconds, the first time one period from now;
    until the returned event is set."""
    stop = threading.Event()

    def beat() -> None:
        due = {
            name: time.monotonic() + float(entry["schedule"]) for name, entry in schedule.items()
        }
        while not stop.is_set():
            now = time.monotonic()
            for name, entry in schedule.items():
                if now >= due[name]:
                    WORKER.submit(str(entry["task"]), ())
                    due[name] = now + float(entry["schedule"])
            stop.wait(max(0.1, min(due.values()) - time.monotonic()))

    threading.Thread(target=beat, name="dandizarr-beat", daemon=True).start()
    return stop
