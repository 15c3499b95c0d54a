"""How a web worker starts: ``dandizarr serve`` keeps glibc's malloc to a couple of arenas,
unless the operator chose; every web worker is prepared before it serves."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
from django.urls import clear_url_caches

from dandizarr_server import httpserver


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 1


def test_serve_limits_malloc_arenas_unless_malloc_arena_max_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    libc = FakeLibc()
    monkeypatch.setattr(httpserver.ctypes, "CDLL", lambda name: libc)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    httpserver.limit_malloc_arenas()
    assert libc.calls == [(httpserver.M_ARENA_MAX, httpserver.MALLOC_ARENAS)]

    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    httpserver.limit_malloc_arenas()
    assert len(libc.calls) == 1


def test_limiting_arenas_without_mallopt_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libc(name: Any) -> Any:
        raise OSError("no C library here")

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(httpserver.ctypes, "CDLL", no_libc)
    httpserver.limit_malloc_arenas()
    monkeypatch.setattr(httpserver.ctypes, "CDLL", lambda name: object())  # no mallopt
    httpserver.limit_malloc_arenas()


def test_a_web_worker_is_prepared_before_it_serves() -> None:
    """The URLconf is imported and what exists by then frozen (the store's warm-up is
    tests/objectstore's)."""
    clear_url_caches()
    sys.modules.pop("dandizarr_server.urls", None)
    gc.unfreeze()
    try:
        httpserver.prepare_web_worker()
        assert "dandizarr_server.urls" in sys.modules
        assert gc.get_freeze_count() > 1000  # the modules and models loaded by now
    finally:
        gc.unfreeze()
