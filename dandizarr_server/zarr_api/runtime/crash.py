"""Crash points: named steps where a test kills the process (``DANDIZARR_CRASH_AT=name``) to
prove that what the step left behind converges on its own. A no-op unless that is set."""

from __future__ import annotations

import os
import signal

from django.conf import settings


def crash_point(name: str) -> None:
    if name == settings.DANDIZARR_CRASH_AT:
        os.kill(os.getpid(), signal.SIGKILL)
