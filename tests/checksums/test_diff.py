"""``tree_changes`` (dandizarr.checksums.diff) against the plain set difference of two trees'
files, for trees hypothesis draws (files and directories of the same name across the two,
deep paths, empty trees); pages resumed at any path give the same changes; the listings read
are those of the directories that differ, never the others."""

from __future__ import annotations

import hashlib

from hypothesis import example, given
from hypothesis import strategies as st

from dandizarr.checksums import DirectoryListing, compute_tree
from dandizarr.checksums.diff import Change, tree_changes

NAMES = st.sampled_from(["a", "a-b", "a.c", "b", "z", "é"])
PATHS = st.lists(NAMES, min_size=1, max_size=4).map("/".join)
TREES = st.dictionaries(PATHS, st.binary(max_size=3), max_size=12)


def consistent(files: dict[str, bytes]) -> dict[str, bytes]:
    """The files of a tree: a path that is a file is no directory of another's."""
    paths = sorted(files)
    return {p: files[p] for p in paths if not any(q.startswith(p + "/") for q in paths if q != p)}


class Reader:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.listings: dict[str, DirectoryListing] = {}
        entries = [(p, len(b), hashlib.md5(b).hexdigest()) for p, b in sorted(files.items())]
        if entries:
            compute_tree(entries, on_directory=self.listings.__setitem__)
        self.read: list[str] = []

    def __call__(self, directory: str) -> DirectoryListing | None:
        self.read.append(directory)
        return self.listings.get(directory)


def expected(before: dict[str, bytes], after: dict[str, bytes]) -> set[tuple[str, str]]:
    kinds = {(p, "deleted") for p in before.keys() - after.keys()}
    kinds |= {(p, "added") for p in after.keys() - before.keys()}
    return kinds | {(p, "modified") for p in before.keys() & after.keys() if before[p] != after[p]}


def order(path: str) -> tuple[str, ...]:
    return tuple(path.split("/"))


@given(TREES.map(consistent), TREES.map(consistent))
def test_the_changes_are_the_difference_of_the_files_in_tree_order(
    before: dict[str, bytes], after: dict[str, bytes]
) -> None:
    changes = list(tree_changes(Reader(before), Reader(after)))
    assert {(c.path, c.kind) for c in changes} == expected(before, after)
    assert [c.path for c in changes] == sorted((c.path for c in changes), key=order)
    for change in changes:
        old, new = before.get(change.path), after.get(change.path)
        assert change.size_before == (None if old is None else len(old))
        assert change.size_after == (None if new is None else len(new))
        assert change.md5_after == (None if new is None else hashlib.md5(new).hexdigest())


@given(TREES.map(consistent), TREES.map(consistent), st.integers(1, 3))
@example({"a/x": b"1", "b/y": b"1"}, {"a/x": b"2", "b/y": b"2", "b/z": b"1"}, 2)
def test_pages_resumed_after_their_last_path_give_the_same_changes(
    before: dict[str, bytes], after: dict[str, bytes], page: int
) -> None:
    whole = list(tree_changes(Reader(before), Reader(after)))
    paged: list[Change] = []
    cursor = ""
    while True:
        readers = Reader(before), Reader(after)
        changes = tree_changes(*readers, after=cursor)
        chunk = [c for _, c in zip(range(page), changes, strict=False)]
        # A page resumed never opens a directory whose paths all sort before its cursor.
        for read in (*readers[0].read, *readers[1].read):
            assert not read or order(read) >= order(cursor)[: len(order(read))], (read, cursor)
        if not chunk:
            break
        paged += chunk
        cursor = chunk[-1].path
    assert paged == whole


@given(TREES.map(consistent), st.sampled_from(["x/new", "b", "a/b/z"]))
def test_only_the_directories_that_differ_are_read(files: dict[str, bytes], path: str) -> None:
    """One file changed: the listings read are the root's and those of the directories above
    it, on each side; no other directory is opened."""
    changed = consistent({**files, path: b"changed!"})
    before, after = Reader(files), Reader(changed)
    list(tree_changes(before, after))
    above = {""} | {"/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)}
    assert set(before.read) <= above and set(after.read) <= above
