"""apply_changes: any sequence of batches leaves exactly the tree a full recompute gives."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dandizarr.checksums import (
    EMPTY_DIGEST,
    ChecksumFormatError,
    DirectoryListing,
    FileState,
    MemoryChecksumTree,
    TreeSummary,
    apply_changes,
    compute_tree,
    encode_checksum_file,
)
from tests.support.checksum_reference import reference_tree
from tests.support.checksum_strategies import consistent, md5s, paths, sizes

MD5 = "0123456789abcdef0123456789abcdef"
Model = dict[str, tuple[int, str]]
Batch = dict[str, FileState | None]

states = st.builds(FileState, size=sizes, md5=md5s)


def applied(model: Model, batch: Batch) -> Model:
    result = dict(model)
    for path, state in batch.items():
        if state is None:
            result.pop(path, None)
        else:
            result[path] = (state.size, state.md5)
    return result


def expected_files(model: Model) -> dict[str, bytes]:
    """Every .checksum, from compute_tree with on_directory (and checked against the reference)."""
    if not model:
        return {}
    seen: dict[str, bytes] = {}
    compute_tree(
        [(path, size, md5) for path, (size, md5) in model.items()],
        on_directory=lambda path, listing: seen.__setitem__(path, encode_checksum_file(listing)),
    )
    assert seen == {d: value[0] for d, value in reference_tree(model).items()}
    return seen


def check_tree(tree: MemoryChecksumTree, model: Model, summary: TreeSummary) -> None:
    assert tree.files == expected_files(model)
    if model:
        expected = compute_tree([(p, s, m) for p, (s, m) in model.items()])
        assert summary == expected
    else:
        assert summary == TreeSummary(EMPTY_DIGEST, 0, 0)


def draw_batch(data: st.DataObject, model: Model) -> Batch:
    kind = data.draw(st.sampled_from(["mixed", "remove_subtree", "overwrite"]))
    if kind == "remove_subtree" and model:
        # Empty a whole directory (or the whole archive), plus a few random changes.
        path = data.draw(st.sampled_from(sorted(model)))
        parts = path.split("/")
        prefix = "/".join(parts[: data.draw(st.integers(0, len(parts) - 1))])
        batch: Batch = {p: None for p in model if not prefix or p.startswith(prefix + "/")}
    elif kind == "overwrite" and model:
        chosen = data.draw(st.lists(st.sampled_from(sorted(model)), max_size=5))
        batch = {p: data.draw(states) for p in chosen}
    else:
        batch = {}
    # Random adds and removals (most removals of absent paths are no-ops).
    batch.update(data.draw(st.dictionaries(paths, st.none() | states, max_size=8)))
    return batch


@given(st.data())
def test_batches_match_full_recompute(data: st.DataObject) -> None:
    tree = MemoryChecksumTree()
    model: Model = {}
    for _ in range(data.draw(st.integers(1, 6), label="batches")):
        batch = draw_batch(data, model)
        new_model = applied(model, batch)
        if not consistent(new_model):
            before = dict(tree.files)
            with pytest.raises(ChecksumFormatError, match="both a file and a directory"):
                apply_changes(tree, batch)
            assert tree.files == before  # nothing written
            continue
        summary = apply_changes(tree, batch)
        model = new_model
        check_tree(tree, model, summary)

        # Re-applying the same batch changes nothing and writes nothing.
        tree.reset_counters()
        assert apply_changes(tree, batch) == summary
        assert (tree.writes, tree.deletes) == (0, 0)
        check_tree(tree, model, summary)


class CrashingTree(MemoryChecksumTree):
    """Fails on the n-th write/delete call: a server dying half-way through a batch."""

    def __init__(self, files: dict[str, bytes], fail_at: int) -> None:
        super().__init__(files=files)
        self.fail_at = fail_at
        self.calls = 0

    def _tick(self) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ConnectionError("crash")

    def write_many(self, listings: Mapping[str, DirectoryListing]) -> None:
        self._tick()
        super().write_many(listings)

    def delete_many(self, directories: Sequence[str]) -> None:
        self._tick()
        super().delete_many(directories)


@given(st.data())
def test_reapplying_after_a_crash_converges(data: st.DataObject) -> None:
    first = data.draw(
        st.dictionaries(paths, st.tuples(sizes, md5s), max_size=15).filter(consistent)
    )
    tree = MemoryChecksumTree()
    apply_changes(tree, {p: FileState(s, m) for p, (s, m) in first.items()})
    batch = draw_batch(data, first)
    model = applied(first, batch)
    if not consistent(model):
        return
    crashing = CrashingTree(dict(tree.files), fail_at=data.draw(st.integers(1, 6)))
    with contextlib.suppress(ConnectionError):
        apply_changes(crashing, batch)
    healthy = MemoryChecksumTree(files=crashing.files)
    check_tree(healthy, model, apply_changes(healthy, batch))


def test_request_shape_for_a_batch() -> None:
    tree = MemoryChecksumTree()
    apply_changes(
        tree,
        {f"0/{i}/{j}/{k}": FileState(1, MD5) for i in range(3) for j in range(3) for k in range(3)},
    )
    tree.reset_counters()
    summary = apply_changes(
        tree, {"0/1/2/0": FileState(2, MD5), "0/1/2/1": None, "0/2/0/9": FileState(3, MD5)}
    )
    # Affected: "0/1/2", "0/2/0", "0/1", "0/2", "0", "": each read once in one call, written once.
    assert (tree.read_calls, tree.reads) == (1, 6)
    assert tree.writes == 6
    assert tree.write_calls == 1  # every level in one call (one flush on a local disk)
    assert summary.count == 27 - 1 + 1


def test_empty_batch_reads_the_root_only() -> None:
    tree = MemoryChecksumTree()
    assert apply_changes(tree, {}) == TreeSummary(EMPTY_DIGEST, 0, 0)
    summary = apply_changes(tree, {"a/b": FileState(1, MD5)})
    tree.reset_counters()
    assert apply_changes(tree, {}) == summary
    assert (tree.reads, tree.writes, tree.deletes) == (1, 0, 0)


def test_emptying_the_archive_deletes_every_checksum() -> None:
    tree = MemoryChecksumTree()
    apply_changes(tree, {"a/b/c": FileState(1, MD5), "a/d": FileState(2, MD5)})
    assert set(tree.files) == {"", "a", "a/b"}
    assert apply_changes(tree, {"a/b/c": None, "a/d": None}) == TreeSummary(EMPTY_DIGEST, 0, 0)
    assert tree.files == {}


def test_removing_absent_or_directory_paths_is_a_no_op() -> None:
    tree = MemoryChecksumTree()
    summary = apply_changes(tree, {"a/b/c": FileState(1, MD5), "f": FileState(2, MD5)})
    before = dict(tree.files)
    tree.reset_counters()
    for path in ["x", "a/b/x", "a/b", "a", "f/g", "q/r/s"]:
        assert apply_changes(tree, {path: None}) == summary
    assert tree.files == before
    assert (tree.writes, tree.deletes) == (0, 0)


@pytest.mark.parametrize(
    "batch",
    [
        {"f/x": FileState(1, MD5)},  # under an existing file
        {"a": FileState(1, MD5)},  # over an existing directory
        {"n": FileState(1, MD5), "n/m": FileState(1, MD5)},  # both in one batch
    ],
)
def test_file_directory_conflicts_write_nothing(batch: Batch) -> None:
    tree = MemoryChecksumTree()
    apply_changes(tree, {"a/b/c": FileState(1, MD5), "f": FileState(2, MD5)})
    before = dict(tree.files)
    tree.reset_counters()
    with pytest.raises(ChecksumFormatError, match="both a file and a directory"):
        apply_changes(tree, batch)
    assert tree.files == before
    assert tree.write_calls == tree.delete_calls == 0


def test_replacing_a_file_by_a_directory_in_one_batch() -> None:
    tree = MemoryChecksumTree()
    apply_changes(tree, {"a": FileState(1, MD5)})
    summary = apply_changes(tree, {"a": None, "a/b": FileState(2, MD5)})
    check_tree(tree, {"a/b": (2, MD5)}, summary)


@pytest.mark.parametrize("path", ["/a", "a//b", "a/./b", "../a", "a/", "", ".", 5])
def test_bad_paths(path: str) -> None:
    with pytest.raises(ChecksumFormatError):
        apply_changes(MemoryChecksumTree(), {path: FileState(1, MD5)})


@pytest.mark.parametrize(("size", "md5"), [(-1, MD5), (1, MD5.upper()), (True, MD5), (1, "x")])
def test_bad_file_states(size: int, md5: str) -> None:
    with pytest.raises(ChecksumFormatError):
        FileState(size, md5)
