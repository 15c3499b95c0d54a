"""Reading the member files of shards: whole files, whatever size the listing gave."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from dandizarr.client.member_reads import RUN_FILES, MemberReader, read_file
from tests.support.processes import Processes


@pytest.mark.parametrize("size", [0, 1, 64, 65_536, 300_000])
@pytest.mark.parametrize("hint_delta", [0, -1, 1, -64])
def test_read_file_returns_the_whole_file_whatever_the_listed_size(
    tmp_path: Path, size: int, hint_delta: int
) -> None:
    # The listed size is stale when the file changed after the scan: grew or shrank.
    data = bytes(i % 251 for i in range(size))
    path = tmp_path / "f"
    path.write_bytes(data)
    assert read_file(str(path), max(0, size + hint_delta)) == data


def _cached_bytes(processes: Processes, path: Path) -> int:
    """Bytes of ``path`` in the page cache, as util-linux's fincore counts them."""
    out = processes.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(out.strip())


@pytest.mark.skipif(
    shutil.which("fincore") is None or not hasattr(os, "posix_fadvise"),
    reason="needs util-linux's fincore and posix_fadvise",
)
def test_read_file_leaves_no_pages_of_the_file_in_the_page_cache(
    processes: Processes, tmp_path: Path
) -> None:
    # An upload reads each member once: its pages would only push the rest out of memory.
    data = os.urandom(256 * 1024)
    path = tmp_path / "member"
    with path.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())  # dirty pages cannot be dropped, written ones can
    assert path.read_bytes() == data
    assert _cached_bytes(processes, path) > 0
    assert read_file(str(path), len(data)) == data
    assert _cached_bytes(processes, path) == 0


def test_member_reader_reads_in_order_and_marks_missing_files(tmp_path: Path) -> None:
    count = RUN_FILES * 3 + 5  # several runs, the last one short
    paths = [f"d/{i}" for i in range(count)]
    (tmp_path / "d").mkdir()
    for i, path in enumerate(paths):
        if i != 70:
            (tmp_path / path).write_bytes(str(i).encode() * (i % 5))
    reader = MemberReader(str(tmp_path), threads=3)
    try:
        got = list(reader.read(paths, [len(str(i)) * (i % 5) for i in range(count)]))
    finally:
        reader.close()
    assert got == [None if i == 70 else str(i).encode() * (i % 5) for i in range(count)]


def test_member_reader_raises_other_errors(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()  # reading a directory is not "gone"
    reader = MemberReader(str(tmp_path))
    try:
        with pytest.raises(IsADirectoryError):
            list(reader.read(["dir"], [0]))
    finally:
        reader.close()


def _open_under(directory: Path) -> list[str]:
    """What this process holds open in ``directory`` (by path: other threads of a shared test
    process open and close descriptors of their own meanwhile)."""
    opened = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since listed
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target == str(directory) or target.startswith(f"{directory}/"):
                opened.append(target)
    return opened


def test_member_reader_opens_its_root_at_the_first_read_and_closes_it(tmp_path: Path) -> None:
    root = tmp_path / "not yet"
    reader = MemberReader(str(root))  # an upload checks its root later
    root.mkdir()
    (root / "f").write_bytes(b"abc")
    assert _open_under(root) == []
    assert list(reader.read(["f"], [3])) == [b"abc"]
    assert _open_under(root) == [str(root)]  # the root, kept for the next reads
    reader.close()
    reader.close()
    assert _open_under(root) == []
