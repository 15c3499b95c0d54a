"""``--cpu-durations=N``: the N steps (setup, call, teardown) that used the most CPU, like
pytest's ``--durations`` for wall time. Load on a shared machine stretches wall time; the CPU a
step costs moves much less, so this is the list to read when the suite's CPU must come down.

A step's CPU is user + sys of the pytest process (every thread: moto's server and the live
server run in it) plus that of the child processes it reaped meanwhile (getrusage SELF and
CHILDREN). Servers outside the process (PostgreSQL, Redis) are not counted. Under xdist each
worker measures its own steps and the figures reach the controller on the reports
(``user_properties``). The summary also gives each pytest process's CPU before its first test
(start-up and collection) and the total.

Loaded by tests/conftest.py (``pytest_plugins``); off unless the option is given.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator
from typing import cast

import pytest

_KEY = "cpu_seconds"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("terminal reporting").addoption(
        "--cpu-durations",
        type=int,
        default=None,
        metavar="N",
        help="list the N steps that used the most CPU (user + sys; 0: all)",
    )


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_START_UP = "start-up"


def _measured(item: pytest.Item, when: str) -> Iterator[None]:
    if item.config.getoption("cpu_durations") is None:
        return (yield)
    if not _STARTED:
        # This process' CPU before its first test: interpreter, imports, collection.
        _STARTED.append(_cpu())
        item.user_properties.append((_KEY, (_START_UP, _STARTED[0])))
    start = _cpu()
    try:
        return (yield)
    finally:
        item.user_properties.append((_KEY, (when, _cpu() - start)))


# The CPU this process had used when its first test began (one figure, once measured).
_STARTED: list[float] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    return (yield from _measured(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    return (yield from _measured(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    return (yield from _measured(item, "teardown"))


# (test id, step, CPU-s) as the reports arrive in the process that reports them (the xdist
# controller, or the only process).
_STEPS: list[tuple[str, str, float]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == _KEY:
            when, seconds = cast(tuple[str, float], value)
            _STEPS.append((report.nodeid, when, seconds))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    count = terminalreporter.config.getoption("cpu_durations")
    if count is None:
        return
    # An item's later reports carry its earlier steps' figures too: one figure per step.
    steps = {(nodeid, when): seconds for nodeid, when, seconds in _STEPS}
    start_ups = [s for (_, when), s in steps.items() if when == _START_UP]
    tests = {key: s for key, s in steps.items() if key[1] != _START_UP}
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", f"{count or 'all'} steps by CPU (user + sys, reaped children)")
    ranked = sorted(tests.items(), key=lambda kv: kv[1], reverse=True)
    for (nodeid, when), seconds in ranked[: count or None]:
        write(f"{seconds:8.2f}s {when:<8} {nodeid}")
    by_file: dict[str, float] = {}
    for (nodeid, _), seconds in tests.items():
        path = nodeid.split("::", 1)[0]
        by_file[path] = by_file.get(path, 0.0) + seconds
    terminalreporter.write_sep("-", "CPU by file (the 25 most)")
    for path, seconds in sorted(by_file.items(), key=lambda kv: kv[1], reverse=True)[:25]:
        write(f"{seconds:8.2f}s {path}")
    by_step = {
        when: sum(s for (_, w), s in tests.items() if w == when)
        for when in ("setup", "call", "teardown")
    }
    write(
        f"tests' steps: {sum(tests.values()):.1f} CPU-s ("
        + ", ".join(f"{when} {s:.1f}" for when, s in by_step.items())
        + "); each process before its first test: "
        + ", ".join(f"{s:.1f}" for s in start_ups)
        + " CPU-s"
    )
