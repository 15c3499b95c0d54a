"""The systemd units the project ships (deploy/systemd/): their commands, as the tests run them."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
# Where docs/deploying.md installs the wheel's virtual environment; the units name its bin/.
INSTALLED_BIN = "/opt/dandizarr/bin/"


def unit(name: str) -> configparser.ConfigParser:
    parsed = configparser.ConfigParser(strict=False, interpolation=None)
    parsed.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parsed.read_string((UNITS / name).read_text())
    return parsed


def exec_start(name: str) -> list[str]:
    """The unit's ``ExecStart``, split, its program named without the install's directory."""
    words = shlex.split(unit(name)["Service"]["ExecStart"])
    assert words[0].startswith(INSTALLED_BIN), words[0]
    return [words[0].removeprefix(INSTALLED_BIN), *words[1:]]


def with_option(command: list[str], option: str, value: str) -> list[str]:
    """``command`` with ``option``'s value replaced (it must be there)."""
    index = command.index(option)
    return [*command[: index + 1], value, *command[index + 2 :]]
