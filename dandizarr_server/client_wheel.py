"""The client this service serves (``GET /client/dandizarr-X.Y.Z-py3-none-any.whl``): the wheel of
the very client files the service runs, so ``pip install <that URL>`` on another machine gets
the client matching this server (no index has dandizarr; docs/deploying.md).

The client alone: the installed ``dandizarr`` directory (whatever installed it: a wheel, the
image, an editable checkout), never the server's package (its source is no client's business),
with the installed distribution's metadata less what needs the server (the ``server`` extra and
the extras that pull it, the ``serve`` subcommand's entry point). Installed without extras it
runs without Django.

Built once per set of sources: kept under ``<cache>/<digest of the sources>/``, a file every
process sees. Single flight: the first request builds it holding an exclusive ``flock`` on that
directory's lock file; concurrent requests, in any thread or process of the service, wait for
the lock and serve what it built.
Built the same bytes every time (sorted entries, fixed timestamps), renamed into place whole.

No Django: settings pass the cache directory.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import hashlib
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

import dandizarr

DISTRIBUTION = "dandizarr"
# The client alone: the packages whose files the wheel holds.
PACKAGES = (Path(dandizarr.__file__).parent,)
# The extra that installs the server's dependencies: meaningless without the server's package,
# so the served wheel leaves it out, and every extra that pulls it (``test``).
SERVER_EXTRA = "server"
# Taken while the wheel is built, in its cache directory.
LOCK_NAME = ".build.lock"
# The earliest time a zip entry can carry: the same bytes whenever and wherever it is built.
_TIMESTAMP = (1980, 1, 1, 0, 0, 0)


def wheel_name() -> str:
    return f"{DISTRIBUTION}-{dandizarr.__version__}-py3-none-any.whl"


def _package_files() -> Iterator[tuple[str, Path]]:
    """Each file of the packages as ``(name in the wheel, path)``, sorted; no bytecode."""
    for root in PACKAGES:
        found = []
        for directory, subdirectories, names in os.walk(root):
            subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
            for name in names:
                if not name.endswith((".pyc", ".pyo")):
                    path = Path(directory, name)
                    found.append((f"{root.name}/{path.relative_to(root).as_posix()}", path))
        yield from sorted(found)


@functools.cache
def sources_digest() -> str:
    """What the wheel is built from, hashed: its cache key (once per process: installed files
    do not change under a running service). This builder is one of its sources: a change to
    what the wheel holds is a new key, never an old wheel served again."""
    digest = hashlib.sha256(wheel_name().encode())
    digest.update(Path(__file__).read_bytes())
    for name, path in _package_files():
        digest.update(f"\0{name}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def client_wheel(cache: Path) -> Path:
    """The wheel's path under ``cache``, built first when missing (by one caller at a time,
    across threads and processes; the others wait for it and find it built)."""
    path = cache / sources_digest() / wheel_name()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(path.parent / LOCK_NAME):
        if not path.is_file():  # else built while this caller waited
            _build(path)
    return path


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``lock_path``: one holder among every thread (each opens the
    file afresh, and ``flock`` locks belong to the open file) and every process."""
    with open(lock_path, "ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(path: Path) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".building-")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            _write_wheel(handle)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _dist_info_files() -> dict[str, bytes]:
    installed = metadata.distribution(DISTRIBUTION)
    version = installed.version
    if version != dandizarr.__version__:
        raise RuntimeError(
            f"the installed {DISTRIBUTION} is {version}, its package {dandizarr.__version__}: "
            "reinstall it"
        )
    # A wheel's METADATA; run from a checkout, the egg-info beside it may be found first,
    # whose PKG-INFO is the same document.
    core = installed.read_text("METADATA") or installed.read_text("PKG-INFO")
    if not core:
        raise RuntimeError(f"the installed {DISTRIBUTION} has no metadata: reinstall it")
    files = {
        "METADATA": client_metadata(core).encode(),
        "WHEEL": b"Wheel-Version: 1.0\nGenerator: dandizarr_server.client_wheel\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        "top_level.txt": "".join(f"{root.name}\n" for root in PACKAGES).encode(),
    }
    if entry_points := _client_entry_points(installed.entry_points):
        files["entry_points.txt"] = entry_points.encode()
    return files


_EXTRA_MARKER = re.compile(r';\s*extra\s*==\s*"([^"]+)"\s*$')
_PROVIDES_EXTRA = "Provides-Extra:"
_REQUIRES_DIST = "Requires-Dist:"


def client_metadata(core: str) -> str:
    """The distribution's METADATA less the server's extras (``SERVER_EXTRA`` and every extra
    that requires ``dandizarr[...]`` with it): headers before the first blank line, one field
    a line (setuptools writes each requirement as ``<requirement>; extra == "<name>"``)."""
    headers, separator, body = core.partition("\n\n")
    lines = headers.split("\n")
    dropped = {SERVER_EXTRA}
    own = re.compile(rf"^{re.escape(DISTRIBUTION)}\[([^\]]*)\]", re.IGNORECASE)
    for line in lines:
        if line.startswith(_REQUIRES_DIST) and (extra := _EXTRA_MARKER.search(line)):
            needs = own.match(line[len(_REQUIRES_DIST) :].strip())
            if needs and SERVER_EXTRA in {e.strip() for e in needs.group(1).split(",")}:
                dropped.add(extra.group(1))

    def kept(line: str) -> bool:
        if line.startswith(_PROVIDES_EXTRA):
            return line[len(_PROVIDES_EXTRA) :].strip() not in dropped
        if line.startswith(_REQUIRES_DIST) and (extra := _EXTRA_MARKER.search(line)):
            return extra.group(1) not in dropped
        return True

    return "\n".join(filter(kept, lines)) + separator + body


def _client_entry_points(entry_points: metadata.EntryPoints) -> str:
    """``entry_points.txt`` of the entry points whose module the wheel holds (the client's
    script; not ``serve``, which the server's package registers)."""
    packaged = {root.name for root in PACKAGES}
    groups: dict[str, list[str]] = {}
    for entry in sorted(entry_points, key=lambda e: (e.group, e.name)):
        if entry.module.split(".", 1)[0] in packaged:
            groups.setdefault(entry.group, []).append(f"{entry.name} = {entry.value}\n")
    return "\n".join(f"[{group}]\n" + "".join(lines) for group, lines in groups.items())


def _write_wheel(handle: BinaryIO) -> None:
    dist_info = f"{DISTRIBUTION}-{dandizarr.__version__}.dist-info"
    record: list[str] = []
    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as wheel:

        def add(name: str, data: bytes) -> None:
            info = zipfile.ZipInfo(name, date_time=_TIMESTAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            wheel.writestr(info, data)
            hashed = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={hashed.decode()},{len(data)}")

        for name, path in _package_files():
            add(name, path.read_bytes())
        for name, data in _dist_info_files().items():
            add(f"{dist_info}/{name}", data)
        record.append(f"{dist_info}/RECORD,,")
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=_TIMESTAMP)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        wheel.writestr(info, "".join(f"{line}\n" for line in record))
