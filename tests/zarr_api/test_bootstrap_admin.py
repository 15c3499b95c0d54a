"""``bootstrap_admin`` (run by ``dandizarr serve`` and by compose's web service on every start)
keeps the admin's token and password in files of the data directory, readable by their owner
alone, and prints where they are, never them: its output is the container's log under compose
(issue #35, finding 5)."""

from __future__ import annotations

import os
import stat
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command


def _bootstrap() -> str:
    out, err = StringIO(), StringIO()
    call_command("bootstrap_admin", stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def _private(path: Path) -> str:
    assert path.is_file() and not path.is_symlink()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return path.read_text().strip()


def test_the_output_says_where_the_secrets_are_never_them(
    db: None, settings: Any, tmp_path: Path
) -> None:
    settings.DATA_DIR = tmp_path
    first = _bootstrap()
    token, password = _private(tmp_path / "admin-token"), _private(tmp_path / "admin-password")
    assert token not in first and password not in first
    assert str(tmp_path / "admin-token") in first
    assert str(tmp_path / "admin-password") in first
    again = _bootstrap()  # every start: the same files, still nothing secret printed
    assert _private(tmp_path / "admin-token") == token
    assert token not in again and password not in again
    assert str(tmp_path / "admin-token") in again


def test_secrets_are_written_to_new_private_files(db: None, settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    # A token file left readable to others, and a reader who opened it then.
    stale = tmp_path / "admin-token"
    stale.write_text("old\n")
    stale.chmod(0o644)
    # A password "file" that is a link to a file of someone else's.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("theirs\n")
    elsewhere.chmod(0o644)
    (tmp_path / "admin-password").symlink_to(elsewhere)
    with stale.open() as reader:
        _bootstrap()
        # The reader's descriptor is on the old file: the new token never reaches it.
        assert reader.read() == "old\n"
    assert _private(stale) != "old"
    assert _private(tmp_path / "admin-password")  # a file of its own, 0600
    assert elsewhere.read_text() == "theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "admin-password",
        "admin-token",
        "elsewhere",
    ]  # no temporary file left behind


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_a_new_secret_file_is_private_whatever_the_umask(
    db: None, settings: Any, tmp_path: Path, umask: int
) -> None:
    settings.DATA_DIR = tmp_path / "data"
    before = os.umask(umask)
    try:
        _bootstrap()
    finally:
        os.umask(before)
    assert _private(tmp_path / "data" / "admin-token")
    assert _private(tmp_path / "data" / "admin-password")
