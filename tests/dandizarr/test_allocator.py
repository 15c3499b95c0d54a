"""glibc malloc in the service's processes (dandizarr_server.allocator): the settings each
process starts with, unless the operator chose, and memory freed after big work."""

from __future__ import annotations

import ctypes
import gc
from typing import Any

import pytest

from dandizarr_server import allocator, gunicorn_config, httpserver


class RecordingLibc:
    """A C library that records what is asked of it."""

    def __init__(self) -> None:
        self.mallopts: list[tuple[int, int]] = []
        self.trims = 0

    def mallopt(self, parameter: int, value: int) -> int:
        self.mallopts.append((parameter, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.trims += 1
        return 1


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> RecordingLibc:
    recording = RecordingLibc()
    monkeypatch.setattr(allocator, "_libc", lambda: recording)
    for _, _, variable in allocator.SETTINGS:
        monkeypatch.delenv(variable, raising=False)
    return recording


def test_malloc_is_set_up_unless_the_operator_chose(
    libc: RecordingLibc, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocator.configure_malloc()
    assert libc.mallopts == [
        (allocator.M_ARENA_MAX, allocator.MALLOC_ARENAS),
        (allocator.M_MMAP_THRESHOLD, allocator.MMAP_THRESHOLD),
    ]
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    allocator.configure_malloc()
    assert len(libc.mallopts) == 2


def test_without_glibc_nothing_is_set_or_released(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_libc", lambda: None)  # no C library
    allocator.configure_malloc()
    allocator.release_freed_memory()
    monkeypatch.setattr(allocator, "_libc", lambda: object())  # one without these functions
    allocator.configure_malloc()
    allocator.release_freed_memory()


def test_memory_is_released_after_a_request_with_a_big_body(libc: RecordingLibc) -> None:
    def request_of(length: str | None) -> None:
        environ = {} if length is None else {"CONTENT_LENGTH": length}
        allocator.after_request(None, None, environ, None)

    for small in (None, "", "12", str(allocator.BIG_REQUEST_BYTES - 1), "not a number"):
        request_of(small)
    assert libc.trims == 0
    request_of(str(allocator.BIG_REQUEST_BYTES))
    assert libc.trims == 1


def test_every_service_process_sets_malloc_up_and_releases_after_big_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """dandizarr serve's gunicorn, the production gunicorn config and Celery's workers and
    tasks all go through the allocator module."""
    assert gunicorn_config.post_request is allocator.after_request
    assert httpserver.after_request is allocator.after_request
    from celery import signals

    receivers = [r() for _, r in signals.task_postrun.receivers]
    assert any(getattr(r, "__name__", "") == "_release_freed_memory" for r in receivers)
    receivers = [r() for _, r in signals.worker_init.receivers]
    assert any(getattr(r, "__name__", "") == "_configure_malloc" for r in receivers)


def test_a_celery_worker_freezes_what_it_made_before_its_first_task() -> None:
    """The solo pool's worker when it is ready, and each prefork child once forked, leave their
    startup objects out of the collector's full passes, as web workers do
    (tests/dandizarr/test_web_worker_startup.py)."""
    from celery import signals

    for signal in (signals.worker_ready, signals.worker_process_init):
        receivers = [r() for _, r in signal.receivers]
        freezing = [r for r in receivers if getattr(r, "__name__", "") == "_freeze_startup_objects"]
        assert len(freezing) == 1, signal.name
        gc.unfreeze()
        try:
            freezing[0](sender=None)
            assert gc.get_freeze_count() > 1000  # Django's and Celery's modules and models
        finally:
            gc.unfreeze()


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_trim"), reason="not glibc")
def test_releasing_hands_freed_heap_pages_back() -> None:
    """64 MB of 2 KiB blocks (malloc's, not Python's small-object allocator) freed behind one
    that stays: the heap cannot shrink from its top, so the pages stay resident until released."""
    blocks: list[Any] = [bytearray(2048) for _ in range(32 * 1024)]
    kept = bytearray(2048)
    blocks.clear()
    before = _rss_mb()
    allocator.release_freed_memory()
    assert before - _rss_mb() > 32
    del kept
