"""Parametrized fixtures whose params each set up another fixture by name: one storage backend
needs the live server, another moto. ``fixture_params({"local": "local_storage", ...})`` marks
each param with the fixture it sets up; tests/conftest.py adds that fixture (and what it needs)
to the test's fixtures at collection, so the ``live`` mark and pytest-django's database setup
see it before the test runs (a bare ``request.getfixturevalue`` is invisible until then).
The fixture itself still calls ``request.getfixturevalue``: that sets it up in order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

PARAM_FIXTURE = "param_fixture"


def fixture_params(fixtures: Mapping[str, str]) -> list[Any]:
    """One param per ``{value: fixture name}``, marked with the fixture its value sets up."""
    return [
        pytest.param(value, marks=getattr(pytest.mark, PARAM_FIXTURE)(fixture), id=value)
        for value, fixture in fixtures.items()
    ]
