"""The local backend's listing order: a lazy directory walk that yields keys in S3's order.

Sorting each directory's entries with ``/`` appended to subdirectory names gives the global
order: every key below ``d/`` sorts against a sibling name exactly as ``d/`` does. Python
orders str by code point, which for UTF-8 is byte order (S3's order). Reserved names (temp
files, sidecars) and names that are not UTF-8 are never listed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from dandizarr.objectstore.keys import RESERVED_PREFIX


def walk_keys(
    directory: Path, key_prefix: str, prefix: str, start_after: str | None
) -> Iterator[str]:
    """Keys of the files below ``directory`` (whose key starts ``key_prefix``) that start with
    ``prefix`` and sort after ``start_after``, in key order, lazily."""
    try:
        with os.scandir(directory) as scan:
            entries = []
            for entry in scan:
                if entry.name.startswith(RESERVED_PREFIX):
                    continue
                try:
                    entry.name.encode("utf-8")
                except UnicodeEncodeError:
                    continue  # not a name this store wrote (undecodable bytes)
                is_dir = entry.is_dir(follow_symlinks=False)
                entries.append((entry.name + "/" if is_dir else entry.name, is_dir))
    except (FileNotFoundError, NotADirectoryError):
        return
    entries.sort()
    for name, is_dir in entries:
        full = key_prefix + name
        if is_dir:
            if not (full.startswith(prefix) or prefix.startswith(full)):
                continue
            if start_after is not None and start_after >= full and not start_after.startswith(full):
                continue  # everything below sorts before start_after
            yield from walk_keys(directory / name[:-1], full, prefix, start_after)
        elif full.startswith(prefix) and (start_after is None or full > start_after):
            yield full
