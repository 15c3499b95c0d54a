"""A fresh venv holding a wheel's declared dependencies and nothing else, linked from the
distributions the running venv already has instead of unpacked and compiled by pip again.

pip installing the server extra into an empty venv took about 60 CPU-s (docs/testing.md: the
installed wheel); this takes a few. What the venv proves is kept: the wheel itself is installed
by pip (not editable: its files, templates and static files included, are in the new venv), and
only the distributions its ``Requires-Dist`` names for the extras asked for, followed through
their own requirements, are importable there: a dependency the wheel forgot to declare is
missing, as in a pip install. The versions are the running venv's (installed by pip from the
same pyproject.toml), not the index's newest at the time: the image build resolves those.

A top-level name of site-packages that one distribution alone owns (a package, a module, its
``.dist-info``) is one symlink; a name several own (a namespace package) is a directory of
links to the needed distributions' files. Scripts of ``bin/`` are written again for the new
venv's interpreter (their shebang names the running venv's).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from collections import defaultdict
from collections.abc import Set
from email.parser import Parser
from importlib.metadata import Distribution, distributions
from pathlib import Path, PurePosixPath
from zipfile import ZipFile

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Resolved: the links then name the venv itself, not a worktree's link to it.
SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"]).resolve()
BIN = Path(sysconfig.get_paths()["scripts"]).resolve()


def wheel_requirements(wheel: Path) -> tuple[str, list[str]]:
    """The wheel's distribution name and its ``Requires-Dist`` lines."""
    with ZipFile(wheel) as archive:
        (metadata,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(archive.read(metadata).decode())
    return message["Name"], message.get_all("Requires-Dist") or []


def dependency_closure(wheel: Path, extras: Set[str]) -> list[Distribution] | None:
    """The running venv's distributions the wheel needs with ``extras``, followed through their
    own requirements; None when one is missing or of a version the requirement excludes."""
    own_name, own_requirements = wheel_requirements(wheel)
    installed = {
        canonicalize_name(d.metadata["Name"]): d for d in distributions(path=[str(SITE_PACKAGES)])
    }
    needed: dict[str, Distribution] = {}
    seen: set[tuple[str, str]] = set()
    pending: list[tuple[str, str]] = [(canonicalize_name(own_name), e) for e in {"", *extras}]
    while pending:
        name, extra = pending.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        lines = own_requirements if name == canonicalize_name(own_name) else needed[name].requires
        for line in lines or []:
            requirement = Requirement(line)
            if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
                continue
            wanted = canonicalize_name(requirement.name)
            if wanted != canonicalize_name(own_name):
                distribution = installed.get(wanted)
                if (
                    distribution is None
                    or distribution.files is None  # no RECORD: its files are unknown
                    or not requirement.specifier.contains(distribution.version, prereleases=True)
                ):
                    return None
                needed[wanted] = distribution
            pending.extend((wanted, e) for e in {"", *requirement.extras})
    return list(needed.values())


def link_into(target: Path, needed: list[Distribution]) -> None:
    """``target`` (a new venv without pip) given the ``needed`` distributions' files."""
    site = Path(sysconfig.get_paths(vars={"base": str(target), "platbase": str(target)})["purelib"])
    owners: dict[str, set[str]] = defaultdict(set)
    for distribution in distributions(path=[str(SITE_PACKAGES)]):
        for top in _tops(distribution):
            owners[top].add(distribution.metadata["Name"])
    for distribution in needed:
        files = distribution.files or []
        for top in _tops(distribution):
            if len(owners[top]) == 1:
                (site / top).symlink_to(SITE_PACKAGES / top)
                continue
            for file in files:
                if file.parts[0] == top and "__pycache__" not in file.parts:
                    (site / file).parent.mkdir(parents=True, exist_ok=True)
                    if not (site / file).exists():
                        (site / file).symlink_to(SITE_PACKAGES / file)
        _scripts(distribution, target / "bin")


def _tops(distribution: Distribution) -> set[str]:
    return {
        file.parts[0] for file in distribution.files or [] if file.parts and file.parts[0] != ".."
    }


def _scripts(distribution: Distribution, bin_dir: Path) -> None:
    """The distribution's programs of ``bin/``, for the new venv: entry points written as pip
    writes them, other scripts with their shebang pointed at the new interpreter, binaries
    linked."""
    python = bin_dir / "python"
    entry_points = {
        e.name: e
        for e in distribution.entry_points
        if e.group in ("console_scripts", "gui_scripts")
    }
    for name, entry in entry_points.items():
        module, _, attribute = entry.value.partition(":")
        call = attribute.strip() or "main"
        _write_script(
            bin_dir / name,
            f"#!{python}\nimport sys\nfrom {module.strip()} import {call.split('.')[0]}\n"
            f"if __name__ == '__main__':\n    sys.exit({call}())\n",
        )
    for file in distribution.files or []:
        path = PurePosixPath(*file.parts)
        if path.parts[0] != ".." or path.parent.name != "bin" or path.name in entry_points:
            continue
        origin = BIN / path.name
        if not origin.exists() or (bin_dir / path.name).exists():
            continue
        with open(origin, "rb") as script:
            first = script.readline()
        if first.startswith(b"#!") and b"python" in first:
            rest = origin.read_bytes()[len(first) :]
            _write_script(bin_dir / path.name, f"#!{python}\n", rest)
        else:
            (bin_dir / path.name).symlink_to(origin)


def _write_script(path: Path, text: str, rest: bytes = b"") -> None:
    path.write_bytes(text.encode() + rest)
    path.chmod(0o755)


def linked_install(wheel: Path, extras: Set[str], target: Path, env: dict[str, str]) -> bool:
    """``target``, a new venv with ``wheel`` installed by pip and its dependencies with
    ``extras`` linked from the running venv; False (nothing made) when the running venv lacks
    one of them."""
    needed = dependency_closure(wheel, extras)
    if needed is None:
        return False
    venv.EnvBuilder(with_pip=False, clear=True).create(target)
    link_into(target, needed)
    python = str(target / "bin" / "python")
    for command in (
        ["install", "--no-deps", "--quiet", str(wheel)],
        ["check"],  # every installed distribution's own requirements are there
    ):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--disable-pip-version-check",
                "--python",
                python,
                *command,
            ],
            cwd=target.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip {' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return True
