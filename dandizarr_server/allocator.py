"""glibc malloc in the service's processes: how it is set up when one starts (``dandizarr
serve``, gunicorn's workers through ``gunicorn_config``, Celery's workers), and memory freed by
a big piece of work handed back to the system afterwards. The one home of both
(docs/settings.md, `MALLOC_ARENA_MAX`).

- Two arenas (``MALLOC_ARENA_MAX``): glibc gives threads that allocate at once arenas of their
  own, up to 8 per core, and memory freed stays with its arena. Python's small objects come
  from its own allocator under the GIL, so few arenas cost no contention.
- A fixed mmap threshold (``MALLOC_MMAP_THRESHOLD_``): big blocks (a request's body, the
  text and lists of a parsed pack batch) get pages of their own, returned when freed. glibc's
  default raises the threshold to the largest block freed, after which such blocks are carved
  from the heap and leave holes there.
- ``release_freed_memory`` (``malloc_trim``) after a tree update and after a request with a big
  body: the pages wholly free inside the heap go back to the system. Without it, memory a
  batch freed stays resident in partly used heaps, and the next batch's peak starts from there.

An operator's environment wins: a parameter whose variable is set is left to glibc. Not glibc
(macOS, musl): nothing to do.

And Python's cyclic garbage collector: ``freeze_startup_objects`` leaves what a process made
before its first request or task (modules, Django's and boto3's models: most of its heap) out
of the collector's full passes, which walked all of it each time a pack batch's start or tree
update made many objects (docs/performance.md).
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any

# glibc's mallopt parameters (malloc.h).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MALLOC_ARENAS = 2
MMAP_THRESHOLD = 128 * 1024
# The environment variables glibc reads for them, each the operator's choice when set.
SETTINGS = (
    (M_ARENA_MAX, MALLOC_ARENAS, "MALLOC_ARENA_MAX"),
    (M_MMAP_THRESHOLD, MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_"),
)
# A request body at least this big is followed by release_freed_memory (a pack batch's start).
BIG_REQUEST_BYTES = 1 << 20


def _libc() -> Any | None:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def configure_malloc() -> None:
    """Set this process's malloc up as the module says, before it serves or runs tasks."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return
    for parameter, value, variable in SETTINGS:
        if not os.environ.get(variable):
            mallopt(parameter, value)


def release_freed_memory() -> None:
    """Hand the pages malloc holds free back to the system (``malloc_trim(0)``): a few
    milliseconds, so after big work only."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


def after_request(worker: Any, request: Any, environ: dict[str, Any], response: Any) -> None:
    """gunicorn's ``post_request`` hook (``dandizarr serve``'s and ``gunicorn_config``'s):
    memory freed after a request with a big body."""
    try:
        size = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return
    if size >= BIG_REQUEST_BYTES:
        release_freed_memory()


def freeze_startup_objects() -> None:
    """Collect once, then freeze what is left (``gc.freeze``): called when a web worker or a
    Celery worker is ready, before it serves; what it made by then lives as long as it does."""
    gc.collect()
    gc.freeze()
