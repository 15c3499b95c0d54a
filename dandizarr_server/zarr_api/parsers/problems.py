"""Checks shared by the batch bodies: the batch's size and its paths, problems named per path."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings

from dandizarr.checksums.paths import folded_clashes, portable_path_problem
from dandizarr_server.zarr_api.domain.paths import path_problem
from dandizarr_server.zarr_api.edge.echo import echo, refused
from dandizarr_server.zarr_api.edge.exceptions import ValidationFailed

# One problem of a body: {"path": ..., "problem": ...}; a 400 lists them all in "paths".
Problem = dict[str, object]


def invalid(what: str, problems: Sequence[Problem]) -> ValidationFailed:
    """A 400 naming the first few offending paths in its message and all of them in ``paths``
    (each as a refused value; the error names as many as it may, and their count:
    edge/echo.py)."""
    shown = "; ".join(f"{echo(p['path'])} {p['problem']}" for p in problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    paths = [{**p, "path": refused(p["path"])} for p in problems]
    return ValidationFailed(f"invalid {what}: {shown}{more}", paths=paths)


def check_batch_size(count: int) -> None:
    limit = settings.DANDIZARR_BATCH_LIMIT
    if count == 0:
        raise ValidationFailed("the batch is empty: give at least one file")
    if count > limit:
        raise ValidationFailed(f"the batch has {count} files; at most {limit} are allowed")


def check_paths(paths: Sequence[object]) -> list[str]:
    """The paths, once each is a valid archive path, with names every filesystem can hold
    (dandizarr.checksums.paths: portable names, no two differing only by case or normalization),
    that
    appears once in the batch."""
    problems: list[Problem] = [
        {"path": p, "problem": problem}
        for p in paths
        if (problem := path_problem(p) or portable_path_problem(str(p)))
    ]
    problems += _repeated(paths)
    if not problems:
        problems += [
            {"path": path, "problem": f"differs from {other!r} only by case or Unicode form"}
            for path, other in folded_clashes([str(p) for p in paths]).items()
        ]
    if problems:
        raise invalid("paths", problems)
    return [str(p) for p in paths]


def check_unique(paths: Sequence[str]) -> None:
    """Paths already found valid: a 400 unless each appears once in the batch."""
    if problems := _repeated(paths):
        raise invalid("paths", problems)


def _repeated(paths: Sequence[object]) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for path in paths:
        if not isinstance(path, str):
            continue  # named by the path checks (and a list or an object cannot be in a set)
        if path in seen:
            problems.append({"path": path, "problem": "appears more than once in the batch"})
        seen.add(path)
    return problems
