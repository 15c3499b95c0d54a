"""Another client of the test database: a psycopg connection of its own, outside Django's."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connection


def another_connection(*, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection of its own to the test database (another client of PostgreSQL)."""
    database = connection.settings_dict
    return psycopg.connect(
        host=database["HOST"] or "127.0.0.1",
        port=database["PORT"] or 5432,
        user=database["USER"] or "postgres",
        dbname=database["NAME"],
        autocommit=autocommit,
    )
