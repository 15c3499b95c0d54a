"""Backup and restore (docs/deploying.md): a database dump (pg_dump) plus the bucket. Restored
into a fresh database against the same storage, the audit finds no drift. Restored from an
older dump (objects newer than the dump in storage), the audit in report-only mode names the
archive made since as unreferenced and the archive changed since as drifted, and changes
nothing; its repair then brings the tree to storage."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.support.api import Actor, create_archive, upload
from tests.support.ci import skip_here_fail_in_ci
from tests.support.production import create_database, database_url_named, drop_database

REPO = Path(__file__).resolve().parents[2]


def _dump(path: Path) -> None:
    url = database_url_named(os.environ["DATABASE_URL"], connection.settings_dict["NAME"])
    subprocess.run(["pg_dump", "-Fc", "-f", str(path), url], check=True, timeout=120)


def _restore(dump: Path, name: str) -> str:
    url = create_database(os.environ["DATABASE_URL"], name)
    subprocess.run(["pg_restore", "--no-owner", "-d", url, str(dump)], check=True, timeout=120)
    return url


def _audit(database_url: str, storage: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", "audit_zarr", *args],
        cwd=REPO,
        env={
            **os.environ,
            "DATABASE_URL": database_url,
            "DANDIZARR_STORAGE": "local",
            "DANDIZARR_LOCAL_STORAGE_DIR": str(storage),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _files(storage: Path) -> dict[str, float]:
    return {
        str(p.relative_to(storage)): p.stat().st_mtime for p in storage.rglob("*") if p.is_file()
    }


def test_restore_then_audit(
    owner: Actor, dandiset: str, local_storage: str, settings: Any, tmp_path: Path
) -> None:
    storage = Path(settings.DANDIZARR_LOCAL_STORAGE_DIR)
    first = create_archive(owner, dandiset, "first.zarr", layout="loose")
    assert upload(owner.client, first, {"a/0": b"zero", "a/1": b"one"}).status_code == 200
    older = tmp_path / "older.dump"
    _dump(older)
    assert upload(owner.client, first, {"a/2": b"two"}).status_code == 200
    later = create_archive(owner, dandiset, "later.zarr", layout="loose")
    assert upload(owner.client, later, {"x": b"later"}).status_code == 200
    newest = tmp_path / "newest.dump"
    _dump(newest)

    names = [f"restore_{os.getpid()}_newest", f"restore_{os.getpid()}_older"]
    try:
        current = _restore(newest, names[0])
        report = _audit(current, storage, "--report-only")
        assert "0 archive(s) had drift" in report and "0 unreferenced" in report, report

        restored = _restore(older, names[1])
        before = _files(storage)
        report = _audit(restored, storage, "--report-only")
        assert f"{later}: UNREFERENCED" in report and "1 unreferenced" in report, report
        assert f"{first}: DRIFT found (nothing changed)" in report, report
        assert _files(storage) == before  # nothing written, nothing deleted

        repaired = _audit(restored, storage)
        assert f"{first}: DRIFT repaired" in repaired
        assert "0 archive(s) had drift" in _audit(restored, storage, "--report-only")
    finally:
        for name in names:
            drop_database(os.environ["DATABASE_URL"], name)


@pytest.fixture(autouse=True)
def _needs_pg_tools() -> None:
    import shutil

    if not (shutil.which("pg_dump") and shutil.which("pg_restore")):
        skip_here_fail_in_ci("pg_dump and pg_restore (postgresql-client) are not installed")
