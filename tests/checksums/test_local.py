"""Local files: path order, symlinks, parallel md5 in input order."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from dandizarr.checksums import compute_tree
from dandizarr.checksums.local import (
    FILES_PER_TASK,
    iter_local_files,
    iter_local_paths,
    md5_file,
    md5_files,
)
from tests.support.checksum_reference import reference_tree

TREE = {
    "a/b/x": b"one",
    "a/b!/y": b"two",
    "a/c": b"",
    "a-b/z": b"three" * 1000,
    "a.b": b"4",
    ".zattrs": b"{}",
    "B/\u00e9": b"e",
}


def make_tree(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def test_iter_local_files_sorted_by_path(tmp_path: Path) -> None:
    make_tree(tmp_path, TREE)
    listed = list(iter_local_files(tmp_path))
    assert [path for path, _ in listed] == sorted(TREE)  # code-point order of whole paths
    assert dict(listed) == {path: len(data) for path, data in TREE.items()}


def test_symlinks_followed_and_non_files_skipped(tmp_path: Path) -> None:
    make_tree(tmp_path / "data", {"d/f": b"x"})
    root = tmp_path / "root"
    root.mkdir()
    (root / "file").symlink_to(tmp_path / "data" / "d" / "f")
    (root / "dir").symlink_to(tmp_path / "data" / "d")
    (root / "broken").symlink_to(tmp_path / "missing")
    os.mkfifo(root / "fifo")
    (root / "empty").mkdir()
    assert list(iter_local_files(root)) == [("dir/f", 1), ("file", 1)]


def test_iter_local_paths_lists_the_same_files_looking_only_at_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The paths of ``iter_local_files`` (symlinks followed, non-files left out, path order),
    with no file's inode read: ``stat`` is called for the directories only."""
    make_tree(tmp_path / "root", TREE)
    make_tree(tmp_path / "data", {"d/f": b"x"})
    root = tmp_path / "root"
    (root / "file").symlink_to(tmp_path / "data" / "d" / "f")
    (root / "dir").symlink_to(tmp_path / "data" / "d")
    (root / "broken").symlink_to(tmp_path / "missing")
    os.mkfifo(root / "fifo")
    expected = [path for path, _ in iter_local_files(root)]
    assert expected == sorted([*TREE, "dir/f", "file"])
    stated: list[str] = []
    real_stat = os.stat

    def counting_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        stated.append(os.fsdecode(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting_stat)
    assert list(iter_local_paths(root)) == expected
    # The root, then each directory below it once (by name, from its parent's descriptor).
    below = [name for name in stated if name != str(root)]
    assert sorted(below) == sorted(["a", "b", "a-b", "B", "b!", "dir"])


def test_directory_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match="loop"):
        list(iter_local_files(tmp_path))


def test_a_file_gone_during_the_walk_is_named_by_its_whole_path(tmp_path: Path) -> None:
    make_tree(tmp_path, {"a/b/one": b"1", "a/b/two": b"2"})
    walk = iter_local_files(tmp_path)
    assert next(walk) == ("a/b/one", 1)
    (tmp_path / "a" / "b" / "two").unlink()  # listed with its directory, gone before its stat
    with pytest.raises(FileNotFoundError) as raised:
        next(walk)
    assert raised.value.filename == os.path.join(tmp_path, "a", "b", "two")


def test_the_walk_closes_the_directories_it_opens(tmp_path: Path) -> None:
    make_tree(tmp_path, {f"d{i}/e/f": b"x" for i in range(20)})
    before = len(os.listdir("/proc/self/fd"))
    assert len(list(iter_local_files(tmp_path))) == 20
    walk = iter_local_files(tmp_path)
    next(walk)
    walk.close()  # a consumer that stops early
    assert len(os.listdir("/proc/self/fd")) == before


def test_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        list(iter_local_files(tmp_path / "f"))
    with pytest.raises(FileNotFoundError):
        list(iter_local_files(tmp_path / "missing"))


@pytest.mark.parametrize("jobs", [1, 2, 7])
def test_md5_files_in_order(tmp_path: Path, jobs: int) -> None:
    # More files than the tasks in flight hold (4 * jobs tasks of FILES_PER_TASK files).
    count = 4 * 7 * FILES_PER_TASK + 5
    files = {f"f{i:04d}": os.urandom(i % 97 * 37) for i in range(count)}
    make_tree(tmp_path, files)
    order = sorted(files, reverse=True)  # any input order is kept
    result = list(md5_files(tmp_path, iter(order), jobs=jobs))
    assert result == [(p, len(files[p]), hashlib.md5(files[p]).hexdigest()) for p in order]


def test_md5_file_large(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 5)  # several read chunks
    (tmp_path / "big").write_bytes(data)
    assert md5_file(tmp_path / "big") == hashlib.md5(data).hexdigest()


def test_local_tree_matches_reference(tmp_path: Path) -> None:
    make_tree(tmp_path, TREE)
    paths = (path for path, _ in iter_local_files(tmp_path))
    summary = compute_tree(md5_files(tmp_path, paths, jobs=2))
    expected = reference_tree({p: (len(d), hashlib.md5(d).hexdigest()) for p, d in TREE.items()})
    assert summary.digest == expected[""][1]
