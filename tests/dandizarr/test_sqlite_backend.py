"""dandizarr_server.sqlite: the process-wide write lock is held exactly while a transaction is
open."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import ConnectionHandler

from dandizarr_server.sqlite import base


@pytest.fixture
def sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, django_db_blocker: Any
) -> Iterator[BaseDatabaseWrapper]:
    """A connection of this backend, the one ``transaction.atomic()`` uses in this thread."""
    name = str(tmp_path / "db.sqlite3")
    options = {"transaction_mode": "IMMEDIATE", "timeout": 30}
    handler = ConnectionHandler(
        {"default": {"ENGINE": "dandizarr_server.sqlite", "NAME": name, "OPTIONS": options}}
    )
    local = threading.local()

    def connection(using: str | None = None) -> BaseDatabaseWrapper:
        if not hasattr(local, "connection"):
            local.connection = handler.create_connection("default")
        return local.connection

    monkeypatch.setattr(transaction, "get_connection", connection)
    with django_db_blocker.unblock():  # a file of its own, not the test database
        with connection().cursor() as cursor:
            cursor.execute("CREATE TABLE t (n INTEGER)")
        yield connection()
        connection().close()


def _held(connection: BaseDatabaseWrapper) -> bool:
    return base._write_lock(str(connection.settings_dict["NAME"])).locked()


def test_the_lock_is_held_from_begin_to_commit_or_rollback(sqlite: BaseDatabaseWrapper) -> None:
    assert not _held(sqlite)
    with transaction.atomic():
        assert _held(sqlite)
        with transaction.atomic():  # a savepoint: no second BEGIN, no second acquire
            sqlite.cursor().execute("INSERT INTO t VALUES (1)")
        assert _held(sqlite)
    assert not _held(sqlite)
    with pytest.raises(RuntimeError), transaction.atomic():
        sqlite.cursor().execute("INSERT INTO t VALUES (2)")
        raise RuntimeError("rolled back")
    assert not _held(sqlite)
    with sqlite.cursor() as cursor:
        cursor.execute("SELECT n FROM t")
        assert cursor.fetchall() == [(1,)]


def test_a_second_thread_begins_once_the_first_has_committed(sqlite: BaseDatabaseWrapper) -> None:
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        inside.wait()
        with transaction.atomic():
            transaction.get_connection().cursor().execute("INSERT INTO t VALUES (2)")
            order.append("second")
        transaction.get_connection().close()

    thread = threading.Thread(target=second)
    thread.start()
    with transaction.atomic():
        inside.set()
        sqlite.cursor().execute("INSERT INTO t VALUES (1)")
        thread.join(timeout=0.2)  # it is waiting for this transaction
        order.append("first")
    thread.join()
    assert order == ["first", "second"]
    assert not _held(sqlite)


def test_closing_a_connection_in_a_transaction_releases_the_lock(
    sqlite: BaseDatabaseWrapper,
) -> None:
    transaction.atomic().__enter__()
    assert _held(sqlite)
    sqlite.close()
    assert not _held(sqlite)
