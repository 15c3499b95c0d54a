"""The rules every object key obeys, on every backend: the strictest backend's rules, in one place.

A key is ``/``-separated UTF-8. S3 allows up to 1024 bytes; the local backend maps each
segment to a file name (at most 255 bytes, minus the sidecar prefix it adds) and reserves
names starting ``.dandizarr-`` for its temp files and sidecars. Whoever hands out keys
(the service, at batch start) checks them here, so a key accepted once can always be signed,
stored, listed and read back on any backend.
"""

from __future__ import annotations

import re

from dandizarr.checksums.paths import path_problem

# S3's limit on a key, in bytes of UTF-8.
MAX_KEY_BYTES = 1024
# Names the local backend keeps for itself (temp files, md5 sidecars); listings never show them.
RESERVED_PREFIX = ".dandizarr-"
# The local backend's sidecar of ``name`` is ``.dandizarr-meta.<name>``, and a file name holds
# at most 255 bytes on the filesystems it runs on: the sidecar's name has to fit too.
SIDECAR_PREFIX = RESERVED_PREFIX + "meta."
MAX_SEGMENT_BYTES = 255 - len(SIDECAR_PREFIX.encode())
# S3 lists keys in XML, where most control characters cannot appear; a file name with one is
# a mistake on every filesystem anyway.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot be stored on every backend, or None when it can."""
    problem = path_problem(key)
    if problem is not None:
        return problem
    assert isinstance(key, str)  # path_problem checked it
    try:
        size = len(key.encode())
    except UnicodeEncodeError:
        return "must be valid UTF-8 (no lone surrogates)"
    if _CONTROL.search(key):
        return "must not contain control characters"
    if size > MAX_KEY_BYTES:
        return f"makes a storage key of {size} bytes of UTF-8; at most {MAX_KEY_BYTES} are allowed"
    if RESERVED_PREFIX not in key and size <= MAX_SEGMENT_BYTES:
        return None  # no segment can break the rules below (the usual key: checked fast)
    for segment in key.split("/"):
        if segment.startswith(RESERVED_PREFIX):
            return f"has a name starting {RESERVED_PREFIX!r}: such names are reserved by storage"
        segment_bytes = len(segment.encode())
        if segment_bytes > MAX_SEGMENT_BYTES:
            return (
                f"has a name of {segment_bytes} bytes of UTF-8; "
                f"at most {MAX_SEGMENT_BYTES} are allowed"
            )
    return None
