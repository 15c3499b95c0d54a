"""Noncurrent versions for ``LocalObjectStore`` (dandizarr.objectstore.versions).

Once versioning is enabled (the directory ``<root>/.dandizarr-versions`` exists: a reserved name,
never listed), an object about to be overwritten or deleted is kept first: a hard link (no byte
copied) at ``<root>/.dandizarr-versions/<key>/.dandizarr-v-<md5>``. Its version id is its md5
(two replaced versions with one content are one version), its modification time the moment it
was replaced. The current object of a key is its version too, its id ``current:<md5>``: reads by
either id find the bytes by content; a deletion by id takes only that one.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from dandizarr.objectstore.base import ObjectInfo, ObjectNotFound
from dandizarr.objectstore.keys import RESERVED_PREFIX
from dandizarr.objectstore.local_files import info_of_open, key_segments, record_md5
from dandizarr.objectstore.versions import ObjectVersion

VERSION_PREFIX = RESERVED_PREFIX + "v-"
# The id of a key's current object as a version: never a kept file's, so deleting a version by
# id can never take the other one of the same content.
CURRENT_PREFIX = "current:"


def current_id(md5: str) -> str:
    return CURRENT_PREFIX + md5


def content_of(version_id: str) -> str:
    """The md5 a version id names (its content: current or kept)."""
    return version_id.removeprefix(CURRENT_PREFIX)


VERSIONS_DIRECTORY = RESERVED_PREFIX + "versions"


class RetainedVersions:
    def __init__(self, root: Path, objects_root: Path) -> None:
        self.root = root
        self.objects_root = objects_root

    @property
    def enabled(self) -> bool:
        return self.root.is_dir()

    def enable(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str, version_id: str) -> Path:
        return self.root.joinpath(*key_segments(key), VERSION_PREFIX + version_id)

    def retain(self, key: str, path: Path) -> Path | None:
        """Keep the object now at ``path`` (if any) as a version of ``key``; the kept file,
        to be marked replaced (``replaced``) once the new object or the deletion is done."""
        if not self.enabled:
            return None
        try:
            handle: BinaryIO = open(path, "rb")  # noqa: SIM115
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        with handle:
            try:
                info, _ = info_of_open(key, path, handle)
            except ObjectNotFound:
                return None
            target = self.path(key, info.etag)
            target.parent.mkdir(parents=True, exist_ok=True)
            held = os.fstat(handle.fileno())
            try:
                os.link(path, target)
            except FileExistsError:
                return target  # that content is kept already
            except FileNotFoundError:
                return None  # deleted meanwhile: kept by whoever deleted it
            # The name may have been given to another file since it was opened: keep only the
            # very file whose md5 names the version.
            linked = os.stat(target)
            if (linked.st_ino, linked.st_dev) != (held.st_ino, held.st_dev):
                target.unlink(missing_ok=True)
                return None
        return target

    @staticmethod
    def replaced(target: Path | None) -> None:
        if target is not None:
            with contextlib.suppress(OSError):
                os.utime(target)

    def versions(self, prefix: str, current: Iterator[ObjectInfo]) -> Iterator[ObjectVersion]:
        """Every version below ``prefix``: the current objects (``current``, listed in key
        order) and the kept ones, keys in order, each key's newest first."""
        kept: dict[str, list[ObjectVersion]] = {}
        for directory, _dirs, files in os.walk(self.root):
            relative = Path(directory).relative_to(self.root).as_posix()
            key = "" if relative == "." else relative
            if not key.startswith(prefix):
                continue
            for name in files:
                if name.startswith(VERSION_PREFIX):
                    st = os.stat(os.path.join(directory, name))
                    replaced = datetime.fromtimestamp(st.st_mtime, UTC)
                    version_id = name[len(VERSION_PREFIX) :]
                    kept.setdefault(key, []).append(
                        ObjectVersion(
                            key,
                            version_id,
                            version_id,
                            st.st_size,
                            False,
                            False,
                            replaced,
                            replaced,
                        )
                    )
        latest = {}
        for info in current:
            modified = datetime.fromtimestamp(self._mtime(info.key), UTC)
            latest[info.key] = ObjectVersion(
                info.key, current_id(info.etag), info.etag, info.size, True, False, None, modified
            )
        for key in sorted({*kept, *latest}):
            if key in latest:
                yield latest[key]
            yield from sorted(kept.get(key, []), key=_replaced_time, reverse=True)

    def _mtime(self, key: str) -> float:
        try:
            return os.stat(self.objects_root.joinpath(*key_segments(key))).st_mtime
        except OSError:
            return 0.0

    def link_back(self, key: str, version_id: str, path: Path) -> None:
        """Make the kept version the object at ``path`` again (a hard link: no byte copied)."""
        source = self.path(key, version_id)
        if not source.exists():
            raise ObjectNotFound(f"{key} (version {version_id})")
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{RESERVED_PREFIX}restore-{uuid.uuid4().hex}")
        os.link(source, temporary)
        try:
            record_md5(path, temporary, version_id)
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)

    def open(self, key: str, version_id: str) -> BinaryIO:
        try:
            return open(self.path(key, version_id), "rb")
        except (FileNotFoundError, NotADirectoryError) as error:
            raise ObjectNotFound(f"{key} (version {version_id})") from error

    def delete_one(self, key: str, version_id: str) -> bool:
        """Delete a kept version; False when there is none of that id."""
        path = self.path(key, version_id)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        directory = path.parent
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                break
            directory = directory.parent
        return True


def _replaced_time(version: ObjectVersion) -> float:
    return version.replaced_at.timestamp() if version.replaced_at is not None else 0.0
