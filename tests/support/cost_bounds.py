"""One call of a reader under a CPU and a memory bound, and allowed to fail only as its
contract says (issue #47's fuzzers: tests/sharding/test_metadata_fuzz.py,
tests/zarr_api/test_describe_fuzz.py).

CPU is ``time.process_time`` (this process, every thread: a loaded machine does not stretch
it); memory is the peak ``tracemalloc`` saw during the call above what was held before it
(numpy's buffers included: numpy reports its allocations to tracemalloc).
"""

from __future__ import annotations

import functools
import json
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# The machine's speed, for every CPU bound of the tests: a fixed workload (a JSON parse of a
# 1,000,000-item list and a Python loop of as many steps) cost REFERENCE_CPU_SECONDS on the
# machine of 2026-11-28's session 12 (quiet); the bounds were set on a faster one, where they
# passed with no headroom to spare. A bound is multiplied by ``cpu_scale()``: HEADROOM on that
# machine, more on a slower or busier one (process_time grows on two cores shared by three
# test workers), never less than 1.
REFERENCE_CPU_SECONDS = 0.10
HEADROOM = 1.5
_WORKLOAD = "[" + ",".join(["0"] * 1_000_000) + "]"


def _workload_seconds() -> float:
    started = time.process_time()
    json.loads(_WORKLOAD)
    total = 0
    for step in range(1_000_000):
        total += step & 7
    return time.process_time() - started


@functools.cache
def cpu_scale(headroom: float = HEADROOM) -> float:
    """What this machine's CPU bounds are multiplied by (measured once a process)."""
    measured = min(_workload_seconds() for _ in range(3))
    return max(1.0, headroom * measured / REFERENCE_CPU_SECONDS)


# What one call of one reader may cost: the figure an anonymous request may cost whole
# (tests/zarr_api/test_hostile_metadata.py's REQUEST_CPU_SECONDS), and a peak well under what
# a request may grow the process (its GROWTH_BYTES).
CALL_CPU_SECONDS = 1.0
CALL_PEAK_BYTES = 64 << 20


@contextmanager
def traced_memory() -> Iterator[None]:
    """tracemalloc on for the duration (a fuzzer's whole run: starting it per call would
    cost more than the calls)."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        yield
    finally:
        if started:
            tracemalloc.stop()


class Refused:
    """A call that raised the error its contract allows."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def bounded(
    call: Callable[..., Any], *args: Any, allowed: tuple[type[BaseException], ...] = ()
) -> Any:
    """``call(*args)``'s value, or ``Refused`` when it raised one of ``allowed``; anything
    else it raises propagates (the fuzzer's failure). AssertionError when the call cost more
    than CALL_CPU_SECONDS or peaked past CALL_PEAK_BYTES. Needs ``traced_memory``."""
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    started = time.process_time()
    try:
        outcome = call(*args)
    except allowed as error:
        outcome = Refused(error)
    cpu = time.process_time() - started
    peak = tracemalloc.get_traced_memory()[1] - held
    name = getattr(call, "__qualname__", repr(call))
    assert cpu <= CALL_CPU_SECONDS * cpu_scale(), f"{name} took {cpu:.2f} CPU-s"
    assert peak <= CALL_PEAK_BYTES, f"{name} peaked at {peak >> 20} MiB"
    return outcome
