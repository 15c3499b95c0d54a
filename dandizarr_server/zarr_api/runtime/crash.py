"""Crash points: named steps where a test kills the process (``DANDIZARR_CRASH_AT=name``) to
prove that what the step left behind converges on its own, or makes it fail
(``DANDIZARR_CRASH_AT=raise:name``) with an exception as costly to log as any, to prove that a
500 costs its log what a 200 does. A no-op unless that is set."""

from __future__ import annotations

import os
import signal

from django.conf import settings

# DANDIZARR_CRASH_AT=raise:<name>: the step raises instead of killing the process.
RAISE = "raise:"
# The message of the exception raised: a refused value a careless message might repeat.
RAISED_MESSAGE_CHARS = 1 << 20


def crash_point(name: str) -> None:
    target = settings.DANDIZARR_CRASH_AT
    if name == target:
        os.kill(os.getpid(), signal.SIGKILL)
    elif target == RAISE + name:
        raise_costly_exception()


def raise_costly_exception() -> None:
    """A ``RuntimeError`` with a megabyte of message, raised from a ``RecursionError`` whose
    stack is as deep as the interpreter allows."""
    try:
        _deeper(0)
    except RecursionError as exc:
        raise RuntimeError("refused " + "x" * RAISED_MESSAGE_CHARS) from exc


def _deeper(depth: int) -> int:
    return _deeper(depth + 1) + 1
