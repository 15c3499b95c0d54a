"""How much a stretch of a test grew this process at its peak: the kernel's high-water mark of
the resident set (``VmHWM``) reset to the current size when the stretch begins
(``/proc/self/clear_refs``), so an earlier peak (another test's, in the same xdist worker) can
neither hide a growth nor be counted as one. ``ru_maxrss`` cannot be reset: a bound measured
with it passed whenever an earlier test had peaked higher."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_STATUS = Path("/proc/self/status")


def _status_bytes(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    assert found, f"no {field} in {_STATUS}"
    return int(found.group(1)) << 10


class Growth:
    bytes = 0


@contextmanager
def peak_growth() -> Iterator[Growth]:
    """``with peak_growth() as grown: ...``; then ``grown.bytes``: the resident set's peak
    during the block above its size when the block began."""
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux 4.0)
    before = _status_bytes("VmRSS")
    grown = Growth()
    try:
        yield grown
    finally:
        grown.bytes = _status_bytes("VmHWM") - before
