"""Where the service's secret key comes from, and the files ``dandizarr serve`` keeps private.

The key signs the local storage backend's URLs (and Django's sessions), so it is never a
constant anyone else knows:

- ``DANDIZARR_SECRET_KEY`` from the environment, shared by the web service and the Celery
  workers (production). ``dandizarr_server.wsgi`` and ``dandizarr_server.celery`` refuse to start
  without it.
- ``dandizarr serve`` (the embedded mode, ``DANDIZARR_EMBEDDED=1``): a random key created on first
  start and kept in the data directory (``secret-key``, mode 0600), so restarts keep URLs valid.
- Anything else (a management command, mypy loading the settings): a random key of this process
  alone, so whatever it signs no other process accepts.

This module imports no Django, so the settings can use it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

EMBEDDED_VARIABLE = "DANDIZARR_EMBEDDED"
SECRET_KEY_VARIABLE = "DANDIZARR_SECRET_KEY"
SECRET_KEY_FILE = "secret-key"

# Where SECRET_KEY came from (settings.SECRET_KEY_SOURCE).
FROM_ENVIRONMENT = "environment"
FROM_DATA_DIR = "data directory"
FROM_THIS_PROCESS = "this process"


def mark_embedded() -> None:
    """Called by ``dandizarr serve`` before Django loads its settings."""
    os.environ[EMBEDDED_VARIABLE] = "1"


# The admin's API token, in the data directory: written by `bootstrap_admin`, named on the home
# page to whoever may see the server's paths.
ADMIN_TOKEN_FILE = "admin-token"


def write_private_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner alone: the one way the service keeps a
    secret in a file (the secret key, the admin's token and password).

    A new file, created 0600 (``mkstemp``: whatever the umask), written whole, then renamed over
    ``path``. Written in place, an existing file would keep its mode until a chmod after the
    open, anyone who had it open (while it was readable to them) would read the new secret
    through that descriptor, a symlink at ``path`` would be followed, and a crash would leave
    half a secret; a rename does none of these."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def private_file_value(path: Path, make: Callable[[], str]) -> tuple[str, bool]:
    """The value kept in ``path``, made by ``make`` and written there (0600) when absent;
    and whether it was made now."""
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value, False
    value = make()
    write_private_file(path, value)
    return value, True


def secret_key(environment_value: str | None, embedded: bool, data_dir: Path) -> tuple[str, str]:
    """The secret key and where it came from (``FROM_*``)."""
    if environment_value:
        return environment_value, FROM_ENVIRONMENT
    if embedded:
        key, _ = private_file_value(data_dir / SECRET_KEY_FILE, lambda: secrets.token_urlsafe(50))
        return key, FROM_DATA_DIR
    return secrets.token_urlsafe(50), FROM_THIS_PROCESS


class MissingSecretKey(RuntimeError):
    """A production process started without ``DANDIZARR_SECRET_KEY``."""


def require_shared_secret_key(source: str, process: str) -> None:
    """Refuse to run ``process`` (the web service, a worker) with a key of its own: every
    process must verify what the others sign."""
    if source != FROM_THIS_PROCESS:
        return
    raise MissingSecretKey(
        f"{process} refuses to start: {SECRET_KEY_VARIABLE} is not set. Set it to the same long "
        "random string for the web service and every Celery process, e.g. "
        f"{SECRET_KEY_VARIABLE}=$(openssl rand -hex 32) (dandizarr serve keeps its own key in "
        "its data directory instead)."
    )
