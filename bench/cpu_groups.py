"""CPU seconds of groups of processes (web workers, task workers, database backends...) while
a benchmark runs, sampled from ``/proc`` every 0.2 s so that a process that ends meanwhile (a
database backend closed by ``DANDIZARR_DB_CONN_MAX_AGE``) still counts, and one that starts
meanwhile counts from zero."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from bench.s3_env import cpu_seconds

T = TypeVar("T")


def cpu_by_group(
    groups: Callable[[], Mapping[str, Sequence[int]]], run: Callable[[], T]
) -> tuple[T, dict[str, float]]:
    """``run()``'s value, and the CPU seconds each group named by ``groups()`` (asked again at
    each sample: processes come and go) spent during it: each process's last sample less its
    first. Every name ``groups()`` gives is in the answer."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    group: dict[int, str] = {}
    names: set[str] = set()
    started = True

    def sample() -> None:
        for name, pids in groups().items():
            names.add(name)
            for pid in pids:
                seconds = cpu_seconds([pid])
                if seconds == 0.0 and pid not in last:
                    continue
                group[pid] = name
                first.setdefault(pid, seconds if started else 0.0)
                last[pid] = max(seconds, last.get(pid, 0.0))

    sample()
    started = False
    stop = threading.Event()

    def sampling() -> None:
        while not stop.wait(0.2):
            sample()

    sampler = threading.Thread(target=sampling, daemon=True)
    sampler.start()
    try:
        result = run()
    finally:
        stop.set()
        sampler.join()
    sample()
    spent = dict.fromkeys(sorted(names), 0.0)
    for pid, name in group.items():
        spent[name] += last[pid] - first[pid]
    return result, spent
