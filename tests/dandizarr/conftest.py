"""The fixtures of the tests here: ``browser``, ``server_install`` (the wheel installed as
production installs it) and ``service_database``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium
from tests.support.processes import Processes
from tests.support.production import create_database, drop_database
from tests.support.wheel_install import Installed, server_installed_once


@pytest.fixture
def browser(processes: Processes, tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium (processes: the browser and its driver run as processes)."""
    yield from chromium(tmp_path)


@pytest.fixture
def server_install(processes: Processes) -> Installed:
    """The project's wheel installed with the image's extras into a venv of its own (built once
    per version of the sources, whichever test or worker asks first)."""
    return server_installed_once()


@pytest.fixture
def service_database() -> Iterator[str]:
    """A new PostgreSQL database on the suite's server (``make test``'s DATABASE_URL); its URL."""
    server = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"dandizarr_service_{uuid.uuid4().hex[:12]}"
    yield create_database(server, name)
    drop_database(server, name)
