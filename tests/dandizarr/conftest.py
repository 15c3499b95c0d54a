"""The ``browser`` fixture of the browser tests here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium
from tests.support.processes import Processes


@pytest.fixture
def browser(processes: Processes, tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium (processes: the browser and its driver run as processes)."""
    yield from chromium(tmp_path)
