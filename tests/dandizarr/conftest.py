"""The ``browser`` fixture of the browser tests here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    yield from chromium(tmp_path)
