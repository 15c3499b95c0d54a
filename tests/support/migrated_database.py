"""A migrated database for each production-shape deployment, copied from a template.

Migrating a fresh database is a Django process of its own running every migration (most of ten
seconds of CPU); ``CREATE DATABASE ... TEMPLATE`` copies an already migrated one in a fraction
of a second. The template is named by a digest of what decides its schema (the project's
migration files, the installed distributions and their versions), so a change to any of them
makes (once) a new template instead of reusing a stale one. Concurrent runs (xdist workers,
other checkouts) are safe: one builds it under an advisory lock, under a name of its own, and
renames it into place when migrated (a build that dies midway leaves no template).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PREFIX = "dandizarr_migrated_"


def schema_digest() -> str:
    """What decides the migrated schema: every migration file of the project (its path and
    bytes) and every installed distribution with its version (Django's and other apps'
    migrations come from them: the names of the environment's ``*.dist-info`` directories,
    which carry both; listing them is much faster than importlib.metadata)."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "dandizarr_server").rglob("migrations/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    for name in sorted(
        entry
        for entry in os.listdir(sysconfig.get_paths()["purelib"])
        if entry.endswith(".dist-info")
    ):
        digest.update(name.encode() + b"\n")
    return digest.hexdigest()[:16]


def _database_url_named(database_url: str, name: str) -> str:
    base, _, _ = database_url.rpartition("/")
    return f"{base}/{name}"


def _exists(conn: psycopg.Connection, name: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None
    )


def _build_template(server_url: str, template: str, env: dict[str, str]) -> None:
    """Migrate a database under a name of this process's, then rename it to ``template``
    (atomic: nobody ever copies a half-migrated template)."""
    building = f"{template}_build_{os.getpid()}_{time.monotonic_ns() % 10**6}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import django; django.setup(); from django.core.management import call_command; "
                "call_command('migrate', interactive=False, verbosity=0)",
            ],
            cwd=ROOT,
            env={**env, "DATABASE_URL": _database_url_named(server_url, building)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"migrate failed:\n{done.stdout}{done.stderr}")
        with psycopg.connect(server_url, autocommit=True) as conn:
            if not _exists(conn, template):
                conn.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(building), sql.Identifier(template)
                    )
                )
    except psycopg.errors.DuplicateDatabase:
        pass  # another process renamed its copy first: use that one
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(building))
            )


def create_migrated_database(server_url: str, name: str, env: dict[str, str]) -> str:
    """Database ``name`` (dropped first if it exists), migrated: a copy of the template of the
    current schema, which is built first if missing (``env``: the settings a Django process of
    the deployment runs with). Returns its URL."""
    digest = schema_digest()
    template = TEMPLATE_PREFIX + digest
    with psycopg.connect(server_url, autocommit=True) as conn:
        if not _exists(conn, template):
            # One process builds it; the others (xdist workers starting their stacks at once)
            # wait for it rather than each migrating a copy of their own.
            lock = int(digest, 16) % 2**63
            conn.execute("SELECT pg_advisory_lock(%s)", (lock,))
            try:
                if not _exists(conn, template):
                    _build_template(server_url, template, env)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))
    create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        sql.Identifier(name), sql.Identifier(template)
    )
    deadline = time.monotonic() + 60
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        while True:
            try:
                conn.execute(create)
                break
            except psycopg.errors.ObjectInUse:
                # The template is being copied by another CREATE DATABASE ("source database
                # is being accessed by other users"): PostgreSQL refuses rather than waits.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    return _database_url_named(server_url, name)
