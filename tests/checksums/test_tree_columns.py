"""compute_tree_columns (chunks of columns) against compute_tree, and the listing parser that
feeds it (parse_listing_columns) against parse_listing, line for line and error for error."""

from __future__ import annotations

import io
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dandizarr.checksums import (
    ChecksumFormatError,
    DirectoryListing,
    compute_tree,
    encode_checksum_file,
)
from dandizarr.checksums.tree import Columns, compute_tree_columns
from dandizarr.commands.checksum import parse_listing, parse_listing_columns
from tests.support.checksum_strategies import MD5, entries_of, file_sets

Entries = list[tuple[str, int, str]]


def chunked(entries: Entries, rnd: random.Random) -> list[Columns]:
    """The entries as columns, cut at random places (empty chunks included)."""
    cuts = sorted(rnd.randrange(len(entries) + 1) for _ in range(rnd.randrange(4)))
    chunks = []
    for start, end in zip([0, *cuts], [*cuts, len(entries)], strict=True):
        part = entries[start:end]
        chunks.append(([e[0] for e in part], [e[1] for e in part], [e[2] for e in part]))
    return chunks


def run(compute: object, data: object) -> tuple[object, list[tuple[str, bytes]]]:
    reported: list[tuple[str, bytes]] = []

    def on_directory(path: str, listing: DirectoryListing) -> None:
        reported.append((path, encode_checksum_file(listing)))

    try:
        summary = compute(data, on_directory=on_directory)  # type: ignore[operator]
    except ChecksumFormatError as error:
        # A malformed entry's message ends with Python's own words for it: those may differ.
        return (type(error), str(error).partition("): ")[0]), reported
    return summary, reported


def same_as_stream(entries: Entries, rnd: random.Random) -> None:
    expected = run(compute_tree, iter(entries))
    assert run(compute_tree_columns, chunked(entries, rnd)) == expected


@given(file_sets, st.randoms(use_true_random=False))
def test_sorted_chunks_match_the_stream(
    files: dict[str, tuple[int, str]], rnd: random.Random
) -> None:
    same_as_stream(sorted(entries_of(files)), rnd)


@given(file_sets, st.randoms(use_true_random=False))
def test_grouped_and_shuffled_chunks_match_the_stream(
    files: dict[str, tuple[int, str]], rnd: random.Random
) -> None:
    # Sorted per component (grouped, not sorted), and shuffled (not even grouped: the same
    # UnsortedEntriesError as the stream, or a result when it happens to be grouped).
    same_as_stream(sorted(entries_of(files), key=lambda e: e[0].split("/")), rnd)
    entries = entries_of(files)
    rnd.shuffle(entries)
    same_as_stream(entries, rnd)


@pytest.mark.parametrize(
    "entries",
    [
        [("a", 1, MD5), ("a", 2, MD5)],
        [("d/a", 1, MD5), ("d/a", 1, MD5)],
        [("a", 1, MD5), ("a/b", 2, MD5)],
        [("x/a/b", 1, MD5), ("x/a", 2, MD5)],
        [("/a", 1, MD5)],
        [("b", 1, MD5), ("/a", 1, MD5)],
        [("/a/b", 1, MD5)],
        [("a//b", 1, MD5)],
        [("a/./b", 1, MD5)],
        [("../b", 1, MD5)],
        [("a/", 1, MD5)],
        [("", 1, MD5)],
        [("a/..", 1, MD5)],
        [(".", 1, MD5), (".a", 1, MD5)],
        [("d/-", 1, MD5), ("d/..", 1, MD5), ("d/.a", 1, MD5)],
        [("a", -1, MD5)],
        [("a", True, MD5)],
        [("a", "1", MD5)],
        [("a", 1, MD5.upper())],
        [("a", 1, MD5 + "-2")],
        [("a", 1, MD5[:-1]), ("b", 1, MD5 + "0")],
        [("a", 1, None)],
        [(b"a", 1, MD5)],
        [(5, 1, MD5)],
        [("a/x", 1, MD5), ("b/y", 1, MD5), ("a/z", 1, MD5)],
    ],
)
def test_bad_entries_fail_as_the_stream_does(entries: Entries) -> None:
    expected = run(compute_tree, iter(entries))
    assert isinstance(expected[0], tuple), "the stream accepts it"
    for seed in range(5):
        assert run(compute_tree_columns, chunked(entries, random.Random(seed))) == expected


def test_columns_of_different_lengths() -> None:
    with pytest.raises(ChecksumFormatError, match="differ in length"):
        compute_tree_columns([(["a"], [1, 2], [MD5])])


# --- the listing parser ----------------------------------------------------------------------

LINE_PARTS = st.sampled_from(
    ["a", "b/c", "é/x", "", "/", "\t", "\r", "\n", "\r\n", "12", "-1", "x", "²", MD5, MD5[:31]]
)
lines = st.lists(LINE_PARTS, min_size=0, max_size=6).map("".join)


def parsed(parse: object, text: str, **kwargs: int) -> object:
    try:
        result = parse(io.StringIO(text, newline="\n"), **kwargs)  # type: ignore[operator]
        return [tuple(e) for e in result]
    except ChecksumFormatError as error:
        return str(error)


def flatten(chunks: object) -> Entries:
    """The entries of chunks, each size (a parsed listing's decimal text) back to an int."""
    entries = []
    for paths, sizes, md5s in chunks:  # type: ignore[attr-defined]
        assert all(type(size) is str and str(int(size)) == size for size in sizes)
        entries += zip(paths, map(int, sizes), md5s, strict=True)
    return entries


def columns_parsed(text: str, block_chars: int) -> object:
    try:
        return flatten(parse_listing_columns(io.BytesIO(text.encode()), block_chars))
    except ChecksumFormatError as error:
        return str(error)


@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.sampled_from(["a", "b/c", "d\r", "é/f", "", "/g"]),
                sizes_st := st.integers(0, 10**12),
                st.just(MD5),
            ).map(lambda t: f"{t[0]}\t{t[1]}\t{t[2]}\n"),
            lines,
        ),
        max_size=12,
    ).map("".join),
    st.integers(1, 200),
)
def test_listing_columns_parse_as_the_lines_do(text: str, block_chars: int) -> None:
    expected = parsed(parse_listing, text)
    assert columns_parsed(text, block_chars) == expected
    assert columns_parsed(text, 1 << 22) == expected


def test_listing_columns_crlf_and_no_final_newline() -> None:
    text = f"a\t1\t{MD5}\r\nb/c\t007\t{MD5}\r\nd\t3\t{MD5}"
    assert columns_parsed(text, 7) == [("a", 1, MD5), ("b/c", 7, MD5), ("d", 3, MD5)]
    assert columns_parsed(text, 1 << 22) == parsed(parse_listing, text)


def test_listing_columns_name_the_bad_line_across_blocks() -> None:
    text = "".join(f"{i}\t1\t{MD5}\n" for i in range(100)) + "x\t1\n"
    assert columns_parsed(text, 64) == "line 101: expected 'path<TAB>size<TAB>md5', got 2 field(s)"


def test_listing_columns_sizes_are_canonical_text() -> None:
    # Leading zeros are dropped whether the block takes the fast path or the line-by-line one.
    text = f"a\t0\t{MD5}\nb\t010\t{MD5}\nc\t100\t{MD5}\n"
    chunks = list(parse_listing_columns(io.BytesIO(text.encode())))
    assert [list(sizes) for _, sizes, _ in chunks] == [["0", "10", "100"]]
    assert columns_parsed(text + "bad\n", 1 << 22) == (
        "line 4: expected 'path<TAB>size<TAB>md5', got 1 field(s)"
    )


@given(file_sets, st.randoms(use_true_random=False))
def test_checked_text_sizes_match_the_stream(
    files: dict[str, tuple[int, str]], rnd: random.Random
) -> None:
    # A parsed listing's sizes as text (checked=True): the same tree as ints.
    entries = sorted(entries_of(files))
    expected = run(compute_tree, iter(entries))
    chunks = [(p, [str(s) for s in sizes], m) for p, sizes, m in chunked(entries, rnd)]
    assert run(lambda c, **kw: compute_tree_columns(c, checked=True, **kw), chunks) == expected


def test_text_sizes_need_checked() -> None:
    with pytest.raises(ChecksumFormatError, match="size must be a non-negative integer"):
        compute_tree_columns([(["a"], ["1"], [MD5])])
