"""Where an archive lives in the bucket: the one home of the storage key layout.

``zarr/{zarr_id}/{path}`` holds each loose file, ``zarr_checksums/{zarr_id}/{dir}/.checksum``
each directory's listing, ``zarr_shards/{zarr_id}/{name}`` each shard object of a sharded
archive (docs/sharded.md), and ``zarr_shards/{zarr_id}/sessions/{session_id}/{hex}`` each file a
write session staged (docs/writing.md): after its commit, a one-member shard object.
"""

from __future__ import annotations

import uuid

CHECKSUM_FILE_NAME = ".checksum"
FILES_ROOT = "zarr/"
SHARDS_ROOT = "zarr_shards/"
CHECKSUMS_ROOT = "zarr_checksums/"
# Since when the bucket keeps replaced objects (ISO time), written when versioning is turned on
# (dandizarr_server.zarr_api.services.publishing.ensure_storage_versioning). Outside every archive.
VERSIONING_SINCE_KEY = "dandizarr/versioning-since"
# What the readiness probe asks storage about (/readyz): a key every backend accepts, outside
# every archive, never written (absent is an answer too).
READINESS_PROBE_KEY = "dandizarr/readiness-probe"
# Every top-level prefix an archive's objects live under.
ARCHIVE_ROOTS = (FILES_ROOT, CHECKSUMS_ROOT, SHARDS_ROOT)


def files_prefix(zarr_id: uuid.UUID | str) -> str:
    return f"{FILES_ROOT}{zarr_id}/"


def checksums_prefix(zarr_id: uuid.UUID | str) -> str:
    return f"{CHECKSUMS_ROOT}{zarr_id}/"


def shards_prefix(zarr_id: uuid.UUID | str) -> str:
    return f"{SHARDS_ROOT}{zarr_id}/"


def file_key(zarr_id: uuid.UUID | str, path: str) -> str:
    return files_prefix(zarr_id) + path


def checksum_key(zarr_id: uuid.UUID | str, directory: str) -> str:
    """The key of ``directory``'s ``.checksum`` listing ("" = the root)."""
    directory = directory.strip("/")
    return f"{checksums_prefix(zarr_id)}{directory + '/' if directory else ''}{CHECKSUM_FILE_NAME}"


def new_shard_key(zarr_id: uuid.UUID | str, name: str) -> str:
    """A fresh key for a shard object named ``name``: shard objects are never overwritten, so
    a reader holding a member's location never reads another object's bytes."""
    return f"{shards_prefix(zarr_id)}{name}.{uuid.uuid4().hex[:12]}"


def session_prefix(zarr_id: uuid.UUID | str, session_id: uuid.UUID | str) -> str:
    """Where write session ``session_id`` stages its files: under the archive's shard prefix,
    so every rule of shard objects (public reads, the audit's known objects, garbage
    collection's references) covers them once committed."""
    return f"{shards_prefix(zarr_id)}sessions/{session_id}/"


def new_staged_key(zarr_id: uuid.UUID | str, session_id: uuid.UUID | str) -> str:
    """A fresh key for one write of a session: never reused (an md5-bound URL replayed later
    can only write the bytes it was signed for, to a key no other write has), of a fixed
    length whatever the path (a path of any accepted length can be staged), and unlike
    every shard key a pack batch makes (those end in ``.`` and 12 hex digits)."""
    return f"{session_prefix(zarr_id, session_id)}{uuid.uuid4().hex}"


def staged_key_session(key: str) -> tuple[str, str] | None:
    """``(zarr_id, session_id)`` of a key ``new_staged_key`` could have made, else None (the
    ids as written in the key, unchecked)."""
    if not key.startswith(SHARDS_ROOT):
        return None
    parts = key[len(SHARDS_ROOT) :].split("/")
    if len(parts) != 4 or parts[1] != "sessions" or not all(parts):
        return None
    return parts[0], parts[2]


def split_upload_key(key: str) -> tuple[str, str, str] | None:
    """``("file" | "shard", zarr_id, rest)`` for a key clients may upload to (a loose file's
    or a shard object's), else None (``.checksum`` files and anything else)."""
    for kind, prefix in (("file", FILES_ROOT), ("shard", SHARDS_ROOT)):
        if key.startswith(prefix):
            zarr_id, _, rest = key[len(prefix) :].partition("/")
            if zarr_id and rest:
                return kind, zarr_id, rest
    return None
