"""Reading the settings' environment variables (12-factor), typed, with every name read
recorded so a test can check that deployment files set no variable that is silently ignored."""

from __future__ import annotations

import os

# Every variable the settings read, so a test can check that deployment files set no
# variable that is silently ignored.
ENVIRONMENT_VARIABLES_READ: set[str] = set()


def env(name: str, default: str | None = None) -> str | None:
    ENVIRONMENT_VARIABLES_READ.add(name)
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_str(name: str, default: str) -> str:
    value = env(name, default)
    assert value is not None
    return value


def env_int(name: str, default: int) -> int:
    raw = env(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as error:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from error


def env_bool(name: str, default: bool) -> bool:
    raw = env(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]
