"""What a rollback-per-test database (pytest-django's ``db``) needs to test what production does.

On-commit work runs when it would in production: at the end of the outermost ``atomic`` block
of the code under test, or at once outside any. The test's own wrapping blocks (Django's
TestCase marks them ``_from_testcase``) never commit, so without this, work scheduled with
``transaction.on_commit`` (tree updates, deletions, metrics) would never run in such a test;
``captureOnCommitCallbacks(execute=True)`` runs it only when its block ends, later than
production does.

Other threads are refused: the test's rows are uncommitted, so a thread of the code (the pages'
render pool, the background worker) would read none of them, and a test asserting that
something is absent would pass for that wrong reason. ``ThreadQueries`` records the queries of
other threads while such a test runs; the conftest fails the test, naming ``transactional_db``.
A ``SELECT 1`` (the readiness probe's) reads no row and is let through.

Both are inert in a ``transactional_db`` test, whose rows are committed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

logger = logging.getLogger(__name__)

_atomic_exit = transaction.Atomic.__exit__
_on_commit = BaseDatabaseWrapper.on_commit
_execute = CursorWrapper.execute
_executemany = CursorWrapper.executemany


class ThreadQueries:
    """While a rollback test runs (``watching``), the queries other threads send."""

    test_thread: threading.Thread | None = None
    seen: list[str] = []

    @classmethod
    def watch(cls) -> None:
        cls.test_thread, cls.seen = threading.current_thread(), []

    @classmethod
    def stop(cls) -> list[str]:
        seen, cls.test_thread, cls.seen = cls.seen, None, []
        return seen

    @classmethod
    def note(cls, sql: object) -> None:
        thread = threading.current_thread()
        if cls.test_thread is None or thread is cls.test_thread:
            return
        if str(sql).strip().upper() != "SELECT 1":
            cls.seen.append(f"{thread.name}: {str(sql)[:80]}")


def _execute_noted(self: CursorWrapper, sql: Any, params: Any = None) -> Any:
    ThreadQueries.note(sql)
    return _execute(self, sql, params)


def _executemany_noted(self: CursorWrapper, sql: Any, param_list: Any) -> Any:
    ThreadQueries.note(sql)
    return _executemany(self, sql, param_list)


def _only_test_blocks(connection: BaseDatabaseWrapper) -> bool:
    """Inside the test's wrapping blocks and no block of the code: what autocommit is in
    production."""
    blocks = connection.atomic_blocks
    return bool(connection.in_atomic_block and blocks) and all(
        block._from_testcase for block in blocks
    )


def _run(func: Callable[[], Any], robust: bool) -> None:
    if not robust:
        func()
        return
    try:
        func()
    except Exception:
        logger.exception("on_commit callback %s failed", getattr(func, "__qualname__", func))


def _on_commit_as_committed(
    self: BaseDatabaseWrapper, func: Callable[[], Any], robust: bool = False
) -> None:
    if _only_test_blocks(self):
        _run(func, robust)
    else:
        _on_commit(self, func, robust)


def _exit_as_committed(self: transaction.Atomic, exc_type: Any, exc_value: Any, tb: Any) -> Any:
    connection = transaction.get_connection(self.using)
    result = _atomic_exit(self, exc_type, exc_value, tb)
    if (
        exc_type is None
        and not self._from_testcase
        and not connection.needs_rollback
        and _only_test_blocks(connection)
    ):
        # The code's outermost block ended: in production its transaction committed now.
        while connection.run_on_commit:
            _, func, robust = connection.run_on_commit.pop(0)
            _run(func, robust)
    return result


def install() -> None:
    transaction.Atomic.__exit__ = _exit_as_committed  # type: ignore[method-assign]
    BaseDatabaseWrapper.on_commit = _on_commit_as_committed  # type: ignore[method-assign]
    CursorWrapper.execute = _execute_noted  # type: ignore[method-assign]
    CursorWrapper.executemany = _executemany_noted  # type: ignore[method-assign]


def uninstall() -> None:
    transaction.Atomic.__exit__ = _atomic_exit  # type: ignore[method-assign]
    BaseDatabaseWrapper.on_commit = _on_commit  # type: ignore[method-assign]
    CursorWrapper.execute = _execute  # type: ignore[method-assign]
    CursorWrapper.executemany = _executemany  # type: ignore[method-assign]
