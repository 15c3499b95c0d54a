"""Django's SQLite backend, with the write lock of IMMEDIATE transactions handed over within
the process instead of polled for.

SQLite has no row locks: each IMMEDIATE transaction takes the database's write lock when it
begins. A connection that finds it taken sleeps and retries (1, 2, 5, 10, 15, 20, 25 ms...),
so a batch start waiting behind a tree update of 20 ms woke up to 13 ms after it ended. Here
the transactions of one process also hold a process-wide lock from ``BEGIN`` to their end, so
the next one starts the moment the last one ends. It is the same lock, taken at the same
moment, so nothing about what runs alone changes; another process (a management command)
still meets SQLite's own lock and waits for it as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db.backends.sqlite3 import base

# One per database file, shared by every connection (one per thread) of this process.
_write_locks: dict[str, threading.Lock] = {}
_write_locks_guard = threading.Lock()


def _write_lock(name: str) -> threading.Lock:
    with _write_locks_guard:
        return _write_locks.setdefault(name, threading.Lock())


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._write_lock_held: threading.Lock | None = None

    def _start_transaction_under_autocommit(self) -> None:
        lock = _write_lock(str(self.settings_dict["NAME"]))
        # As long as SQLite itself would wait; then BEGIN meets SQLite's lock as it would.
        timeout = float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        acquired = lock.acquire(timeout=timeout)
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]  # private in the stubs
        except BaseException:
            if acquired:
                lock.release()
            raise
        if acquired:
            self._write_lock_held = lock

    def _release_write_lock(self) -> None:
        lock, self._write_lock_held = self._write_lock_held, None
        if lock is not None:
            lock.release()

    # Whichever way a transaction ends, the process's lock goes with it.
    def _commit(self) -> None:
        self._ending(super()._commit)  # type: ignore[misc]  # private in the stubs

    def _rollback(self) -> None:
        self._ending(super()._rollback)  # type: ignore[misc]  # private in the stubs

    def _close(self) -> None:
        self._ending(super()._close)  # type: ignore[misc]  # private in the stubs

    def _ending(self, end: Callable[[], None]) -> None:
        try:
            end()
        finally:
            self._release_write_lock()
