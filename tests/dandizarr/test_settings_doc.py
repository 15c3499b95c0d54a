"""docs/settings.md names every environment variable the settings read (issue #51): a setting
added without its row fails here."""

from __future__ import annotations

import re

from tests.dandizarr.test_compose_env import settings_variables_read
from tests.support.compose import REPO


def documented_variables() -> set[str]:
    text = (REPO / "docs" / "settings.md").read_text()
    return set(re.findall(r"`([A-Z][A-Z0-9_]+)`", text))


def test_every_variable_the_settings_read_is_documented() -> None:
    read = settings_variables_read()
    assert "DANDIZARR_STORAGE" in read  # the settings were really loaded
    assert sorted(read - documented_variables()) == []
