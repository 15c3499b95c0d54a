"""Single-flight tests that cannot pass by luck: every concurrent caller is held at the point
where it either computes or waits, and only then is the computation let go.

A test counts computations in a file (``Gate.entered``: every thread and process of the test
appends to it), holds each computation open until released, and releases only once *every*
caller is accounted for: computing (counted in the file) or observed waiting (``flock_waiters``:
the kernel's own list of blocked ``flock`` requests, or a test's own observation). Without
single flight all N callers compute before any is released: N computations, every run; with
it, one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def held(real: Callable[..., T], counter: Path, release: Path) -> Callable[..., T]:
    """``real``, each call counted in ``counter`` and held until ``release`` exists (in any
    thread or process: a process of its own imports this module to hold its calls)."""

    def run(*args: Any, **kwargs: Any) -> T:
        with counter.open("a") as log:
            log.write(f"{os.getpid()}\n")
        deadline = time.monotonic() + 60
        while not release.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("never released")
            time.sleep(0.01)
        return real(*args, **kwargs)

    return run


class Gate:
    """Counts computations in ``directory/entered`` and holds each until ``release()``, which
    writes ``directory/released`` (what every thread and process holding with it looks at)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.counter = directory / "entered"
        self.release_file = directory / "released"
        self.counter.touch()

    def entered(self) -> int:
        return len(self.counter.read_text().splitlines())

    def release(self) -> None:
        self.release_file.touch()

    def hold(self, real: Callable[..., T]) -> Callable[..., T]:
        return held(real, self.counter, self.release_file)


def flock_waiters(directory: Path) -> int:
    """How many ``flock`` requests are blocked, now, on files under ``directory`` (every
    process's and thread's: ``/proc/locks`` lists each blocked request with ``->``)."""
    files = set()
    for root, _dirs, names in os.walk(directory):
        for name in names:
            try:
                found = os.stat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            device = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}"
            files.add(f"{device}:{found.st_ino}")
    blocked = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields and "FLOCK" in fields:
            rest = fields[fields.index("->") + 1 :]
            if len(rest) > 4 and rest[4] in files:  # FLOCK ADVISORY WRITE pid dev:inode
                blocked += 1
    return blocked


def wait_until(accounted: Callable[[], int], callers: int, timeout: float = 60) -> None:
    """Returns once ``accounted()`` (computing + observed waiting) reaches ``callers``."""
    deadline = time.monotonic() + timeout
    while (seen := accounted()) < callers:
        if time.monotonic() > deadline:
            raise AssertionError(f"{seen} of {callers} callers computing or waiting")
        time.sleep(0.01)
