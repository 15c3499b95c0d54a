"""The fixtures of the tests here: ``browser``, and ``server_install`` (the wheel installed as
production installs it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium
from tests.support.processes import Processes
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
