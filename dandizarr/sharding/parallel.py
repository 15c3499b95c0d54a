"""One process-wide thread pool for chunk encoding and decoding.

The compressors release the GIL, so two cores really do two chunks at once; one shared pool
(instead of one per call) keeps nested calls from multiplying threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["parallel_map"]

T = TypeVar("T")
R = TypeVar("R")

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="sharding"
            )
        return _pool


_in_worker = threading.local()


def parallel_map(fn: Callable[[T], R], items: Sequence[T], parallel: bool = True) -> list[R]:
    """``[fn(x) for x in items]``, on the shared pool when worth it.

    Calls made from inside a pool worker run inline: a worker blocking on tasks queued behind
    it on the same pool could deadlock, and the outer level already uses every core.
    """
    if not parallel or len(items) < 2 or getattr(_in_worker, "active", False):
        return [fn(x) for x in items]

    def run(x: T) -> R:
        _in_worker.active = True
        try:
            return fn(x)
        finally:
            _in_worker.active = False

    return list(_executor().map(run, items))
