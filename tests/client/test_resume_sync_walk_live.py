"""Seeded random walks of an archive's life: upload a tree, change it locally (files deleted,
rewritten, added), start uploading the new tree and interrupt it, then resume, with or without
``--sync``. The server must end up holding exactly the local files (``--sync``: the files only
it held deleted, however many requests that takes) or the local files plus those only it
held, unchanged. Both merges (the server's listing against the local one, and the files only
the server holds) stream in path order, so the paths are drawn to sort awkwardly ("a-b" <
"a/x" < "a0" < "é"). The seed is printed; ``DANDIZARR_WALK_SEED`` replays one."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from dandizarr.client.progress import NullProgress
from tests.support.live_client import Service

# Names that sort around "/" and each other: a path below "a" sorts where "a/" does.
NAMES = ["a", "a-b", "a.c", "a0", "b", "é", "z"]


class Interrupted(Exception):
    pass


class InterruptAtBatch(NullProgress):
    """Stops the upload (an exception from its progress) when batch ``number`` starts."""

    def __init__(self, number: int) -> None:
        self.number = number

    def batch(self, number: int, paths: Sequence[str]) -> None:
        if number == self.number:
            raise Interrupted(f"interrupted at batch {number}")


def random_paths(rng: random.Random, count: int) -> set[str]:
    """``count`` file paths of up to three levels, none of them also a directory."""
    paths: set[str] = set()
    while len(paths) < count:
        path = "/".join(rng.choice(NAMES) for _ in range(rng.randint(1, 3)))
        directories = {path[:i] for i, c in enumerate(path) if c == "/"}
        if path in paths or directories & paths or any(p.startswith(path + "/") for p in paths):
            continue
        paths.add(path)
    return paths


def write(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def state(files: dict[str, bytes]) -> dict[str, tuple[int, str]]:
    return {path: (len(data), hashlib.md5(data).hexdigest()) for path, data in files.items()}


@pytest.mark.parametrize("walk", range(3))
def test_resume_and_sync_end_with_exactly_the_expected_files(
    service: Service, tmp_path: Path, walk: int
) -> None:
    seed = int(os.environ.get("DANDIZARR_WALK_SEED", random.randrange(1 << 32)))
    print(f"walk {walk}: seed {seed} (DANDIZARR_WALK_SEED={seed} replays it)")
    rng = random.Random(seed)
    before = {p: rng.randbytes(rng.randint(0, 64)) for p in random_paths(rng, rng.randint(8, 40))}
    root = tmp_path / f"walk{walk}.zarr"
    write(root, before)
    with service.client() as client:
        first = client.upload(root, dandiset=service.dandiset)
    assert first.ok, first
    zarr_id = first.zarr_id

    # The local tree changes: some files deleted (then only the server holds them), some
    # rewritten, some added (whose paths do not clash with those kept).
    paths = sorted(before)
    deleted = set(rng.sample(paths, rng.randint(0, len(paths) - 1)))
    kept = [p for p in paths if p not in deleted]
    now = {p: before[p] for p in kept}
    for path in rng.sample(kept, rng.randint(0, len(kept))):
        now[path] = rng.randbytes(rng.randint(0, 64))
    for path in random_paths(rng, rng.randint(0, 30)):
        clashes = {path[:i] for i, c in enumerate(path) if c == "/"} & now.keys() or any(
            p.startswith(path + "/") for p in now
        )
        if path not in now and not clashes:
            now[path] = rng.randbytes(rng.randint(0, 64))
    shutil.rmtree(root)
    write(root, now)
    # What only the server holds afterwards: deleted paths nothing local replaced.
    only_remote = {p: before[p] for p in deleted if p not in now}
    # A file and a directory of the same name cannot both be in one archive: a local file
    # whose path is a directory of a remote-only one (or the reverse) is left out of the walk.
    for path in list(now):
        if any(o.startswith(path + "/") or path.startswith(o + "/") for o in only_remote):
            del now[path]
            (root / path).unlink()

    # The upload of the new tree is interrupted at its second batch (7 files a batch).
    with service.client() as client, contextlib.suppress(Interrupted):
        client.upload(root, zarr_id=zarr_id, progress=InterruptAtBatch(2))

    sync = rng.random() < 0.5
    with service.client() as client:
        resumed = client.upload(root, zarr_id=zarr_id, sync=sync)
    assert resumed.ok, resumed
    held = service.remote_files(zarr_id)
    if sync:
        assert held == state(now)
        assert (resumed.deleted_files, resumed.remote_only_files) == (len(only_remote), 0)
    else:
        assert held == state({**only_remote, **now})
        assert (resumed.deleted_files, resumed.remote_only_files) == (0, len(only_remote))
    assert resumed.local_files == len(now)
