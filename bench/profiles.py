"""Where the CPU goes: py-spy (installed with the transfer tools, ``make bench-tools``) samples a
process from outside, all its threads, and the samples are summed by function: the functions
the CPU was in (self), and our functions it was under (the innermost frame of ``dandizarr`` or
``dandizarr_server``, so a library's work counts against the code of ours that called it)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bench.s3_env import tool

RATE = 250  # samples a second; --nonblocking, so the process is not paused to be read
OURS = ("dandizarr/", "dandizarr_server/")


def available() -> bool:
    return tool("py-spy") is not None


def _record(out: Path) -> list[str]:
    return [str(tool("py-spy")), "record", "--format", "raw", "--rate", str(RATE),
            "--nonblocking", "--output", str(out)]  # fmt: skip


def spied(argv: Sequence[str], out: Path) -> list[str]:
    """``argv`` run under py-spy, its samples written to ``out``."""
    return [*_record(out), "--", *argv]


@contextmanager
def sampling(pid: int, out: Path) -> Iterator[None]:
    """Samples the running process ``pid`` into ``out`` during the ``with`` block."""
    spy = subprocess.Popen(
        [*_record(out), "--subprocesses", "--pid", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # attached before the work starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


def _function(frame: str) -> str:
    """``name (path/file.py:line)`` without its line: samples of one function add up."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rpartition(':')[0]})"


def summary(raw: Path, top: int = 6) -> str:
    """The ``top`` functions by self samples, and ours by samples under them, in percent."""
    own: Counter[str] = Counter()
    under_ours: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines() if raw.exists() else ():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit() or not stack:
            continue
        frames = stack.split(";")
        n = int(count)
        total += n
        own[_function(frames[-1])] += n
        ours = next((f for f in reversed(frames) if any(o in f for o in OURS)), None)
        under_ours[_function(ours) if ours else "(no frame of ours)"] += n
    if not total:
        return "      no samples"

    def lines(counter: Counter[str]) -> str:
        return "\n".join(
            f"        {100 * n / total:5.1f}%  {name}" for name, n in counter.most_common(top)
        )

    return (
        f"      {total:,} samples; where the CPU was:\n{lines(own)}\n"
        f"      under our functions:\n{lines(under_ours)}"
    )
