"""Where previews are drawn: a few threads of their own, never the request threads.

A preview reads storage and decodes chunks; an anonymous visitor can ask for one. So renders
run in ``DANDIZARR_PREVIEW_WORKERS`` threads with at most ``DANDIZARR_PREVIEW_QUEUE`` more
waiting, each for at most ``DANDIZARR_PREVIEW_WAIT_SECONDS`` until a render thread takes it;
a full queue, or a wait that runs out, is ``RendererBusy`` (the view answers 503 with
``Retry-After``) instead of a request thread blocked behind renders for as long as they take.
Each render closes its database connections when it ends (the pool's threads outlive
requests).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connections
from django.dispatch import receiver

T = TypeVar("T")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_slots: threading.BoundedSemaphore | None = None


class RendererBusy(Exception):
    """Every render slot is taken: try again in ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the preview renderer is busy; try again in {retry_after} s")
        self.retry_after = retry_after


def _started() -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore]:
    global _pool, _slots
    with _lock:
        if _pool is None or _slots is None:
            workers = max(1, settings.DANDIZARR_PREVIEW_WORKERS)
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preview")
            _slots = threading.BoundedSemaphore(workers + max(0, settings.DANDIZARR_PREVIEW_QUEUE))
        return _pool, _slots


def render(work: Callable[[], T]) -> T:
    """``work()`` on a render thread, waited for; ``RendererBusy`` when no place in the queue
    is free, or no render thread takes the work within ``DANDIZARR_PREVIEW_WAIT_SECONDS``."""
    pool, slots = _started()
    retry_after = max(1, settings.DANDIZARR_PREVIEW_SECONDS)
    if not slots.acquire(blocking=False):
        raise RendererBusy(retry_after)
    started = threading.Event()

    def run() -> T:
        started.set()
        try:
            return work()
        finally:
            connections.close_all()  # this thread's own
            slots.release()

    future = pool.submit(run)
    if not started.wait(max(0, settings.DANDIZARR_PREVIEW_WAIT_SECONDS)) and future.cancel():
        slots.release()  # never ran: its place is free again
        raise RendererBusy(retry_after)
    return future.result()


@receiver(setting_changed)
def _on_setting_changed(*, setting: str, **kwargs: object) -> None:
    """Tests size the pool: the next render starts a new one (running renders finish)."""
    global _pool, _slots
    if setting in {"DANDIZARR_PREVIEW_WORKERS", "DANDIZARR_PREVIEW_QUEUE"}:
        with _lock:
            _pool, _slots = None, None
