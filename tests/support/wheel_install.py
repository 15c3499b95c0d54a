"""The project as production installs it: its wheel, built from the files the Dockerfile copies,
installed (not editable) into a fresh virtual environment, and processes run from there with a
working directory outside the checkout, so nothing of the checkout is importable.

pip reaches its indexes as configured on this machine (its cache makes a second install quick);
when it cannot reach one, the tests that need an install skip, saying so.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

from tests.support.ci import skip_here_fail_in_ci
from tests.support.linked_venv import SITE_PACKAGES, linked_install

ROOT = Path(__file__).resolve().parents[2]
# What the Dockerfile copies into its build stage: the wheel is built from these alone.
SOURCES = ("pyproject.toml", "README.md", "dandizarr", "dandizarr_server")
# The extras the image installs (the Dockerfile's pip install).
EXTRAS = frozenset({"server", "storage"})
# pip's words when an index is out of reach (no network, no proxy): a skip, not a failure.
_UNREACHABLE = re.compile(
    r"Failed to establish a new connection|Temporary failure in name resolution|"
    r"Network is unreachable|Could not fetch URL|ProxyError",
)


def build_wheel(directory: Path) -> Path:
    """The project's wheel, built (with pip's build isolation, as ``pip install .`` builds it)
    from a copy of the sources in ``directory``; returns the ``.whl``'s path."""
    source = directory / "source"
    source.mkdir(parents=True)
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, source / name)
    wheels = directory / "wheels"
    done = pip(
        sys.executable, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(source), cwd=directory
    )
    if done.returncode != 0:
        skip_when_unreachable(done)
        raise RuntimeError(f"pip wheel failed:\n{done.stdout}{done.stderr}")
    (wheel,) = wheels.glob("dandizarr-*.whl")
    return wheel


def pip(python: str | Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def skip_when_unreachable(done: subprocess.CompletedProcess[str]) -> None:
    if _UNREACHABLE.search(done.stdout + done.stderr):
        skip_here_fail_in_ci(f"pip cannot reach a package index here:\n{done.stderr[-2000:]}")


@dataclass(frozen=True)
class Installed:
    """A virtual environment with the project installed from its wheel."""

    venv: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for its programs: the caller's, less every setting of the project
        and anything pointing into the checkout, with this venv's bin first on PATH."""
        return {
            **outside_env(),
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(self.venv),
            **extra,
        }


def outside_env() -> dict[str, str]:
    """The caller's environment without the project's settings, the checkout's venv or any
    PYTHONPATH (pytest's rootdir is on it when run as ``python -m pytest``)."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DANDIZARR_", "CELERY_", "DJANGO_"))
        and key not in {"DATABASE_URL", "PYTHONPATH", "VIRTUAL_ENV", "PROMETHEUS_MULTIPROC_DIR"}
    }


def install(wheel_or_url: str, directory: Path) -> Installed:
    """A fresh venv in ``directory`` with ``wheel_or_url`` (a path or URL, extras allowed)
    installed by pip, as an operator would."""
    venv.EnvBuilder(with_pip=True, clear=True).create(directory)
    installed = Installed(directory)
    done = pip(installed.python, "install", "--quiet", wheel_or_url, cwd=directory.parent)
    if done.returncode != 0:
        skip_when_unreachable(done)
        raise RuntimeError(f"pip install {wheel_or_url} failed:\n{done.stdout}{done.stderr}")
    return installed


def run(
    installed: Installed, *argv: str, cwd: Path, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess[str]:
    """``argv`` (a program of the venv, by name) in ``cwd``; fails the test on a non-zero exit."""
    done = subprocess.run(
        [str(installed.bin / argv[0]), *argv[1:]],
        cwd=cwd,
        env=installed.env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def sources_digest() -> str:
    """A digest of every file the wheel is built from: an install made from the same digest
    is the same install."""
    digest = hashlib.sha256()
    for name in SOURCES:
        origin = ROOT / name
        files = sorted(p for p in origin.rglob("*") if p.is_file()) if origin.is_dir() else [origin]
        for path in files:
            if "__pycache__" in path.parts:
                continue
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def server_installed_once() -> Installed:
    """The wheel of the sources as they are, installed with the extras the image installs
    (``server,storage``), once for every test and pytest process that asks (a lock and a
    marker in a directory named by the digest of the sources and of the running venv's
    distributions): the wheel-install test and the compose test run the same install, as the
    image does. The wheel is installed by pip; its dependencies are linked from the running
    venv (``tests.support.linked_venv``), or installed by pip when it lacks one."""
    home = Path(tempfile.gettempdir()) / "dandizarr-test-installs" / install_digest()
    home.mkdir(parents=True, exist_ok=True)
    installed = Installed(home / "venv")
    with open(home / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "installed").exists():
            shutil.rmtree(home / "build", ignore_errors=True)
            wheel = build_wheel(home / "build")
            if not linked_install(wheel, EXTRAS, installed.venv, outside_env()):
                install(f"{wheel}[{','.join(sorted(EXTRAS))}]", installed.venv)
            (home / "installed").write_text(str(wheel))
    return installed


def install_digest() -> str:
    """The sources' digest and the running venv's distributions (the names of its
    ``*.dist-info`` directories carry their versions): the linked install depends on both."""
    digest = hashlib.sha256(sources_digest().encode() + str(SITE_PACKAGES).encode())
    for name in sorted(e for e in os.listdir(SITE_PACKAGES) if e.endswith(".dist-info")):
        digest.update(name.encode() + b"\n")
    return digest.hexdigest()[:16]
