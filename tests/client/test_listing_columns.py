"""The upload listing's columns (paths and records in temporary files) give back exactly what
was put in: every path (non-ASCII and undecodable names included) by position and in order,
sizes of any size, digests written one by one or in runs."""

from __future__ import annotations

import hashlib
import os
from array import array

import pytest

from dandizarr.client import listing_columns
from dandizarr.client.listing_columns import PathColumn, RecordColumn, _widened
from dandizarr.client.upload_types import LocalListing

PATHS = ["", "a", "é/ü", "日本/語", "x\udcff\udc80y", "😀", "z" * 300]


def test_paths_round_trip_by_position_and_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing_columns, "_BLOCK", 5)  # paths across and beyond read blocks
    column = PathColumn()
    for path in PATHS * 3:
        column.append(path)
    column.seal()
    try:
        assert len(column) == 3 * len(PATHS)
        assert list(column) == PATHS * 3
        assert [column[i] for i in range(len(column))] == PATHS * 3
        assert column[-1] == PATHS[-1]
    finally:
        column.close()


def test_offsets_widen_to_8_bytes_past_4_gib_of_names() -> None:
    column = array("I", [1, 2])
    assert _widened(column, (1 << 32) - 1) is column
    widened = _widened(column, 1 << 32)
    assert widened.typecode == "q" and list(widened) == [1, 2]


def test_records_written_singly_and_in_runs_read_back_in_order() -> None:
    count = 70_000  # more than two read blocks
    digests = [hashlib.md5(str(i).encode()).digest() for i in range(count)]
    sizes = [i * 7919 if i % 5 else (5 << 40) + i for i in range(count)]
    column = RecordColumn()
    for i in range(count):
        column.append(sizes[i] if i % 3 else 0)  # listed sizes, some replaced when hashed
    column.seal()
    try:
        assert list(column)[1] == (sizes[1], bytes(16))  # listed, not hashed yet
        column.write(0, sizes[0], digests[0])
        # Runs, gaps and a reversed order: each position gets its own record.
        column.write_many((i, sizes[i], digests[i]) for i in range(count - 1, 0, -1) if i % 7)
        column.write_many((i, sizes[i], digests[i]) for i in range(7, count, 7))
        assert column.read(12345) == (sizes[12345], digests[12345])
        assert list(column) == list(zip(sizes, digests, strict=True))
    finally:
        column.close()


def test_a_listing_keeps_its_columns_outside_memory_and_cleans_up() -> None:
    listing = LocalListing([("a", 1), ("b", 2), ("c", 3)])
    assert listing.total_bytes == 6 and listing.size(1) == 2
    listing.set_hashed_many([(2, 30, "22" * 16), (0, 10, "00" * 16)])
    assert [listing.is_hashed(i) for i in range(3)] == [True, False, True]
    listing.set_hashed(1, 20, "11" * 16)
    assert list(listing.entries()) == [
        ("a", 10, "00" * 16),
        ("b", 20, "11" * 16),
        ("c", 30, "22" * 16),
    ]
    descriptors = (listing.paths._names.fd, listing.records._records.fd)
    listing.close()
    for fd in descriptors:
        with pytest.raises(OSError):
            os.fstat(fd)
