"""docker-compose.yml as the compose tests read it: parsed, a service's environment, and
compose's variable interpolation."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def load_compose() -> dict[str, Any]:
    # safe_load resolves the YAML anchors and `<<` merge keys the file uses.
    compose: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return compose


def service_environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's ``environment``, in either of compose's forms (mapping or ``NAME=value``)."""
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        pairs = (item.partition("=") for item in environment)
        return {name: value for name, _, value in pairs}
    return {str(name): "" if value is None else str(value) for name, value in environment.items()}


_INTERPOLATION = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: str, host_environment: Mapping[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME:?error}`` and ``$$``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        current = host_environment.get(name)
        if op in (":-", "-"):
            return current if current else arg
        if op in (":?", "?") and not current:
            raise ValueError(f"{name}: {arg}")
        return current or ""

    return _INTERPOLATION.sub(replace, value)
