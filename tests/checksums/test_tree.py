"""compute_tree against the naive reference, in every input order, and its input checks."""

from __future__ import annotations

import random
import sys
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dandizarr.checksums import (
    ChecksumFormatError,
    DirectoryListing,
    UnsortedEntriesError,
    compute_tree,
    encode_checksum_file,
)
from tests.support.checksum_reference import reference_tree
from tests.support.checksum_strategies import MD5, entries_of, file_sets
from tests.support.processes import Processes


def collect(entries: object) -> tuple[object, dict[str, bytes], list[str]]:
    seen: dict[str, bytes] = {}
    order: list[str] = []

    def on_directory(path: str, listing: DirectoryListing) -> None:
        order.append(path)
        seen[path] = encode_checksum_file(listing)

    summary = compute_tree(entries, on_directory=on_directory)  # type: ignore[arg-type]
    return summary, seen, order


def check_against_reference(files: dict[str, tuple[int, str]], entries: object) -> None:
    expected = reference_tree(files)
    summary, seen, order = collect(entries)
    assert seen == {directory: value[0] for directory, value in expected.items()}
    assert len(order) == len(set(order))  # once per directory
    for directory in order:  # children before parents
        parts = directory.split("/")
        ancestors = ["/".join(parts[:i]) for i in range(len(parts))] if directory else []
        assert all(order.index(a) > order.index(directory) for a in ancestors)
    _, digest, count, size = expected[""]
    assert (summary.digest, summary.count, summary.size) == (digest, count, size)  # type: ignore[attr-defined]


@given(file_sets)
def test_sorted_stream_matches_reference(files: dict[str, tuple[int, str]]) -> None:
    check_against_reference(files, iter(sorted(entries_of(files))))


@given(file_sets, st.randoms(use_true_random=False))
def test_shuffled_list_matches_reference(
    files: dict[str, tuple[int, str]], rnd: random.Random
) -> None:
    entries = entries_of(files)
    rnd.shuffle(entries)
    check_against_reference(files, entries)
    check_against_reference(files, tuple(entries))


@given(file_sets)
def test_per_component_order_streams(files: dict[str, tuple[int, str]]) -> None:
    # os.walk-style order (sorted per path component) keeps subtrees contiguous: it streams.
    entries = sorted(entries_of(files), key=lambda e: e[0].split("/"))
    check_against_reference(files, iter(entries))


def test_iterator_that_leaves_and_reenters_a_directory() -> None:
    entries = [("a/x", 1, MD5), ("b/y", 1, MD5), ("a/z", 1, MD5)]
    with pytest.raises(UnsortedEntriesError, match="'a'"):
        compute_tree(iter(entries))
    # As a list it is sorted first.
    assert compute_tree(entries) == compute_tree(sorted(entries))


def test_files_interleaved_with_subdirectories() -> None:
    # "a/b" < "a/b!/c" < "a/c": the files of "a" come on both sides of a subdirectory.
    files = {"a/b": (1, MD5), "a/b!/c": (2, MD5), "a/c": (3, MD5), "a/b-/d": (4, MD5)}
    check_against_reference(files, iter(sorted(entries_of(files))))


def test_large_flat_directory_matches_reference() -> None:
    files = {f"d/{i:05d}é" if i % 7 == 0 else f"d/{i}": (i, MD5) for i in range(5000)}
    check_against_reference(files, iter(sorted(entries_of(files))))


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([("a", 1, MD5), ("a", 2, MD5)], "duplicate"),
        ([("d/a", 1, MD5), ("d/a", 1, MD5)], "duplicate"),
        ([("a", 1, MD5), ("a/b", 2, MD5)], "both a file and a directory"),
        ([("x/a/b", 1, MD5), ("x/a", 2, MD5)], "both a file and a directory"),
        ([("/a", 1, MD5)], "relative"),
        ([("/a/b", 1, MD5)], "relative"),
        ([("a//b", 1, MD5)], "segment"),
        ([("a/./b", 1, MD5)], "segment"),
        ([("../b", 1, MD5)], "segment"),
        ([("a/", 1, MD5)], "invalid file name"),
        ([("", 1, MD5)], "invalid file name"),
        ([("a/..", 1, MD5)], "invalid file name"),
        ([(".", 1, MD5)], "invalid file name"),
        ([(".", 1, MD5), (".a", 1, MD5)], "invalid file name"),
        ([(n, 1, MD5) for n in ["-", ".", "..", ".a"]], "invalid file name"),
        ([("d/-", 1, MD5), ("d/..", 1, MD5), ("d/.a", 1, MD5)], "invalid file name"),
        ([("a", -1, MD5)], "non-negative"),
        ([("a", 1.5, MD5)], "non-negative"),
        ([("a", True, MD5)], "non-negative"),
        ([("a", "1", MD5)], "non-negative"),
        ([("a", 1, MD5.upper())], "not an md5"),
        ([("a", 1, MD5 + "-2")], "not an md5"),
        ([("a", 1, MD5[:-1]), ("b", 1, MD5 + "0")], "not an md5"),
        ([("a", 1, None)], "not an md5"),
        ([("a", 1)], "malformed entry"),
        ([(b"a", 1, MD5)], "malformed entry"),
        ([(5, 1, MD5)], "malformed entry"),
    ],
)
def test_bad_entries(entries: list[tuple[str, int, str]], message: str) -> None:
    with pytest.raises(ChecksumFormatError, match=message):
        compute_tree(entries)
    with pytest.raises(ChecksumFormatError, match=message):
        compute_tree(iter(entries))


def test_errors_from_the_iterator_and_callback_pass_through() -> None:
    def entries():  # type: ignore[no-untyped-def]
        yield ("a", 1, MD5)
        raise TypeError("from the iterator")

    with pytest.raises(TypeError, match="from the iterator"):
        compute_tree(entries())

    def callback(path: str, listing: DirectoryListing) -> None:
        raise TypeError("from the callback")

    with pytest.raises(TypeError, match="from the callback"):
        compute_tree([("d/a", 1, MD5)], on_directory=callback)


def test_empty_root_is_reported() -> None:
    _, _, order = collect(iter([]))
    assert order == [""]


def test_sorted_stream_memory_is_bounded_by_fan_out_not_size() -> None:
    # 40,000 files in 400 directories of 100: streaming holds one directory's columns at a
    # time; buffering the input (or the finished listings) would take several MB.
    def entries():  # type: ignore[no-untyped-def]
        for i in range(400):
            for k in range(100):
                yield f"{i:03d}/{k:03d}", 4096, MD5

    tracemalloc.start()
    try:
        summary = compute_tree(entries())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary.count == 40_000
    assert peak < 1_000_000, peak


def test_library_does_not_import_django(processes: Processes) -> None:
    code = (
        "import sys, dandizarr.checksums.local, dandizarr.checksums.paths,"
        " dandizarr.checksums.update;"
        " assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'dandizarr_server')"
        " or m.startswith(('dandizarr.client', 'dandizarr.commands'))]"
    )
    processes.run([sys.executable, "-c", code], check=True)
