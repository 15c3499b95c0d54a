"""The client this service serves (``GET /client/dandizarr-X.Y.Z-py3-none-any.whl``): the wheel of
the very package files the service runs, so ``pip install <that URL>`` on another machine gets
the client matching this server (no index has dandizarr; docs/deploying.md).

Built from the installed ``dandizarr`` and ``dandizarr_server`` directories (whatever installed
them: a wheel, the image, an editable checkout) and the installed distribution's metadata, once
per set of sources: kept under ``<cache>/<digest of the sources>/``, a file every process sees.
Installed without extras it is the client alone (Django and the rest are the ``server`` extra).
Built the same bytes every time (sorted entries, fixed timestamps), so processes building it
at once write identical files, each renamed into place whole.

No Django: settings pass the cache directory.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import os
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

import dandizarr

DISTRIBUTION = "dandizarr"
PACKAGES = (Path(dandizarr.__file__).parent, Path(__file__).parent)
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
    do not change under a running service)."""
    digest = hashlib.sha256(wheel_name().encode())
    for name, path in _package_files():
        digest.update(f"\0{name}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


def client_wheel(cache: Path) -> Path:
    """The wheel's path under ``cache``, built first when missing."""
    path = cache / sources_digest() / wheel_name()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
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
    return path


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
        "METADATA": core.encode(),
        "WHEEL": b"Wheel-Version: 1.0\nGenerator: dandizarr_server.client_wheel\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        "top_level.txt": "".join(f"{root.name}\n" for root in PACKAGES).encode(),
    }
    if (entry_points := installed.read_text("entry_points.txt")) is not None:
        files["entry_points.txt"] = entry_points.encode()
    return files


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
